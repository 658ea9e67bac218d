#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# stateful_roles.py: who may do what, as a property of the system (proto/SECURITY.md). From a seed,
# a sequence of actions by every role against one real rdzvd (--token-file, --admin-token-file, with
# and without --state-dir) beside an honest job of two real rdzv-agents whose workers sleep:
#   - a new node of the honest job (a spare): JOIN, UNHEALTHY, CANCEL, WORKER_EXIT and LEAVE for
#     ranks it does not hold, disconnects;
#   - an impostor: JOIN naming an honest member's node id (seen in STATUS), with and without a
#     resume, with no secret or a wrong one; JOIN on the host of a node put aside;
#   - another job's members (JOIN, heartbeats, failures, CANCEL, UNHEALTHY, disconnects);
#   - a stranger with the agents' token: RELEASE and CANCEL_JOB of either job;
#   - the operator (the admin token): RELEASE of a node put aside, CANCEL_JOB of the other job;
#   - garbage frames; with --state-dir, rdzvd SIGKILLed and restarted on the same directory.
# After every step:
#   - rdzvd is alive, with no sanitizer report;
#   - the honest job runs generation 1 with no restart charged, both its nodes in it, the same
#     worker processes alive (untouched), and no node of its own put aside: only new nodes, on
#     their own word, ever are; after a restart its record brings it back as it was;
#   - a refused role was told so (RELEASE and CANCEL_JOB from the agents' token name the
#     operator); the other job never ends naming a node of the honest job.
#
# Usage: stateful_roles.py --seeds FILE    replay a corpus ("SEED state=0|1" a line)
#        stateful_roles.py --explore N     N random seeds; prints the failing ones
# RDZVD and RDZV_AGENT name the binaries (meson sets them).
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time

from authtest import JOIN, Peer
from rdzvtest import BUILD_ROOT, Daemon, die_with_parent, track
from stateful_rendezvous import (ERRS, HEARTBEAT, LEAVE, SANITIZER, STATUS, STATUS_REPLY,  # noqa
                                 WORKER_EXIT, Agent, Violation, join_body, log_tail, run_seeds)

UNHEALTHY, RELEASE, RELEASE_REPLY, CANCEL = 0xB4, 0xB5, 0xB6, 0xB7
CANCEL_JOB, CANCEL_JOB_REPLY = 0xB8, 0xB9
AGENT = os.environ.get("RDZV_AGENT", os.path.join(BUILD_ROOT, "agent", "rdzv-agent"))
HONEST = ("hon-a", "hon-b")
T = 2.0


class Spare(Agent):
    """A new node of the honest job: JOIN with the job's own values (--nnodes 2,
    --max-restarts 3), so that it is a spare, not refused."""

    def connect(self):
        self.close()
        try:
            self.peer = self.fz.open_peer()
            body = join_body(self.run_id, self.node_id, 2, None, self.secret)
            body.update({"min": 2, "max_restarts": 3})
            self.peer.send(JOIN, body)
            self.drain()
        except ERRS:
            self.close()


def secret_file(d, name):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(secrets.token_hex(32))
    os.chmod(path, 0o600)
    return path


class Roles:
    def __init__(self, seed, state):
        self.rng = random.Random(seed)
        self.state = state
        self.tmp = tempfile.mkdtemp(prefix="rdzv-roles-")
        self.token = secret_file(self.tmp, "token")
        self.admin = secret_file(self.tmp, "admin")
        self.args = ["--token-file", self.token, "--admin-token-file", self.admin]
        self.logs = []
        self.start_daemon()
        self.agents, self.pids = [], {}
        self.others = [Agent(self, "other", "other-n%d" % k, 2) for k in range(2)]
        self.spares = []  # protocol agents of the honest job, new node ids
        # node ids of new nodes put aside on their own word: a node that never held a place
        # is put aside by its node id only, never by the host it names (P1)
        self.aside_ids = set()
        self.start_honest()

    # ---- the daemon: one rdzvd (stateful_roles_replicas.py: three replicas) ----

    def start_daemon(self):
        if self.state:
            self.args += ["--state-dir", os.path.join(self.tmp, "state")]
        self.d = Daemon(*self.args, log_level="info")

    def endpoint(self):
        """The agents' --endpoint."""
        return "127.0.0.1:%d" % self.d.port

    def any_port(self):
        """Where a stray connection goes (garbage)."""
        return self.d.port

    def daemon_texts(self):
        """Every incarnation's log."""
        return self.logs + [self.d.log()]

    def daemon_gone(self):
        """Why rdzvd is not serving as it should (it exited), or None."""
        if self.d.proc.poll() is not None:
            return "rdzvd exited with %s" % self.d.proc.returncode
        return None

    def stop_daemon(self):
        self.logs.append(self.d.log())
        self.d.kill()

    # ---- the honest job: two real agents, workers that sleep ----

    def start_honest(self):
        worker = ["/bin/sh", "-c", 'echo $$ > "$OUT/pid.$RANK"; exec sleep 600']
        for host in HONEST:
            cmd = [AGENT, "--endpoint", self.endpoint(), "--nnodes", "2",
                   "--nproc", "1", "--rdzv-id", "honest", "--host", host, "--token-file",
                   self.token, "--nccl", "off", "--max-restarts", "3", "--grace", "1",
                   "--heartbeat-timeout", "30", "--connect-timeout", "60", "--", *worker]
            env = dict(os.environ, OUT=self.tmp)
            for k in ("SLURM_JOB_ID", "SLURM_NODEID", "PBS_JOBID", "SLURMD_NODENAME"):
                env.pop(k, None)
            self.agents.append(track(subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(
                    os.path.join(self.tmp, "agent-%s.log" % host), "wb"),
                preexec_fn=die_with_parent())))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(self.pids) < 2:
            for r in (0, 1):
                try:
                    with open(os.path.join(self.tmp, "pid.%d" % r)) as f:
                        self.pids[r] = int(f.read())
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
        if len(self.pids) < 2:
            raise Violation("the honest job's workers did not start")

    def open_peer(self, secret_path=None):
        with open(secret_path or self.token, "rb") as f:
            secret = f.read()
        return self.authenticated(self.d.port, secret)

    @staticmethod
    def authenticated(port, secret):
        p = Peer(port, timeout=T)
        try:
            p.authenticate(secret)
        except BaseException:
            p.close()
            raise
        return p

    def status(self):
        p = self.open_peer()
        try:
            p.send(STATUS, {})
            op, st = p.recv_json(timeout=5)
        finally:
            p.close()
        if op != STATUS_REPLY:
            raise Violation("STATUS answered %r" % op)
        # A job kept for status once ended (--keep-ended) and a new one of its run id: the new.
        return {j["run_id"]: j for j in sorted(st["jobs"], key=lambda j: "outcome" not in j)}

    # ---- roles ----

    def spare_join(self):
        if len(self.spares) < 4:
            a = Spare(self, "honest", "new-%d" % self.rng.randrange(10**6), 2)
            self.spares.append(a)
        a = self.rng.choice(self.spares)
        if not a.peer:
            a.connect()

    def spare_says(self):
        """A new node speaks: for itself (UNHEALTHY, CANCEL) or for ranks it does not hold."""
        live = [a for a in self.spares if a.peer]
        if not live:
            return
        a = self.rng.choice(live)
        what = self.rng.choice(["unhealthy", "cancel", "exit", "leave", "heartbeat"])
        try:
            if what == "unhealthy":
                a.peer.send(UNHEALTHY, {"reason": "forged? no: its own"})
                self.aside_ids.add(a.node_id)
            elif what == "cancel":
                a.peer.send(CANCEL, {"signal": 15, "reason": "scancel"})
            elif what == "exit":
                a.peer.send(WORKER_EXIT, {"generation": 1, "rank": self.rng.choice([0, 1, 2]),
                                          "local_rank": 0, "exit_code": 1, "signal": 0,
                                          "time": time.time(), "host": "x"})
            elif what == "leave":
                a.peer.send(LEAVE, {"generation": 1, "status": "failed"})
            else:
                a.peer.send(HEARTBEAT, {"generation": 1})
            a.drain()
        except ERRS:
            a.close()
        if what in ("unhealthy", "cancel"):
            a.close()
            self.spares.remove(a)

    def impostor(self):
        """JOIN as an honest member (its node id, from STATUS), or on a put-aside host."""
        try:
            job = self.status().get("honest")
        except ERRS:
            return
        ids = [n.get("node_id") for n in (job or {}).get("nodes", []) if n.get("node_id")]
        if self.aside_ids and self.rng.random() < 0.3:
            body = join_body("honest", self.rng.choice(sorted(self.aside_ids)), 2)
            body.update({"min": 2, "max_restarts": 3})
        elif ids:
            resume = None
            if self.rng.random() < 0.6:
                resume = {"generation": 1, "node_rank": self.rng.choice([0, 1]), "nnodes": 2,
                          "rank_offset": 0, "world_size": 2, "restart_count": 0,
                          "master_port": 0, "left": False}
            body = join_body("honest", self.rng.choice(ids), 2, resume,
                             self.rng.choice([None, "0" * 64, secrets.token_hex(32)]))
            body.update({"min": 2, "max_restarts": 3})
        else:
            return
        self.one_shot(JOIN, body)

    def other_acts(self):
        a = self.rng.choice(self.others)
        what = self.rng.choice(["connect", "connect", "heartbeat", "exit", "cancel", "close"])
        try:
            if what == "connect" and not a.peer:
                a.connect()
            elif a.peer and what == "heartbeat":
                a.peer.send(HEARTBEAT, {"generation": a.round["generation"] if a.round else 0})
            elif a.peer and what == "exit" and a.round:
                a.peer.send(WORKER_EXIT, a.failure())
            elif a.peer and what == "cancel":
                a.peer.send(CANCEL, {"signal": 15, "reason": ""})
            elif what == "close":
                a.close()
            if a.peer:
                a.drain()
        except ERRS:
            a.close()

    def stranger(self):
        """The agents' token asks for the operator's messages: refused as denied, saying whose
        they are."""
        run = self.rng.choice(["honest", "other"])
        if self.rng.random() < 0.5:
            reply = self.one_shot(RELEASE, {"run_id": run, "node": self.rng.choice(HONEST)})
            want = RELEASE_REPLY
        else:
            reply = self.one_shot(CANCEL_JOB, {"run_id": run, "reason": "stranger"})
            want = CANCEL_JOB_REPLY
        if reply is None:
            return  # the connection failed (a restart under way): nothing was asked
        op, body = reply
        if op != want or body.get("denied") is not True or \
                "only the operator" not in body.get("error", "") or \
                body.get("cancelled") or body.get("released"):
            raise Violation("the agents' token got %r %r" % (op, body))

    def operator(self):
        if self.rng.random() < 0.5 and self.aside_ids:
            self.one_shot(RELEASE, {"run_id": "honest",
                                    "node": self.rng.choice(sorted(self.aside_ids))},
                          secret=self.admin)
        else:
            self.one_shot(CANCEL_JOB, {"run_id": "other", "reason": "operator"},
                          secret=self.admin)

    def garbage(self):
        try:
            p = Peer(self.any_port(), timeout=T)
        except OSError:
            return
        try:
            p.sock.sendall(bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 64))))
            p.closed_within(0.2)
        except OSError:
            pass
        finally:
            p.close()

    def one_shot(self, op, body, secret=None):
        try:
            p = self.open_peer(secret)
        except ERRS:
            return None
        try:
            p.send(op, body)
            return p.recv_json(timeout=0.5)
        except ERRS:
            return None
        finally:
            p.close()

    def restart(self):
        if not self.state:
            return
        self.d.kill()
        self.logs.append(self.d.log())
        port = self.d.port
        self.d = Daemon(*self.args, "--port", str(port), log_level="info")
        for a in self.others + self.spares:
            a.close()
        self.spares = []
        self.wait_honest_back()

    def wait_honest_back(self):
        """The honest agents resume from their secrets; the record brings the job back."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                job = self.status().get("honest")
                if job and sum(1 for n in job.get("nodes", []) if n["node_rank"] >= 0) == 2:
                    return
            except ERRS:
                pass
            time.sleep(0.1)
        raise Violation("the honest job did not come back after an rdzvd restart")

    # ---- the invariants ----

    def no_sanitizer_report(self):
        for text in self.daemon_texts():
            for s in SANITIZER:
                if s in text:
                    raise Violation("sanitizer: %s" % [ln for ln in text.splitlines()
                                                       if s in ln][0].strip())

    def check(self):
        """The invariants; returns the jobs STATUS holds, by run id."""
        self.no_sanitizer_report()
        gone = self.daemon_gone()
        if gone:
            raise Violation(gone)
        for i, p in enumerate(self.agents):
            if p.poll() is not None:
                with open(os.path.join(self.tmp, "agent-%s.log" % HONEST[i]), "rb") as f:
                    tail = f.read()[-1500:].decode(errors="replace")
                raise Violation("honest agent %s exited %s:\n%s" % (HONEST[i], p.returncode,
                                                                    tail))
        for r, pid in self.pids.items():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                raise Violation("the honest job's worker rank %d (pid %d) is gone" % (r, pid))
        jobs = self.status()
        job = jobs.get("honest")
        if not job:
            raise Violation("the honest job is gone from STATUS")
        if job["generation"] != 1 or job["restart_count"] != 0 or "outcome" in job:
            raise Violation("the honest job moved: generation %s, restarts %s, outcome %s" % (
                job["generation"], job["restart_count"], job.get("outcome")))
        placed = sorted(n["host"] for n in job.get("nodes", []) if n["node_rank"] >= 0)
        if placed != sorted(HONEST):
            raise Violation("the honest job's generation holds %s" % placed)
        for a in job.get("put_aside", []):
            if a["host"] or a["node_id"] not in self.aside_ids:
                raise Violation("node %s (node id %s) put aside, not on its own word, or by "
                                "its host: %s" % (a["host"], a["node_id"], a["reason"]))
        other = jobs.get("other")
        if other and "outcome" in other:
            summary = other["outcome"].get("summary", "")
            if any(h in summary for h in HONEST) or "new-" in summary:
                raise Violation("the other job ended naming the honest job: %s" % summary)
        return jobs

    def finish(self):
        """What is checked once every step was (stateful_roles_replicas.py: a clean stop)."""

    def actions(self):
        """(action, weight) of every role."""
        return [(self.spare_join, 3), (self.spare_says, 3), (self.impostor, 3),
                (self.other_acts, 4), (self.stranger, 2), (self.operator, 1), (self.garbage, 1),
                (self.restart, 1)]

    def run(self, steps):
        actions = self.actions()
        try:
            self.check()
            for _ in range(steps):
                fn = self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
                if os.environ.get("STATEFUL_TRACE"):
                    sys.stderr.write("%s\n" % fn.__name__)
                try:
                    fn()
                except ERRS:
                    pass
                for a in self.others + self.spares:
                    if a.peer:
                        try:
                            a.drain()
                        except ERRS:
                            a.close()
                self.check()
            self.finish()
        finally:
            for a in self.others + self.spares:
                a.close()
            for p in self.agents:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for pid in self.pids.values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.stop_daemon()

    def cleanup(self):
        subprocess.call(["rm", "-rf", self.tmp])


def run_one(seed, steps, state, cls=Roles):
    r = None
    try:
        r = cls(seed, state)
        r.run(steps)
        return None
    except Violation as v:
        if r:
            log_tail(seed, r.logs)
        return str(v)
    finally:
        if r:
            r.cleanup()


if __name__ == "__main__":
    sys.exit(run_seeds(run_one, ("state",), 40))
