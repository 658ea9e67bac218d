# SPDX-License-Identifier: Apache-2.0
# replicatest.py: a cluster of real rdzvd --peers replicas on 127.0.0.1 (each on a port p whose
# p + 1, the Raft link, is free too), its serving leader, and a TestCase that closes it and checks
# the replicas' logs for sanitizer reports.
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from rdzvtest import HOST, RDZVD, Client, die_with_parent, ephemeral_ports, kill_proc, track

T_LEADER = 10.0  # seconds a test waits for a serving leader (elections take ~0.3-1 s)


def free_port_pair():
    """A port p with p and p + 1 both free on HOST (the main port and the Raft link), below the
    ephemeral range when there is room, as a deployment's fixed port is: a replica started again
    on its port while it was down finds it free, not taken as some connection's local port."""
    lo, hi = ephemeral_ports()
    rng = random.Random()
    for i in range(400):
        if i < 200 and lo > 2048:
            p = rng.randrange(1024, lo - 1)
        else:
            with socket.socket() as s:
                s.bind((HOST, 0))
                p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                # As rdzvd binds (libuv sets SO_REUSEADDR): a port held only by connections in
                # TIME_WAIT is free to it. Without this, after a test that opened thousands of
                # connections (connect() takes odd ports, bind() even ones) no pair was found.
                for x in (a, b):
                    x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                a.bind((HOST, p))
                b.bind((HOST, p + 1))
            return p
        except OSError:
            continue
    raise AssertionError("no two free consecutive ports")


class Replica:
    def __init__(self, tmp, i, peers, port, extra=()):
        self.i, self.port, self.peers, self.extra = i, port, peers, list(extra)
        self.state = os.path.join(tmp, "state%d" % i)
        self.log_path = os.path.join(tmp, "replica%d.log" % i)
        self.proc = None
        self.start()

    def start(self):
        self.log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RDZVD_")}
        self.proc = track(subprocess.Popen(
            [RDZVD, "--peers", self.peers, "--port", str(self.port), "--bind", HOST,
             "--state-dir", self.state, "-l", "info"] + self.extra,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, env=env,
            preexec_fn=die_with_parent()))

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        kill_proc(self.proc)
        self.proc.wait()
        self.log.close()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


class Cluster:
    def __init__(self, n=3, token=None, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="rdzv-replicas-")
        extra = list(extra)
        if token:
            path = os.path.join(self.tmp, "token")
            with open(path, "w") as f:
                f.write(token)
            os.chmod(path, 0o600)
            extra += ["--token-file", path]
        ports = []
        while len(ports) < n:
            p = free_port_pair()
            if all(abs(p - q) > 1 for q in ports):
                ports.append(p)
        self.peers = ",".join("%s:%d" % (HOST, p) for p in ports)
        self.r = [Replica(self.tmp, i, self.peers, ports[i], extra) for i in range(n)]
        self.clients = []

    def close(self):
        for c in self.clients:
            c.close()
        for r in self.r:
            r.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serving(self, r):
        """A client of replica r that the leader serves, else None (a follower closes it)."""
        if not r.alive():
            return None
        c = None
        try:
            c = Client(r.port, timeout=2.0)
            c.ping()
            return c
        except (OSError, AssertionError):
            if c:
                c.close()
            return None

    def leader(self, timeout=T_LEADER):
        """(replica, client) of the serving leader among the live replicas."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.r:
                c = self.serving(r)
                if c:
                    self.clients.append(c)
                    return r, c
            time.sleep(0.05)
        raise AssertionError("no replica serves within %.0f s; logs:\n%s" % (
            timeout, "\n".join(r.text()[-2000:] for r in self.r)))


class ClusterCase(unittest.TestCase):
    """Tests on a Cluster, closed at the end, whose replicas' logs must hold no sanitizer report
    (test_replica_link.py's too)."""

    def cluster(self, **kw):
        c = Cluster(**kw)
        self.addCleanup(c.close)
        self.addCleanup(self.no_sanitizer_report, c)
        return c

    def no_sanitizer_report(self, cl):
        for r in cl.r:
            for what in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                self.assertNotIn(what, r.text())
