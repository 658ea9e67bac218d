#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# stateful_roles_replicas.py: stateful_roles.py's roles and invariants against three rdzvd
# replicas (--peers, libraft; each its --state-dir), the honest agents given all three as
# --endpoint. Its extra actions:
#   - kill -9 the leader or a follower, one replica at a time (a quorum is always alive): started
#     again on its directory at once, or left down until the next such action; the leader also
#     right after a member of the other job reported a failure (its decision may be in flight);
#   - a role's message sent to a follower (JOIN as a new node, the operator's CANCEL_JOB and
#     RELEASE, STATUS; a TCPStore client): HELLO is answered with an ERROR naming the leader and
#     the connection closed, whatever else was sent behind it, and none of it is ever applied.
# Its extra invariants, once the cluster has a leader (a follower answers nothing but its
# redirect, so a follower's records are read when it leads):
#   - after a change of leader, every job the old leader held (not ended) is on the new one, with
#     the same record: generation, restart count, --nnodes and --max-restarts (the same, when the
#     change is the leader's SIGKILL with nothing in flight; never behind, else), and every node
#     it had put aside still put aside;
#   - nothing a connected agent had acknowledged (the ROUND it got) is lost across it;
#   - nothing sent to a follower is on the leader: no node or reason it named;
#   - at the end every replica stops cleanly on SIGTERM (exit 0; LeakSanitizer's report in the
#     ASan build).
#
# Usage: stateful_roles_replicas.py --seeds FILE   replay a corpus ("SEED" a line)
#        stateful_roles_replicas.py --explore N    N random seeds; prints the failing ones
import json
import os
import secrets
import sys
import time

from stateful_roles import (CANCEL_JOB, ERRS, HONEST, JOIN, RELEASE, STATUS, T, Roles,  # noqa
                            WORKER_EXIT, Violation, join_body, run_one, run_seeds)
from authtest import AUTH, ERROR, HELLO, Peer, frame
from replicatest import T_LEADER, Cluster

EX_TEMPFAIL = 75
FOLLOWER_MARK = "via-follower"  # in every node id and reason sent to a follower
RECORD = ("generation", "restart_count", "max_restarts", "min_nodes", "max_nodes")


class RolesReplicas(Roles):

    def start_daemon(self):
        self.cl = Cluster(extra=self.args)
        self.lead = None  # the replica that served last
        self.down = None  # the replica SIGKILLed and not started again yet
        self.last = None  # (leader, its jobs) at the last look
        self.other_ended = None  # the other job that ended and was started afresh

    def endpoint(self):
        return self.cl.peers

    def live(self):
        return [r for r in self.cl.r if r is not self.down]

    def any_port(self):
        return self.rng.choice(self.live()).port

    def daemon_texts(self):
        return [r.text() for r in self.cl.r]

    def daemon_gone(self):
        for r in self.live():
            if r.alive():
                continue
            if r.proc.returncode != EX_TEMPFAIL:
                return "replica %d exited with %s" % (r.i + 1, r.proc.returncode)
            # Deposed with a change in flight (a leader that lost its majority under load): it
            # is started again on its directory, as systemd's Restart= does (rdzvd(8), 75).
            self.trace("replica %d exited 75: started again" % (r.i + 1))
            r.log.close()
            self.start_replica(r)
        return None

    def trace(self, what):
        if os.environ.get("STATEFUL_TRACE"):
            sys.stderr.write("  %s\n" % what)

    def start_replica(self, r):
        """Start r again on its directory, and wait until it names a leader or leads (asked with
        HELLO): only then has it heard from the leader, so that another replica may be killed
        without the quorum."""
        r.start()
        deadline = time.monotonic() + 2 * T_LEADER
        while not self.knows_leader(r):
            if time.monotonic() > deadline or not r.alive():
                raise Violation("replica %d did not rejoin the cluster (exit %s)" % (
                    r.i + 1, r.proc.poll()))
            time.sleep(0.05)

    @staticmethod
    def knows_leader(r):
        try:
            p = Peer(r.port, timeout=T)
        except OSError:
            return False
        try:
            p.send(HELLO, {"magic": "rdzv", "version": 1, "peer": "roles"})
            got = p.recv_json(timeout=T)
            return got is not None and (got[0] == HELLO or bool(got[1].get("leader")))
        except ERRS:
            return False
        finally:
            p.close()

    def stop_daemon(self):
        self.logs = ["--- replica %d ---\n%s\n" % (r.i + 1, r.text()[-3000:]) for r in self.cl.r]
        self.cl.close()

    def open_peer(self, secret_path=None):
        """An authenticated connection to the leader: the one that served last, else the first
        live replica that serves within T_LEADER (an election, a new leader catching up)."""
        with open(secret_path or self.token, "rb") as f:
            secret = f.read()
        deadline = time.monotonic() + T_LEADER
        while True:
            for r in sorted(self.live(), key=lambda r: r is not self.lead):
                try:
                    p = self.authenticated(r.port, secret)
                except ERRS:
                    continue
                self.lead = r
                return p
            if time.monotonic() > deadline:
                raise OSError("no replica leads")
            time.sleep(0.05)

    # ---- the replicas' faults: one at a time ----

    def restart(self):
        if self.down:
            self.trace("replica %d started again" % (self.down.i + 1))
            self.start_replica(self.down)  # it catches up from the leader
            self.down = None
            return
        before = self.status()  # also finds the leader
        lead = self.lead
        victim = lead if self.rng.random() < 0.5 else self.rng.choice(
            [r for r in self.cl.r if r is not lead])
        self.kill(victim, before, exact=True)

    def kill_mid_decision(self):
        """A member of the other job reports its worker's failure, and the leader is SIGKILLed
        at once: the restart it decides may be in flight (committed or not, sent or not)."""
        live = [a for a in self.others if a.peer and a.round]
        if self.down or not self.lead or not live or not self.last:
            return
        a = self.rng.choice(live)
        try:
            a.peer.send(WORKER_EXIT, a.failure())
        except ERRS:
            return
        self.kill(self.lead, self.last[1], exact=False)

    def kill(self, victim, before, exact):
        """SIGKILL victim; before: the leader's jobs just before, compared with the next
        leader's (exact: nothing was in flight)."""
        lead = self.lead
        acked = {}
        for a in self.others + self.spares:
            if a.peer and a.round:
                g = (a.round["generation"], a.round["restart_count"])
                acked[a.run_id] = max(g, acked.get(a.run_id, g))
        victim.kill()
        again = self.rng.random() < 0.5
        self.trace("kill -9 replica %d (%s)%s" % (victim.i + 1, "the leader" if victim is lead
                                                   else "a follower", ", started again" * again))
        if again:
            self.start_replica(victim)
        else:
            self.down = victim
        if victim is not lead:
            return
        self.lead = None
        for a in self.others + self.spares:
            a.close()
        self.spares = []
        self.wait_honest_back()
        jobs = self.status()
        self.trace("replica %d leads; records compared: %s -> %s" % (self.lead.i + 1, *[{
            k: (j["generation"], j["restart_count"], j.get("outcome", {}).get("summary", "")[:20])
            for k, j in x.items()} for x in (before, jobs)]))
        self.same_records(before, jobs, exact)
        for run_id, (g, rc) in acked.items():
            if "outcome" in before.get(run_id, {"outcome": "gone"}):
                continue  # it ended before the kill (its agents had not read so yet)
            j = jobs.get(run_id)
            if not j or (j["generation"], j["restart_count"]) < (g, rc):
                raise Violation("job %s: its agents had generation %d (restart %d); the next "
                                "leader has %s" % (run_id, g, rc, j and {k: j[k] for k in RECORD}))
        self.last = (self.lead, jobs)
        self.last_t = time.time()

    def same_records(self, old, new, exact):
        for run_id, j in old.items():
            if "outcome" in j or j["generation"] < 1:
                continue  # ended, or no generation decided yet: nothing to carry
            n = new.get(run_id)
            if n is None:
                raise Violation("job %s (generation %d) is gone after a change of leader" % (
                    run_id, j["generation"]))
            if "outcome" in n:
                continue
            aside = {a["node_id"] for a in j.get("put_aside", [])} - {
                a["node_id"] for a in n.get("put_aside", [])}
            if aside:
                raise Violation("job %s: %s no longer put aside with the next leader" % (
                    run_id, sorted(aside)))
            was, now = [tuple(x[k] for k in RECORD) for x in (j, n)]
            if (was != now) if exact else (now[:2] < was[:2] or now[2:] != was[2:]):
                raise Violation("job %s's record changed with the leader: %s -> %s (%s)" % (
                    run_id, was, now, ", ".join(RECORD)))

    def other_acts(self):
        """As stateful_roles.py's, but once the other job ended its agents start it afresh (a
        new job of the same run id), so that its records change all along the run."""
        other = self.last and self.last[1].get("other")
        # Which end this is: its wall time (an ended job the next leader read from the job
        # table has its outcome and no events), the same end seen again within 2 s.
        ended = other and "outcome" in other and self.last_t - other["outcome"]["ended_age_s"]
        if ended and (self.other_ended is None or abs(ended - self.other_ended) > 2):
            self.other_ended = ended
            for a in self.others:
                a.close()
                a.round, a.secret = None, ""
        super().other_acts()

    # ---- a follower is sent a role's messages ----

    def to_follower(self):
        followers = [r for r in self.live() if r is not self.lead and r.alive()]
        if not self.lead or not followers:
            return
        r = self.rng.choice(followers)
        what = self.rng.choice(["join", "cancel_job", "release", "status", "store"])
        mark = "%s-%d" % (FOLLOWER_MARK, self.rng.randrange(10**6))
        if what == "join":
            body = join_body("honest", mark, 2)
            body.update({"min": 2, "max_restarts": 3})
            msg = frame(JOIN, body)
        elif what == "cancel_job":
            msg = frame(CANCEL_JOB, {"run_id": self.rng.choice(["honest", "other"]),
                                     "reason": mark})
        elif what == "release":
            msg = frame(RELEASE, {"run_id": "honest", "node": self.rng.choice(
                sorted(self.aside_ids) + list(HONEST))})
        else:
            msg = frame(STATUS, {})
        # What a client that ignores the redirect sends: HELLO, an AUTH (it never saw a nonce),
        # the message; or a TCPStore client's first bytes.
        if what == "store":
            wire = b"\x00" + secrets.token_bytes(self.rng.randint(1, 32))
        else:
            wire = frame(HELLO, {"magic": "rdzv", "version": 1, "peer": "roles"}) + frame(
                AUTH, {"nonce": "00" * 32, "mac": "00" * 32}) + msg
        try:
            p = Peer(r.port, timeout=T)
        except OSError:
            return
        try:
            p.sock.sendall(wire)
            got = p.recv_json(timeout=T)
            if what != "store":
                want = "127.0.0.1:%d" % self.lead.port
                if not got or got[0] != ERROR or "not the leader" not in got[1]["error"] or \
                        got[1].get("leader") not in ("", want):
                    raise Violation("follower %d answered %s with %r (the leader is %s)" % (
                        r.i + 1, what, got, want))
                got = p.recv_json(timeout=T)
            if got is not None:
                raise Violation("follower %d sent %r after its redirect (%s)" % (r.i + 1, got,
                                                                               what))
        except (OSError, AssertionError):
            pass  # reset by the follower's close, or nothing within T: rdzvd's own check
        finally:
            p.close()

    # ---- the invariants ----

    def check(self):
        self.status()  # finds the leader
        if self.last and self.last[0] is not self.lead:
            self.trace("the cluster changed leader on its own: replica %d" % (self.lead.i + 1))
            self.wait_honest_back()  # its agents resume there
        jobs = super().check()
        text = json.dumps(jobs)
        if FOLLOWER_MARK in text:
            i = text.index(FOLLOWER_MARK)
            raise Violation("what was sent to a follower is on the leader: ...%s..." % text[
                max(0, i - 300):i + 100])
        if self.last and self.last[0] is not self.lead:
            self.same_records(self.last[1], jobs, exact=False)  # the cluster changed on its own
        self.last = (self.lead, jobs)
        self.last_t = time.time()
        return jobs

    def finish(self):
        """Every replica stops cleanly, the followers first (each exits 0, the leader too), with
        no sanitizer report (LeakSanitizer's comes at exit)."""
        self.status()
        for r in sorted(self.live(), key=lambda r: r is self.lead):
            rc = r.stop()
            if rc != 0:
                raise Violation("replica %d stopped with %s" % (r.i + 1, rc))
        self.no_sanitizer_report()

    def actions(self):
        # The replicas' faults twice as often as one rdzvd's restarts; messages to followers.
        return [(a, 2 if a == self.restart else w) for a, w in super().actions()] + [
            (self.to_follower, 2), (self.kill_mid_decision, 1)]


def run_replicas(seed, steps):
    return run_one(seed, steps, True, RolesReplicas)


if __name__ == "__main__":
    sys.exit(run_seeds(run_replicas, (), 40))
