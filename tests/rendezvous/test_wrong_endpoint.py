# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent pointed at a port that is not rdzvd: rdzvd's own HTTP status port, any HTTP
server, a listener that never answers, one that answers another protocol, one that closes at
once. The agent names what answered in one line and exits 1 within --connect-timeout; it never
loops reconnecting, nor speaks of workers that never started. Waiting for an rdzvd that is not
up says so every 10 s with the time left."""
import datetime
import os
import re
import shutil
import socket
import subprocess
import threading
import time

from agenttest import AGENT, AgentTestCase, agent_cmd, finish, main, start

TIMEOUT = 12  # --connect-timeout of these agents (s)


class Listener:
    """A TCP listener on 127.0.0.1 that answers each connection as mode says."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stopped = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.mode == "garbage":
                c.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
            elif self.mode == "http":  # answers once the request line is whole, as HTTP does
                threading.Thread(target=self.http, args=(c,), daemon=True).start()
            elif self.mode == "close":
                c.close()

    @staticmethod
    def http(c):
        data = b""
        try:
            while b"\n" not in data:
                got = c.recv(4096)
                if not got:
                    return
                data += got
            c.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            c.close()
        except OSError:
            pass

    def close(self):
        self.stopped = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def start_agent(port, timeout=TIMEOUT):
    """An agent at 127.0.0.1:port with --connect-timeout timeout: (process, start, timeout)."""
    return (start(agent_cmd(f"127.0.0.1:{port}", "--nnodes", "1", "--rdzv-id", "wrong",
                            "--connect-timeout", str(timeout), worker=["true"])),
            time.monotonic(), timeout)


def ended(started):
    """(exit code, stderr, seconds it took) of an agent start_agent started: by its own log's
    first and last times when it has two (it may have ended long before the test that reads it
    runs: those started in setUpClass wait for the tests before them), else as the test saw."""
    p, t0, timeout = started
    rc, _, err = finish(p, timeout=timeout + 20)
    took = time.monotonic() - t0
    stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", err, re.M)
    if len(stamps) >= 2:
        took = (datetime.datetime.fromisoformat(stamps[-1]) -
                datetime.datetime.fromisoformat(stamps[0])).total_seconds()
    return rc, err, took


class TestWrongEndpoint(AgentTestCase):
    @classmethod
    def setUpClass(cls):
        """The agents that wait out a timeout start together, here; each test reads its own."""
        super().setUpClass()
        cls.peers = {mode: Listener(mode) for mode in ("silent", "close")}
        cls.refused = socket.socket()
        cls.refused.bind(("127.0.0.1", 0))  # a port nothing listens on
        cls.started = {mode: (li.port, start_agent(li.port)) for mode, li in cls.peers.items()}
        port = cls.refused.getsockname()[1]
        cls.started["refused"] = (port, start_agent(port, timeout=25))

    @classmethod
    def tearDownClass(cls):
        for li in cls.peers.values():
            li.close()
        cls.refused.close()
        super().tearDownClass()

    def run_agent(self, port, timeout=TIMEOUT):
        return ended(start_agent(port, timeout))

    def assert_named(self, port, mode, expect, settles_at_once):
        if mode in self.started:
            port, started = self.started[mode]
            rc, err, took = ended(started)
        else:
            rc, err, took = self.run_agent(port)
        self.assertEqual(rc, 1, err)
        last = err.strip().splitlines()[-1]
        self.assertIn(f"127.0.0.1:{port} {expect}", last, err)
        self.assertIn("check --endpoint", last, err)
        self.assertNotIn("workers keep running", err)
        self.assertNotIn("sent nothing", err)
        # A peer that answers another protocol settles it; silence takes --connect-timeout.
        self.assertLess(took, TIMEOUT + 1.5, f"{mode}: took {took:.1f} s\n{err}")
        if settles_at_once:
            self.assertLess(took, 8, f"{mode}: took {took:.1f} s\n{err}")
        return err

    def listener(self, mode):
        li = Listener(mode)
        self.addCleanup(li.close)
        return li.port

    def test_rdzvds_own_status_port_is_named_an_http_server(self):
        _, mport = self.daemon_with_metrics()
        self.assert_named(mport, "status port", "answered like an HTTP server, not rdzvd", True)

    def test_an_http_server_is_named(self):
        self.assert_named(self.listener("http"), "http",
                          "answered like an HTTP server, not rdzvd", True)

    def test_another_protocol_is_quoted(self):
        self.assert_named(self.listener("garbage"), "garbage",
                          "answered 'SSH-2.0-OpenSSH_...', not rdzvd", True)

    def test_a_silent_listener_ends_within_the_connect_timeout(self):
        err = self.assert_named(None, "silent",
                                "accepted the connection but answered nothing", False)
        self.assertIn("not rdzvd?", err)

    def test_a_listener_that_closes_at_once_ends_within_the_connect_timeout(self):
        err = self.assert_named(None, "close",
                                "closed the connection without answering", False)
        self.assertIn("not rdzvd?", err)

    def test_waiting_for_rdzvd_says_so_every_10_s_with_the_time_left(self):
        port, started = self.started["refused"]
        rc, err, took = ended(started)
        self.assertEqual(rc, 68, err)  # nothing answered: its own exit status
        notes = [ln for ln in err.splitlines() if "waiting for rdzvd at" in ln]
        self.assertEqual(len(notes), 2, err)
        self.assertIn("(connection refused): 15 s left of --connect-timeout", notes[0])
        self.assertIn("5 s left", notes[1])
        self.assertIn(f"cannot reach rdzvd at 127.0.0.1:{port} within 25 s", err)
        self.assertLess(took, 26.5, err)

    def test_a_port_in_the_ephemeral_range_is_never_its_own_rdzvd(self):
        """Nothing listens on 127.0.0.1:P, P in the kernel's ephemeral range (issue 72, case 1):
        a connect() there may get P itself as its source port and connect to itself, and an
        agent that then speaks reads its own HELLO and JOIN. In a network namespace of its own
        whose ephemeral range is P and P + 1, the first connect() does (checked first). The agent
        closes each such connection before a byte, and gives up after --connect-timeout as for
        any refused connection (exit status 68), never with "unexpected JOIN from rdzvd"."""
        if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
            self.skipTest("needs root, unshare and ip: a network namespace of its own")
        port = 40000
        netns = ("ip link set lo up && echo '%d %d' > /proc/sys/net/ipv4/ip_local_port_range "
                 "&& exec \"$@\"" % (port, port + 1))
        probe = ("import socket; s = socket.socket(); s.connect(('127.0.0.1', %d)); "
                 "print(s.getsockname()[1])" % port)
        r = subprocess.run(["unshare", "--net", "sh", "-c", netns, "sh", "/usr/bin/python3", "-c",
                            probe], capture_output=True, text=True, timeout=30)
        if r.returncode != 0 and "Operation not permitted" in r.stderr:
            self.skipTest("no network namespace here: " + r.stderr.strip())
        self.assertEqual(r.stdout.strip(), str(port), "no self-connect to test: " + r.stderr)
        p = start(["unshare", "--net", "sh", "-c", netns, "sh", AGENT, "--endpoint",
                   "127.0.0.1:%d" % port, "--rdzv-id", "self", "--connect-timeout", "3",
                   "--log-level", "debug", "--", "true"])
        rc, _, err = finish(p, timeout=30)
        self.assertNotIn("unexpected", err)
        self.assertIn("connected to itself (no listener there): closed", err)
        self.assertIn("cannot reach rdzvd at 127.0.0.1:%d within 3 s (--connect-timeout): "
                      "connection refused" % port, err.strip().splitlines()[-1], err)
        self.assertEqual(rc, 68, err[-3000:])

    def test_messages_name_the_flags_as_typed(self):
        """A torchrun line (--master_addr/--master_port, no rdzvd there) ends
        with the flags the user typed, not rdzv's --endpoint; a bad value is named as typed
        too, an underscored one or a prefix."""
        port = self.refused.getsockname()[1]
        p = start([AGENT, "--master_addr", "127.0.0.1", "--master_port", str(port),
                   "--node_rank", "1", "--nnodes", "2", "--nproc_per_node", "1",
                   "--connect_timeout", "2", "--rdzv_id", "typed", "--", "true"])
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 68, err)
        last = err.strip().splitlines()[-1]
        self.assertIn(f"cannot reach rdzvd at 127.0.0.1:{port}", last, err)
        self.assertIn("check --master_addr/--master_port)", last, err)
        self.assertNotIn("--endpoint", err)
        # torchrun's c10d default endpoint, and a port from the environment: as named there.
        for args, env, named in (
                (["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                  "--rdzv_conf", "is_host=0"], {}, "--rdzv_endpoint"),
                (["--master_addr", "127.0.0.1", "--node_rank", "1"],
                 {"PET_MASTER_PORT": str(port)}, "--master_addr/PET_MASTER_PORT")):
            rc, _, err = finish(start([AGENT, *args, "--nnodes", "2", "--connect_timeout", "1",
                                       "--rdzv_id", "typed", "--", "true"], env=env),
                                timeout=30)
            self.assertEqual(rc, 68, err)
            self.assertIn(f"check {named})", err.strip().splitlines()[-1], err)
        for args, named in ((["--nproc_per_node", "x"], "invalid --nproc_per_node 'x'"),
                            (["--max_restarts", "-1"], "invalid --max_restarts '-1'"),
                            (["--node_rank", "x", "--nnodes", "2"], "invalid --node_rank 'x'"),
                            (["--master_port", "70000"], "invalid --master_port '70000'"),
                            (["--heartbeat_timeout", "x"], "invalid --heartbeat_timeout 'x'"),
                            (["--nnod", "0"], "invalid --nnodes '0'")):
            rc, _, err = finish(start([AGENT, *args, "--", "true"]), timeout=30)
            self.assertEqual(rc, 2, err)
            self.assertTrue(err.startswith(f"rdzv-agent: {named}: "), err)


if __name__ == "__main__":
    main()
