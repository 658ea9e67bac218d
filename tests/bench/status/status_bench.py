#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# status_bench.py [options]: does the HTTP status page stall the store?
#
# One rdzvd (-l warn, --metrics-port) holds JOBS one-node jobs, each of which had FAILURES worker
# failures (JOIN, then FAILURES x WORKER_EXIT -> EVENT restart -> READY -> ROUND: a restart event
# and a timeline mark each), driven over the rendezvous protocol by this script (no agents). Then
# store round trips (a GET of one key on the main store, one at a time, 1 ms apart, for --seconds)
# are timed twice: with no HTTP load, and while CLIENTS processes fetch the status page `/` in a
# loop (each a new connection, read to the end). Prints a markdown table on stdout: median, p99 and
# max of each, p99 and max as a ratio to no load, the page's size and the pages fetched per second;
# progress on stderr. The clients run at nice 19 (and, with 4 CPUs or more, apart from rdzvd and the
# timing process, which share the first): what is timed is rdzvd's stall, not the CPU the load
# generator itself takes. --rdzvd picks the binary (e.g. an older build, for a before/after row).
import argparse
import json
import multiprocessing
import os
import resource
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "pylib"))

HELLO, JOIN, JOINED, ROUND, WORKER_EXIT, EVENT, READY = 0xA0, 0xA2, 0xA3, 0xA4, 0xA8, 0xA9, 0xAB


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def frame(op, body):
    from authtest import frame as f
    return f(op, body)


class Node:
    """One job's one node, over the rendezvous protocol."""

    def __init__(self, port, run_id):
        from authtest import Peer
        self.p = Peer(port)
        self.run_id = run_id
        self.gen = 0

    def join(self):
        body = {"run_id": self.run_id, "node_id": "node-" + self.run_id,
                "host": "host-" + self.run_id, "nproc": 8, "node_rank": -1, "min": 1, "max": 1,
                "last_call_ms": 50, "max_restarts": 1000, "nccl": "off", "nccl_ids": 1,
                "rank_hint": False, "heartbeat_timeout_ms": 3600000,
                "join_timeout_ms": 3600000, "scale_up_now": False}
        self.p.sock.sendall(frame(HELLO, {"magic": "rdzv", "version": 1, "peer": "bench"}) +
                            frame(JOIN, body))

    def expect(self, want):
        while True:
            op, body = self.p.recv_json()
            if op == want:
                return body
            if op not in (HELLO, JOINED, EVENT, ROUND):
                raise AssertionError("job %s: op %#x %r" % (self.run_id, op, body))

    def fail(self, i):
        self.p.send(WORKER_EXIT, {"generation": self.gen, "rank": i % 8, "local_rank": i % 8,
                                  "exit_code": 3, "signal": 0, "time": time.time(),
                                  "host": "host-" + self.run_id})

    def ready(self):
        self.p.send(READY, {"generation": self.gen})


def make_jobs(port, n, failures):
    nodes = [Node(port, "bench-job-%05d" % i) for i in range(n)]
    for nd in nodes:
        nd.join()
    for nd in nodes:
        nd.expect(JOINED)
        nd.gen = nd.expect(ROUND)["generation"]
    for f in range(failures):
        for nd in nodes:
            nd.fail(f)
        for nd in nodes:
            ev = nd.expect(EVENT)
            assert ev["type"] == "restart", ev
            nd.ready()
        for nd in nodes:
            nd.gen = nd.expect(ROUND)["generation"]
        note("  failure %d of %d in each of %d jobs" % (f + 1, failures, n))
    return nodes


def fetcher(mport, stop, count, nbytes, cpus):
    # rdzvtest's handlers (inherited) would wait for the count's lock, which a sibling
    # terminated while holding it never gives back: end at once instead.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.nice(19)  # the load generator's own CPU use is not what is measured
    req = b"GET / HTTP/1.0\r\n\r\n"
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", mport), timeout=60) as c:
                c.sendall(req)
                got = 0
                while True:
                    b = c.recv(1 << 16)
                    if not b:
                        break
                    got += len(b)
            with count.get_lock():
                count.value += 1
            nbytes.value = got
        except OSError:
            time.sleep(0.01)


def round_trips(d, seconds):
    from rdzvtest import Client
    c = Client(d.port, timeout=120)  # a stall is timed, not an error
    c.set(b"bench/key", b"v" * 64)
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        c.get(b"bench/key")
        out.append(time.perf_counter() - t0)
        time.sleep(0.001)
    c.close()
    return out


def stats(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))], xs[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rdzvd", default=os.path.join(SRC, "build", "daemon", "rdzvd"))
    ap.add_argument("--jobs", type=int, default=1200)
    ap.add_argument("--failures", type=int, default=8)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--label", default=None)
    a = ap.parse_args()
    os.environ["RDZVD"] = os.path.abspath(a.rdzvd)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    from rdzvtest import Daemon
    pfile = os.path.join(tempfile.mkdtemp(prefix="rdzv-status-bench-"), "mport")
    d = Daemon("--metrics-port", "0", "--metrics-port-file", pfile, log_level="warn")
    try:
        while not os.path.exists(pfile):
            time.sleep(0.02)
        time.sleep(0.05)
        with open(pfile) as f:
            mport = int(f.read())
        # With 4 CPUs or more: rdzvd and this process (the round trips) on the first (a
        # wake-up across CPUs costs 60-90 us in these VMs: docs/BENCHMARKS.md, "Under load"), the
        # HTTP clients on the rest, so that what is timed is rdzvd's own stall.
        ncpu = len(os.sched_getaffinity(0))
        cpus = sorted(os.sched_getaffinity(0))
        fetch_cpus = set(cpus[1:]) if ncpu >= 4 else None
        if fetch_cpus:
            os.sched_setaffinity(d.pid, {cpus[0]})
            os.sched_setaffinity(0, {cpus[0]})
        note("%s: %d jobs x %d failures, %d CPUs%s" % (a.rdzvd, a.jobs, a.failures, ncpu,
                                                     " (pinned)" if fetch_cpus else ""))
        t0 = time.monotonic()
        nodes = make_jobs(d.port, a.jobs, a.failures)
        note("  made in %.1f s" % (time.monotonic() - t0))
        note("  round trips, no HTTP load (%.0f s)" % a.seconds)
        idle = round_trips(d, a.seconds)
        stop = multiprocessing.Event()
        count = multiprocessing.Value("l", 0)
        nbytes = multiprocessing.Value("l", 0)
        procs = [multiprocessing.Process(target=fetcher,
                                         args=(mport, stop, count, nbytes, fetch_cpus))
                 for _ in range(a.clients)]
        for p in procs:
            p.start()
        time.sleep(1)
        note("  round trips, %d clients fetching / (%.0f s)" % (a.clients, a.seconds))
        c0, t1 = count.value, time.monotonic()
        loaded = round_trips(d, a.seconds)
        rate = (count.value - c0) / (time.monotonic() - t1)
        stop.set()
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(10)
        (m0, p0, x0), (m1, p1, x1) = stats(idle), stats(loaded)
        label = a.label or a.rdzvd
        print("| rdzvd | jobs x failures | clients on `/` | page | pages/s | round trip median "
              "| p99 | max | p99 / no load | max / no load |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        print("| %s | %d x %d | 0 | - | - | %.0f us | %.0f us | %.1f ms | 1.00 | 1.00 |"
              % (label, a.jobs, a.failures, m0 * 1e6, p0 * 1e6, x0 * 1e3))
        print("| %s | %d x %d | %d | %.0f KiB | %.0f | %.0f us | %.0f us | %.1f ms | %.2f | %.2f |"
              % (label, a.jobs, a.failures, a.clients, nbytes.value / 1024, rate, m1 * 1e6,
                 p1 * 1e6, x1 * 1e3, p1 / p0, x1 / x0))
        for nd in nodes:
            nd.p.close()
    finally:
        d.kill()


if __name__ == "__main__":
    main()
