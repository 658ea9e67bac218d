#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# recorded_jobs_bench.py BUILD_DIR [--jobs N] [--trials N]: rdzvd restarted on a --state-dir that
# records N running one-node jobs (their agents gone: rdzvd was SIGKILLed under them), against an
# empty one. Measured from the exec of the new rdzvd: when its main port accepts a connection
# (a TCP connect completes and HELLO is answered), and when a new job's JOIN is answered JOINED;
# and the descriptors rdzvd holds once it serves. Prints a markdown table; not
# a timed test: run it by hand on a quiet machine.
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "pylib"))
from authtest import JOIN, JOINED, ROUND, Peer, join_body  # noqa: E402

HOST = "127.0.0.1"


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(rdzvd, state, port, n):
    return subprocess.Popen([rdzvd, "--port", str(port), "--bind", HOST, "--state-dir", state,
                             "--max-jobs", str(max(2 * n, 1024)), "--log-level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_hello(port, deadline):
    """The time HELLO is first answered on port (polling connects: the bench's client, not
    rdzvd, polls)."""
    while time.monotonic() < deadline:
        try:
            p = Peer(port, timeout=5)
            p.hello()
            p.close()
            return time.monotonic()
        except OSError:
            time.sleep(0.002)
    raise SystemExit("rdzvd did not answer HELLO in time")


def record_jobs(rdzvd, state, port, n):
    d = start(rdzvd, state, port, n)
    wait_hello(port, time.monotonic() + 30)
    peers = []
    for i in range(n):
        p = Peer(port, timeout=30)
        p.hello()
        p.send(JOIN, join_body("rec-%05d" % i, "n0", mx=1))
        peers.append(p)
    for p in peers:
        op, _ = p.recv_json(timeout=60)
        assert op == JOINED, op
        op, rnd = p.recv_json(timeout=60)
        assert op == ROUND and rnd["generation"] == 1, (op, rnd)
    d.send_signal(signal.SIGKILL)
    d.wait()
    for p in peers:
        p.close()


def fds_of(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def restart_once(rdzvd, state, port, n, trial):
    t0 = time.monotonic()
    d = start(rdzvd, state, port, n)
    t_hello = wait_hello(port, t0 + 120)
    p = Peer(port, timeout=60)
    p.hello()
    p.send(JOIN, join_body("fresh-%d-%d" % (os.getpid(), trial), "x0", mx=2, mn=2))
    op, _ = p.recv_json(timeout=60)
    t_join = time.monotonic()
    assert op == JOINED, (op, _)
    nfd = fds_of(d.pid)
    p.close()
    d.send_signal(signal.SIGKILL)
    d.wait()
    return t_hello - t0, t_join - t0, nfd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    rdzvd = os.path.join(a.build, "daemon", "rdzvd")
    rows = []
    for label, n in (("empty --state-dir", 0), ("%d recorded running jobs" % a.jobs, a.jobs)):
        state = tempfile.mkdtemp(prefix="rdzv-recbench-")
        try:
            port = free_port()
            if n:
                print("recording %d jobs..." % n, file=sys.stderr)
                record_jobs(rdzvd, state, port, n)
            res = []
            for t in range(a.trials):
                # Each trial on the same records: the one before was SIGKILLed too.
                res.append(restart_once(rdzvd, state, port, n, t))
                print("%s, trial %d: %s" % (label, t + 1, res[-1]), file=sys.stderr)
            rows.append((label, res))
        finally:
            shutil.rmtree(state, True)
    print("| state directory | HELLO answered (s) | first new JOIN answered (s) | "
          "descriptors held |")
    print("|---|---|---|---|")
    for label, res in rows:
        print("| %s | %s | %s | %s |" % (
            label, " / ".join("%.3f" % r[0] for r in res),
            " / ".join("%.3f" % r[1] for r in res), " / ".join("%d" % r[2] for r in res)))


if __name__ == "__main__":
    main()
