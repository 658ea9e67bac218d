#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_memory_bounds.py: every bound of rdzvd at once. For 30 s (RDZV_MEMORY_TEST_S),
# clients push each thing a client can make rdzvd hold, at full rate, each reconnecting as soon as
# rdzvd closes it: values and empty queue items in the main store, WAITs on missing keys, requests
# left incomplete, replies never read, notifications of a key watched 2,000 times on each of 8
# connections that never read, silent connections from one address, one-node jobs formed
# and left (held in their records, --state-dir, until --abandon-after). Beside them an honest job
# (two rdzv-agents, rdzv-train on gloo, 2 x 2 ranks), formed just before, trains to its end, and a
# fresh TCPStore client from another address (127.0.0.3: another host) is answered every second.
# rdzvd's peak RSS (VmHWM; meson sets MALLOC_PERTURB_, so every byte allocated is touched) stays
# within what the limits add up to, each at its stated cost (rdzvd(8), LIMITS: PER_CONN, PER_JOB,
# PER_ENDED, SLACK below), and every gauge stays within its limit at every sample.
# A job started while the attacker holds every --max-jobs slot is refused (that is the bound: the
# operator sees rdzvd_jobs_held at its limit and cancels); the honest job forms first for that.
#
# Each attacker is a process of its own; rdzvd and they share the machine's cores, as on a node.

import multiprocessing
import os
import queue
import socket
import struct
import tempfile
import time
import unittest
import warnings

from agenttest import agent_cmd, finish, job_status, start
from authtest import JOIN, JOINED, ROUND, Peer, join_body
from metricstest import http_get
from rdzvtest import Client, DaemonTestCase, asan_build, enc, main, s

KIB, MIB = 1 << 10, 1 << 20
# 30 s: in a 60 s run rdzvd's peak RSS and the store's gauge came at 1.1 s, the 16 jobs by 5.7 s,
# the 192 connections by 8.6 s, and nothing grew after (the suite's time; 60 s by hand).
SECONDS = float(os.environ.get("RDZV_MEMORY_TEST_S", "30"))
BUILD = os.environ.get("RDZV_BUILD_ROOT", "build")
TRAIN = os.path.join(BUILD, "train", "rdzv-train")
# About half of the attack's time at the rate it trains under attack here (1,200 steps took
# 30 s of a 60 s attack on the 2-vCPU machine).
HONEST_STEPS = int(os.environ.get("RDZV_MEMORY_TEST_STEPS", str(int(20 * SECONDS))))

# The limits under test.
STORE = 16 * MIB        # --max-store-bytes (the main store: half)
INPUT = 8 * MIB         # --max-input-bytes
CONNS = 256             # --max-conns (connections, job stores and journals)
OUTBUF = 128 * KIB      # --max-outbuf
WAIT_KEYS = 4096        # --max-wait-keys
JOBS = 16               # --max-jobs
ENDED = 100             # --keep-ended-max (the default)
# What rdzvd(8) states each costs beyond the bytes its limit counts: a connection (its struct,
# its libuv handle, its session; replies held are up to twice --max-outbuf: the queue that
# pauses its reads and one reply), a job held (its struct, members, record, timeline) and an
# ended job kept, and the allocator's slack over everything (fragmentation, the hash tables).
PER_CONN = 8 * KIB + 2 * OUTBUF
PER_JOB = 64 * KIB
PER_ENDED = 4 * KIB
SLACK = 24 * MIB
BOUND = STORE + INPUT + CONNS * PER_CONN + JOBS * PER_JOB + ENDED * PER_ENDED + SLACK
# The same sum with the output the attack can queue: only attack_replies' connections (8) and
# attack_watches' watchers (8) hold any.
TIGHT = BOUND - (CONNS - 16) * 2 * OUTBUF


def reconnecting(port, until, setup, push, **kw):
    """Run push(client) at full rate until `until`, a new client (after setup(client)) each time
    rdzvd closes the last one. Returns how many times it was closed."""
    closed = 0
    while time.monotonic() < until:
        try:
            c = Client(port, timeout=5, **kw)
        except OSError:
            closed += 1
            time.sleep(0.01)
            continue
        try:
            setup(c)
            while time.monotonic() < until:
                push(c)
        except (OSError, AssertionError):
            closed += 1
        finally:
            c.close()
    return closed


def attack_values(port, until, n):
    big = b"v" * (64 * KIB)
    seq = iter(range(1 << 62))

    def push(c):
        c.send(b"".join(enc("modern", "SET", s(b"atk/%d/%d" % (n, next(seq))), s(big))
                        for _ in range(8)))
        c.ping(n)
    return reconnecting(port, until, lambda c: None, push)


def attack_items(port, until, n):
    burst = enc("modern", "QUEUE_PUSH", s(b"atkq/%d" % n), s(b"")) * 5000

    def push(c):
        c.send(burst)
        c.ping(n)
    return reconnecting(port, until, lambda c: None, push)


def pool(port, until, k, timeout, opened, push, pause):
    """Keeps k connections open (opened(c) on each new one) and push(c) on each every pause s,
    a connection rdzvd closed (push raised) replaced at once. Returns how many were closed."""
    conns, closed = [], 0
    while time.monotonic() < until:
        while len(conns) < k and time.monotonic() < until:
            try:
                c = Client(port, timeout=timeout)
                opened(c)
                conns.append(c)
            except (OSError, AssertionError):
                closed += 1
                break
        for c in list(conns):
            try:
                push(c)
            except socket.timeout:
                pass  # rdzvd reads it later, or paused reading it: as it should
            except (OSError, AssertionError):
                conns.remove(c)
                c.close()
                closed += 1
        time.sleep(pause)
    for c in conns:
        c.close()
    return closed


def still_open(c):
    if not c.is_open():
        raise ConnectionResetError("closed by rdzvd")


def attack_waits(port, until, n):
    """Keeps 24 connections each waiting on --max-wait-keys missing keys."""
    seq = iter(range(1 << 62))

    def opened(c):
        c.wait_send([b"atkw/%d/%d/%d" % (n, next(seq), k) for k in range(WAIT_KEYS)])
    return pool(port, until, 24, 5, opened, still_open, 0.05)


def attack_input(port, until, n):
    """Keeps 24 connections each holding a SET announced at 4 MiB, sent a part at a time."""
    head = enc("modern", "SET", s(b"atki/%d" % n), s(b""))
    # the SET's frame with its value's length made 4 MiB; the value follows 64 KiB at a time
    head = head[:-8] + struct.pack("<Q", 4 * MIB)
    part = b"i" * (64 * KIB)
    return pool(port, until, 24, 1, lambda c: c.send(head), lambda c: c.send(part), 0.02)


def attack_replies(port, until, n):
    """8 connections asking for a 100 KiB value again and again, never reading a reply."""
    get = enc("modern", "GET", s(b"atk/big")) * 64
    return pool(port, until, 8, 0.2, lambda c: None, lambda c: c.send(get), 0)


def attack_watches(port, until, n):
    """8 PyTorch 1.x connections, each watching one key 2,000 times and never reading, while
    another of its connections writes a 64 KiB value to that key again and again: each write is
    one notification a watcher (a key is watched once a connection; old and new value, 128 KiB),
    and a watcher past twice --max-outbuf is closed before the next is made. Returns how many
    were closed."""
    key = b"atkwatch/%d" % n
    big = b"w" * (64 * KIB)
    watch = enc("2.0", "WATCH_KEY", s(key)) * 2000
    conns, closed, setter = [], 0, None
    while time.monotonic() < until:
        while len(conns) < 8 and time.monotonic() < until:
            try:
                c = Client(port, timeout=5, dialect="2.0")
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KIB)
                c.send(watch)
                conns.append(c)
            except (OSError, AssertionError):
                closed += 1
                time.sleep(0.01)
                break
        try:
            setter = setter or Client(port, timeout=5)
            setter.send(enc("modern", "SET", s(key), s(big)))
            setter.ping(n)
        except (OSError, AssertionError):
            if setter:
                setter.close()
            setter = None
        for c in list(conns):
            try:
                c.send(watch[:len(watch) // 2000])  # once more: nothing added; fails once closed
            except OSError:
                conns.remove(c)
                c.close()
                closed += 1
    for c in conns + ([setter] if setter else []):
        c.close()
    return closed


def attack_conns(port, until, n):
    """Silent connections from 127.0.0.2, as many as it can open, 400 kept on its side."""
    socks, opened = [], 0
    while time.monotonic() < until:
        sk = socket.socket()
        try:
            sk.bind(("127.0.0.2", 0))
            sk.settimeout(1)
            sk.connect(("127.0.0.1", port))
            opened += 1
            socks.append(sk)
        except OSError:
            sk.close()
            time.sleep(0.01)
        if len(socks) > 400:
            socks.pop(0).close()
    for sk in socks:
        sk.close()
    return opened


def attack_jobs(port, until, n):
    """One-node jobs, each JOINed, formed and left: held in their records until abandoned."""
    made = 0
    seq = iter(range(1 << 62))
    while time.monotonic() < until:
        p = Peer(port)
        try:
            p.hello()
            p.send(JOIN, join_body("atk-%d-%d" % (n, next(seq)), "n0", 1, last_call_ms=10))
            f = p.recv_json(timeout=5)
            if f and f[0] == JOINED:
                f = p.recv_json(timeout=5)
                made += f is not None and f[0] == ROUND
        except (OSError, AssertionError, ValueError, TypeError):
            pass
        finally:
            p.close()
    return made


ATTACKS = [attack_values, attack_items, attack_waits, attack_input, attack_replies, attack_watches,
           attack_conns, attack_jobs]
if os.environ.get("RDZV_MEMORY_TEST_ONLY"):  # one attacker alone, to see what it costs
    ATTACKS = [fn for fn in ATTACKS if fn.__name__ == os.environ["RDZV_MEMORY_TEST_ONLY"]]


def run_attack(fn, port, until, n, results):
    warnings.simplefilter("ignore", ResourceWarning)
    results.put((fn.__name__, fn(port, until, n)))


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


def gauge(text, name):
    return int(float(text.split("\n%s " % name)[1].split()[0]))


@unittest.skipIf(asan_build(), "rdzvd's RSS under ASan is its shadow memory and quarantine")
class EveryBoundAtOnce(DaemonTestCase):

    def test_rss_within_the_limits_and_an_honest_job_completes(self):
        state = tempfile.mkdtemp(prefix="rdzv-memory-")
        pfile = os.path.join(state, "metrics-port")
        d = self.daemon_without_quarantine(
            "--state-dir", state, "--max-store-bytes", str(STORE), "--max-input-bytes",
            str(INPUT), "--max-frame", str(INPUT), "--max-value-len", str(4 * MIB + KIB),
            "--max-conns", str(CONNS), "--max-outbuf", str(OUTBUF),
            "--max-wait-keys", str(WAIT_KEYS), "--max-jobs", str(JOBS), "--abandon-after", "3",
            "--request-timeout", "20", "--metrics-port", "0", "--metrics-port-file", pfile)
        with open(pfile) as f:
            mport = int(f.read())
        with Client(d.port) as c:
            c.set(b"atk/big", b"b" * (100 * KIB))
            c.ping(0)
        time.sleep(0.5)
        rss0 = status_kb(d.pid, "VmRSS") * KIB
        # The honest job forms first: past --max-jobs a new job is refused (the bound), so one
        # started after the job attacker filled it would be; this one must train to its end
        # while every bound is pushed.
        ep = "127.0.0.1:%d" % d.port
        worker = ([TRAIN, "--backend", "gloo", "--steps", str(HONEST_STEPS), "--log-every", "100"]
                  if os.access(TRAIN, os.X_OK)  # else (no CUDA build of it): a job that waits
                  else ["/bin/sh", "-c", "sleep %d" % (SECONDS // 2)])
        agents = [start(agent_cmd(ep, "--rdzv-id", "honest", "--nnodes", "2", "--nproc", "2",
                                  "--nccl", "off", "--last-call", "0.2", worker=worker))
                  for _ in range(2)]
        for a in agents:
            self.addCleanup(a.kill)
        deadline = time.monotonic() + 60
        while (job_status(ep, "honest") or {}).get("state") != "running":
            self.assertLess(time.monotonic(), deadline, "the honest job did not form")
            time.sleep(0.1)
        t_start = time.monotonic()
        until = t_start + SECONDS
        results = multiprocessing.Queue()
        procs = [multiprocessing.Process(target=run_attack, args=(fn, d.port, until, n, results),
                                         daemon=True)
                 for n, fn in enumerate(ATTACKS)]
        if attack_values in ATTACKS:
            procs.append(multiprocessing.Process(target=run_attack, daemon=True,
                                                 args=(attack_values, d.port, until, 99, results)))
        for p in procs:
            p.start()
            self.addCleanup(p.kill)
        samples = answered = 0
        took = None
        worst = {}
        agents_done = []
        while time.monotonic() < until:
            t0 = time.monotonic()
            m = http_get(mport, "/metrics")
            for name, limit in (("rdzvd_store_held_bytes", STORE),
                                ("rdzvd_input_held_bytes", INPUT),
                                ("rdzvd_descriptors_held", CONNS), ("rdzvd_jobs_held", JOBS)):
                v = gauge(m, name)
                worst[name] = max(worst.get(name, 0), v)
                self.assertLessEqual(v, limit, "%s past its limit:\n%s" % (name, m))
                self.assertEqual(gauge(m, name + "_limit"), limit)
            samples += 1
            try:
                # a fresh TCPStore client on another host than the attackers' is answered
                with Client(d.port, timeout=5, source="127.0.0.3") as c:
                    c.ping(samples)
                    self.assertEqual(len(c.get(b"atk/big")), 100 * KIB)
                    answered += 1
            except (OSError, AssertionError) as e:
                worst.setdefault("unanswered", []).append(repr(e))
            for a in agents:
                if a not in agents_done and a.poll() is not None:
                    agents_done.append(a)
                    took = time.monotonic() - t_start
            time.sleep(max(0, 1 - (time.monotonic() - t0)))
        try:
            pushed = dict(results.get(timeout=30) for _ in procs)
        except queue.Empty:
            self.fail("an attacker process died: %s" % [p.exitcode for p in procs])
        for p in procs:
            p.join(10)
        outs = [finish(a, timeout=60) for a in agents]
        hwm = status_kb(d.pid, "VmHWM") * KIB
        report = ("rdzvd's RSS %.1f MiB idle, peak %.1f MiB, bound %.1f MiB (%.1f for this "
                  "attack) over idle; gauges' peaks %s; attackers %s; fresh clients answered %d "
                  "of %d; the honest job ended %s s into the attack"
                  % (rss0 / MIB, hwm / MIB, BOUND / MIB, TIGHT / MIB, worst, pushed, answered,
                     samples, took and round(took, 1)))
        print(report)
        for rc, out, err in outs:
            self.assertEqual(rc, 0, "honest agent failed (%s):\n%s\n%s"
                             % (report, out, err[-3000:]))
        self.assertTrue(all(a in agents_done for a in agents),
                        "the honest job finished only after the attack: " + report)
        self.assertGreaterEqual(answered, samples - 2, report)  # a 5 s miss or two, loaded
        self.assertLessEqual(hwm - rss0, BOUND, report)
        self.assertLessEqual(hwm - rss0, TIGHT, report)
        # Every bound was met: each attacker was refused (closed) again and again, and the
        # gauges reached their limits (the store its main share at least).
        self.assertGreaterEqual(worst["rdzvd_store_held_bytes"], STORE // 2 - MIB, report)
        self.assertGreaterEqual(worst["rdzvd_jobs_held"], JOBS - 1, report)
        self.assertGreaterEqual(worst["rdzvd_descriptors_held"], CONNS * 3 // 4, report)
        for name in ("attack_values", "attack_items", "attack_waits", "attack_input",
                     "attack_watches"):
            self.assertGreater(pushed[name], 3, report)
        self.assertIsNotNone(d.find_log(r"refused: the store is full"))
        self.assertIsNotNone(d.find_log(r"--max-jobs"))
        self.assertIsNotNone(d.find_log(r"held more than --max-input-bytes|more than "
                                        r"--max-input-bytes"))
        self.assertIsNotNone(d.find_log(r"see --max-conns"))
        self.assertIsNone(d.proc.poll(), "rdzvd died:\n" + d.log()[-3000:])


if __name__ == "__main__":
    main()
