#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# stateful_rendezvous.py: a stateful fuzzer for rdzvd's rendezvous protocol. From a
# seed, a sequence of actions by several connections against one real rdzvd: honest agents that
# JOIN, heartbeat, report failures and READY as rdzv-agent does, mixed with hostile ones (forged
# resumes at the edges of every field, takeovers with a wrong secret, WORKER_EXITs for other
# nodes and with impossible values, garbage frames), connections closed, and with --state-dir
# rdzvd SIGKILLed and restarted on the same directory. After every few actions:
#   - rdzvd is alive and its log has no sanitizer report (AddressSanitizer, LeakSanitizer, UBSan);
#   - per job in STATUS: no node rank held twice; generation and restart count never go back
#     (across restarts with --state-dir too); the restart count within --max-restarts;
#   - in --state-dir: no job's files hold another job's run id.
#
# Usage: stateful_rendezvous.py --seeds FILE   replay a corpus ("SEED token=0|1 state=0|1" a line)
#        stateful_rendezvous.py --explore N    N random seeds; prints the failing ones
# RDZVD names the daemon (meson sets it: the build's own, ASan in the sanitizer build).

import argparse
import json
import os
import random
import re
import select
import secrets
import shutil
import sys
import tempfile
import time

import authtest
from authtest import (ERROR, EVENT, HEARTBEAT, JOIN, JOINED, LEAVE, READY,  # noqa: F401
                      ROUND, STATUS, STATUS_REPLY, WORKER_EXIT, Peer)
from rdzvtest import Daemon

EDGES = [0, 1, -1, 2, 3, 100000, 100001, 2**31, 2**53 - 1, 2**53, 2**63 - 1, -2**63]
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:")
T = 2.0  # seconds a reply may take


class Violation(Exception):
    pass


# What a peer's I/O may raise when rdzvd refuses or closes it (recv_json of a closed connection
# is None: TypeError at unpacking).
ERRS = (OSError, AssertionError, ValueError, TypeError)


def join_body(run_id, node_id, mx, resume=None, secret=None):
    """The JOIN of authtest with this fuzzer's short last call and two restarts."""
    return authtest.join_body(run_id, node_id, mx, resume, host="h-" + node_id, last_call_ms=30,
                              max_restarts=2, secret=secret)


class Agent:
    """An honest agent: what rdzv-agent sends, minus workers."""

    def __init__(self, fz, run_id, node_id, mx):
        self.fz, self.run_id, self.node_id, self.mx = fz, run_id, node_id, mx
        self.peer, self.secret, self.round = None, "", None

    def connect(self):
        self.close()
        try:
            self.peer = self.fz.open_peer()
            resume = None
            if self.round:
                r = self.round
                resume = {"generation": r["generation"], "node_rank": r["node_rank"],
                          "nnodes": r["nnodes"], "rank_offset": r["rank_offset"],
                          "world_size": r["world_size"], "restart_count": r["restart_count"],
                          "master_port": r["master_port"], "left": False}
            self.peer.send(JOIN, join_body(self.run_id, self.node_id, self.mx, resume,
                                           self.secret))
            self.drain()
        except ERRS:
            self.close()

    def drain(self):
        """Read what rdzvd sent, as an agent does: JOINED's secret, ROUNDs, EVENT restart."""
        while self.peer and select.select([self.peer.sock], [], [], 0.02)[0]:
            f = self.peer.recv(timeout=T)
            if f is None:
                self.close()
                return
            op, body = f[0], json.loads(f[1]) if f[1] else {}
            if op == JOINED:
                self.secret = body.get("secret", self.secret)
            elif op == ROUND:
                self.round = body
            elif op == EVENT and body.get("type") == "restart":
                self.peer.send(READY, {"generation": body["generation"]})
            elif op == ERROR:
                self.close()
                return

    def failure(self):
        """The WORKER_EXIT of its worker (exit code 1) in its round."""
        return {"generation": self.round["generation"], "rank": self.round["rank_offset"],
                "local_rank": 0, "exit_code": 1, "signal": 0, "time": time.time(),
                "host": "h-" + self.node_id}

    def close(self):
        if self.peer:
            self.peer.close()
        self.peer = None


class Fuzzer:
    def __init__(self, seed, token, state):
        self.rng = random.Random(seed)
        self.seed, self.token, self.state = seed, token, state
        self.tmp = tempfile.mkdtemp(prefix="rdzv-stateful-")
        self.secret = None
        args = []
        if token:
            self.secret = secrets.token_hex(16).encode()
            path = os.path.join(self.tmp, "token")
            with open(path, "wb") as f:
                f.write(self.secret)
            os.chmod(path, 0o600)
            args += ["--token-file", path]
        if state:
            args += ["--state-dir", os.path.join(self.tmp, "state")]
        self.args = args
        self.d = Daemon(*args, log_level="info")
        self.logs = []
        self.log_mark = 0  # lines of the current daemon's log already looked at
        self.seen = {}  # run_id -> (generation, restart_count) highest seen
        self.runs = ["job%d" % i for i in range(self.rng.randint(1, 3))]
        self.agents = [Agent(self, run, "%s-n%d" % (run, k), 2) for run in self.runs
                       for k in range(self.rng.randint(1, 3))]

    def open_peer(self):
        p = Peer(self.d.port, timeout=T)
        try:
            if self.secret:
                p.authenticate(self.secret)
            else:
                p.hello()
        except BaseException:
            p.close()
            raise
        return p

    # ---- hostile actions ----

    def forged_join(self):
        run = self.rng.choice(self.runs + ["nojob"])
        victim = self.rng.choice(self.agents)
        node = victim.node_id if self.rng.random() < 0.6 else "forger"
        e = lambda: self.rng.choice(EDGES)  # noqa: E731
        resume = {"generation": e(), "node_rank": e(), "nnodes": e(), "rank_offset": e(),
                  "world_size": e(), "restart_count": e(), "master_port": e(), "left": False}
        mx = self.rng.choice([1, 2, 100000])
        if self.rng.random() < 0.3:  # well-formed, but a rank just past (or far past) --nnodes
            nr = self.rng.choice([mx, mx + 1, 2**31, 10**9])
            resume.update({"node_rank": nr, "nnodes": nr + 1, "rank_offset": 0,
                           "world_size": nr + 1,
                           "generation": self.rng.choice([1, 2**53, 2**63 - 1]),
                           "restart_count": self.rng.choice([0, 2**63 - 1]), "master_port": 0})
        elif self.rng.random() < 0.5 and victim.round:
            resume.update({k: victim.round[k] for k in ("generation", "nnodes", "world_size",
                                                         "rank_offset", "master_port",
                                                         "restart_count")})
            resume["node_rank"] = victim.round["node_rank"]
        body = join_body(run, node, mx, resume,
                         self.rng.choice([None, "0" * 64, secrets.token_hex(32)]))
        self.one_shot(JOIN, body)

    def forged_exit(self):
        a = self.rng.choice(self.agents)
        if not a.peer or not a.round:
            return
        e = lambda: self.rng.choice(EDGES)  # noqa: E731
        w = {"generation": a.round["generation"], "rank": e(), "local_rank": e(),
             "exit_code": e(), "signal": e(), "time": time.time(), "host": "x",
             "reason": self.rng.choice(["", "hung\nforged", "r" * 300])}
        try:
            a.peer.send(WORKER_EXIT, w)
            a.drain()
        except ERRS:
            a.close()

    def honest_exit(self):
        a = self.rng.choice(self.agents)
        if not a.peer or not a.round:
            return
        try:
            a.peer.send(WORKER_EXIT, a.failure())
            a.drain()
        except ERRS:
            a.close()

    def garbage(self):
        p = Peer(self.d.port, timeout=T)
        try:
            p.sock.sendall(bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 64))))
            p.closed_within(0.2)
        except OSError:
            pass
        finally:
            p.close()

    def one_shot(self, op, body):
        try:
            p = self.open_peer()
        except ERRS:
            return
        try:
            p.send(op, body)
            p.recv(timeout=0.2)
        except ERRS:
            pass
        finally:
            p.close()

    def restart(self):
        if not self.state:
            return
        self.d.kill()
        self.scan_removed()  # a job the old daemon removed since the last check starts afresh
        self.logs.append(self.d.log())
        self.d = Daemon(*self.args, log_level="info")
        self.log_mark = 0
        for a in self.agents:
            a.close()

    # ---- checks ----

    def check(self):
        for text in self.logs + [self.d.log()]:
            for s in SANITIZER:
                if s in text:
                    line = [l for l in text.splitlines() if s in l][0]
                    raise Violation("sanitizer: %s" % line.strip())
        if self.d.proc.poll() is not None:
            raise Violation("rdzvd exited with %s" % self.d.proc.returncode)
        try:
            p = self.open_peer()
            try:
                p.send(STATUS, {})
                op, st = p.recv_json(timeout=5)
            finally:
                p.close()
        except ERRS as e:
            time.sleep(0.2)
            if self.d.proc.poll() is not None or any(s in self.d.log() for s in SANITIZER):
                return self.check()
            raise Violation("no STATUS answer: %r" % e)
        if op != STATUS_REPLY:
            raise Violation("STATUS answered %r" % op)
        self.scan_removed()
        for job in st["jobs"]:
            if job.get("outcome", {}).get("ended_age_s", -1) >= 0:
                continue  # a job that ended and is only kept for status (--keep-ended)
            ranks = [n["node_rank"] for n in job.get("nodes", []) if n["node_rank"] >= 0]
            if len(ranks) != len(set(ranks)):
                raise Violation("job %s: a node rank held twice: %s" % (job["run_id"], ranks))
            if job["restart_count"] > job["max_restarts"]:
                raise Violation("job %s: restart %d past %d" % (
                    job["run_id"], job["restart_count"], job["max_restarts"]))
            g, rc = job["generation"], job["restart_count"]
            if g > 2**53:
                raise Violation("job %s: generation %d" % (job["run_id"], g))
            old = self.seen.get(job["run_id"])
            if old and (g < old[0] or rc < old[1]):
                raise Violation("job %s went back: generation %d -> %d, restarts %d -> %d" % (
                    job["run_id"], old[0], g, old[1], rc))
            self.seen[job["run_id"]] = (max(g, old[0] if old else 0), max(rc, old[1] if old else 0))
        self.check_files()

    def scan_removed(self):
        """Forget what was seen of a job rdzvd removed (its members all gone) or ended (its
        record is forgotten; after a restart its run id is a new job): it starts afresh at its
        next JOIN, or from a resume's checked claim when no record holds
        it. Reads the current daemon's log lines not read before."""
        lines = self.d.log().splitlines()
        for line in lines[self.log_mark:]:
            m = re.search(r"job=(\S+) gen=\d+ (removed|generation \d+ (failed|succeeded))",
                          line)
            if m:
                self.seen.pop(m.group(1), None)
        self.log_mark = len(lines)

    def check_files(self):
        sd = os.path.join(self.tmp, "state")
        if not self.state or not os.path.isdir(sd):
            return
        names = self.runs + ["nojob"]
        for fn in os.listdir(sd):
            if not fn.startswith("job-"):
                continue
            with open(os.path.join(sd, fn), "rb") as f:
                data = f.read()
            held = {r for r in names if r.encode() in data}
            # job1 contains "job1" only; a name that is another's prefix is not a violation
            owners = {r for r in held if not any(r != o and r in o for o in held)}
            if len(owners) > 1:
                raise Violation("%s holds the run ids of several jobs: %s" % (fn, sorted(owners)))

    def run(self, steps):
        actions = [(self.connect_some, 5), (self.heartbeat, 4), (self.forged_join, 3),
                   (self.forged_exit, 2), (self.honest_exit, 1), (self.garbage, 1),
                   (self.close_some, 1), (self.restart, 1)]
        weights = [w for _, w in actions]
        try:
            for i in range(steps):
                fn = self.rng.choices([a for a, _ in actions], weights)[0]
                try:
                    fn()
                except ERRS:
                    self.check()  # rdzvd dead or reporting is the finding; else go on
                for a in self.agents:
                    if a.peer:
                        try:
                            a.drain()
                        except ERRS:
                            a.close()
                if i % 8 == 7:
                    self.check()
            self.check()
        finally:
            for a in self.agents:
                a.close()
            self.logs.append(self.d.log())
            self.d.kill()

    def connect_some(self):
        a = self.rng.choice(self.agents)
        if not a.peer:
            a.connect()

    def heartbeat(self):
        a = self.rng.choice(self.agents)
        if a.peer:
            try:
                a.peer.send(HEARTBEAT, {"generation": a.round["generation"] if a.round else 0})
                a.drain()
            except ERRS:
                a.close()

    def close_some(self):
        self.rng.choice(self.agents).close()

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def log_tail(seed, logs):
    """The daemon's log (every incarnation's) explains a finding: its tail goes to stderr."""
    tail = "".join(logs)[-int(os.environ.get("STATEFUL_LOG_TAIL", "6000")):]
    sys.stderr.write("--- rdzvd log of seed %d (tail) ---\n%s\n" % (seed, tail))


def run_seeds(run_one, flags, default_steps):
    """The stateful fuzzers' seed runner: --seeds FILE replays a corpus ("SEED flag=0|1 ..." a
    line), --explore N adds N random seeds, each flag drawn at random. run_one(seed, steps,
    **flags) returns None, or why the seed failed. Returns the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds")
    ap.add_argument("--explore", type=int, default=0)
    ap.add_argument("--steps", type=int, default=default_steps)
    a = ap.parse_args()
    runs = []
    if a.seeds:
        with open(a.seeds) as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if words:
                    opt = dict(w.split("=") for w in words[1:])
                    runs.append((int(words[0]), {k: opt.get(k) == "1" for k in flags}))
    rng = random.Random()
    runs += [(rng.randrange(2**31), {k: rng.random() < 0.5 for k in flags})
             for _ in range(a.explore)]
    failed, t0 = 0, time.monotonic()
    for seed, opt in runs:
        why = run_one(seed, a.steps, **opt)
        if why:
            failed += 1
            print("FAIL %d%s: %s" % (seed, "".join(" %s=%d" % (k, opt[k]) for k in flags), why),
                  flush=True)
    print("%d runs, %d failed, %.1f s" % (len(runs), failed, time.monotonic() - t0))
    return 1 if failed else 0


def run_one(seed, steps, token, state):
    fz = Fuzzer(seed, token, state)
    try:
        fz.run(steps)
        return None
    except Violation as v:
        log_tail(seed, fz.logs)
        return str(v)
    finally:
        fz.cleanup()


if __name__ == "__main__":
    sys.exit(run_seeds(run_one, ("token", "state"), 48))
