#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_attack_join.py: forged rendezvous messages, as an attacker on the network would send them
# with raw frames, no token needed:
#   - a JOIN whose resume names a node rank past the job's --nnodes (a heap write past by_rank in
#      rdzvd: SIGSEGV with a huge rank, heap corruption just past the end) is refused, and rdzvd
#      goes on serving;
#   - after a restart with --state-dir, a resume cannot set the job's generation, restart count or
#      size past its record (2^63-1 failed the real job, the generation wrapped);
#   - taking over a live agent's membership needs the secret rdzvd gave that agent in JOINED (a
#      JOIN with resume and the victim's node id, read from STATUS, closed the victim's connection
#      and took its place); STATUS shows node ids to nobody when rdzvd has no token;
#   - a job's cost does not grow with its --nnodes MAX before nodes are placed (a job with
#      max=100000 cost ~265 KB, and 100 of them 159 MB of address space, before anyone joined);
#   - a WORKER_EXIT with values no wait status has (exit code -2^63, a signal of 1000, control
#      characters in the reason) is refused before any agent is told.

import os
import shutil
import tempfile
import time

from authtest import (ERROR, EVENT, HEARTBEAT, JOIN, JOINED, ROUND, STATUS, STATUS_REPLY,
                      WORKER_EXIT, Peer, join_body, resume)
from rdzvtest import DaemonTestCase, main

class AttackJoin(DaemonTestCase):

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        return p

    def assert_refused(self, p, words):
        f = p.recv_json()
        self.assertIsNotNone(f, "rdzvd closed the connection without an ERROR")
        op, body = f
        self.assertEqual(op, ERROR, body)
        self.assertIn(words, body["error"])
        self.assertTrue(p.closed_within())

    def assert_serving(self, d):
        self.assertIsNone(d.proc.poll(), "rdzvd died:\n" + d.log())
        p = self.peer(d)
        self.checks = getattr(self, "checks", 0) + 1
        p.send(JOIN, join_body("alive-check-%d" % self.checks, "n-alive", mx=1))
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)

    def test_resume_past_max_is_refused(self):
        d = self.daemon()
        for rank in (2, 1_000_000_000):
            p = self.peer(d)
            p.send(JOIN, join_body("victim-%d" % rank, "intruder",
                                   resume=resume(node_rank=rank, nnodes=rank + 1,
                                                 rank_offset=rank, world_size=rank + 1)))
            self.assert_refused(p, "does not fit job")
            self.assert_serving(d)

    def test_resume_is_checked_against_the_record(self):
        state = tempfile.mkdtemp(prefix="rdzv-attack-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state)
        honest = self.peer(d)
        honest.send(JOIN, join_body("rec-job", "n0", mx=1))
        op, joined = honest.recv_json()
        self.assertEqual(op, JOINED, joined)
        op, rnd = honest.recv_json()
        self.assertEqual(op, ROUND, rnd)
        self.assertEqual(rnd["generation"], 1)
        d.kill()
        d = self.daemon("--state-dir", state)
        big = 2**63 - 1
        for claim, words in (
                (resume(generation=big, master_port=rnd["master_port"]), "past the largest"),
                (resume(generation=2**53 + 7), "past the largest"),
                (resume(restart_count=big), "past --max-restarts"),
                (resume(generation=5), "is not job 'rec-job' as its record"),
                (resume(nnodes=1, world_size=1, restart_count=2), "is not job 'rec-job'")):
            # Without n0's secret the JOIN is refused before its claim is read; with it (a
            # confused agent), the claim is checked.
            p = self.peer(d)
            p.send(JOIN, join_body("rec-job", "n0", mx=1, resume=claim))
            self.assert_refused(p, "belongs to a member")
            p = self.peer(d)
            body = join_body("rec-job", "n0", mx=1, resume=claim)
            body["secret"] = joined["secret"]
            p.send(JOIN, body)
            self.assert_refused(p, words)
        # The honest agent's own resume is taken: the job is the record's, and the secret it was
        # given before the restart still proves it (its hash is in the job's record).
        p = self.peer(d)
        body = join_body("rec-job", "n0", mx=1, resume=resume(master_port=rnd["master_port"]))
        body["secret"] = joined["secret"]
        p.send(JOIN, body)
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        self.assertEqual(body["generation"], 1, body)

    def test_resume_of_a_generation_being_stopped(self):
        """A restart was charged for generation 1 and rdzvd died before generation 2 formed: the
        record says generation 1 is over, restart 1. Its agent comes back claiming restart 0,
        as it was told: it is told its generation is over, not refused (found by faults-replicas,
        where a new leader refused the agent and the job failed)."""
        state = tempfile.mkdtemp(prefix="rdzv-attack-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state)
        p = self.peer(d)
        p.send(JOIN, join_body("stopping", "n0", mx=1))
        op, joined = p.recv_json()
        self.assertEqual(op, JOINED, joined)
        op, rnd = p.recv_json()
        self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
        p.send(WORKER_EXIT, {"generation": 1, "rank": 0, "local_rank": 0, "exit_code": 1,
                             "signal": 0, "time": time.time(), "host": "host-n0"})
        op, ev = p.recv_json()
        self.assertEqual((op, ev["type"]), (EVENT, "restart"), ev)
        d.kill()
        d = self.daemon("--state-dir", state)
        q = self.peer(d)
        body = join_body("stopping", "n0", mx=1, resume=resume(master_port=rnd["master_port"]))
        body["secret"] = joined["secret"]
        q.send(JOIN, body)
        op, body = q.recv_json()
        self.assertEqual(op, JOINED, body)
        self.assertFalse(body["resumed"], body)
        op, ev = q.recv_json()
        self.assertEqual((op, ev["type"], ev["generation"]), (EVENT, "restart", 1), ev)

    def test_claim_of_a_job_with_no_record_is_refused(self):
        """With --state-dir every generation is recorded before its ROUND leaves, and a record
        lives until its job ends: a resume's claim of a job with no record (here one that never
        formed, its record gone with its only agent; or one whose end is no longer kept) is
        refused, with its node's own secret too, and makes no job. It used to
        rebuild the job from the claim (and then record it, so that an older claim could not
        take it back: found by tests/fuzz/stateful_rendezvous.py)."""
        state = tempfile.mkdtemp(prefix="rdzv-attack-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state)
        p = self.peer(d)
        body = join_body("claimed", "n0", mx=2)
        body["min"] = 2  # waits for a second node: never forms, so its record goes with it
        p.send(JOIN, body)
        op, joined = p.recv_json()
        self.assertEqual(op, JOINED, joined)
        p.close()  # the job's only member is gone: rdzvd removes the job and its record
        self.assertIsNotNone(d.wait_log(r"job=claimed gen=0 removed"))
        p = self.peer(d)
        body = join_body("claimed", "n0", mx=1, resume=resume(generation=3, restart_count=2))
        body["secret"] = joined["secret"]
        p.send(JOIN, body)
        self.assert_refused(p, "job 'claimed' has ended, or ran on another rdzvd: it has no "
                               "record here; to run it again, start its line again (a new run)")
        q = self.peer(d)
        q.send(STATUS, {})
        op, st = q.recv_json()
        self.assertEqual(op, STATUS_REPLY)
        self.assertEqual([j for j in st["jobs"] if j["run_id"] == "claimed"], [], st)

    def test_takeover_needs_the_secret(self):
        d = self.daemon()
        victim = self.peer(d)
        victim.send(JOIN, join_body("take", "n0", mx=1))
        op, joined = victim.recv_json()
        self.assertEqual(op, JOINED, joined)
        self.assertRegex(joined.get("secret", ""), "^[0-9a-f]{64}$")
        op, rnd = victim.recv_json()
        self.assertEqual(op, ROUND, rnd)
        # What a stranger can learn: not the node id.
        p = self.peer(d)
        p.send(STATUS, {})
        op, st = p.recv_json()
        self.assertEqual(op, STATUS_REPLY)
        self.assertEqual([n["node_id"] for n in st["jobs"][0]["nodes"]], [""])
        claim = resume(master_port=rnd["master_port"])
        for secret in (None, "0" * 64):
            body = join_body("take", "n0", mx=1, resume=claim)
            if secret:
                body["secret"] = secret
            p = self.peer(d)
            p.send(JOIN, body)
            self.assert_refused(p, "belongs to a member")
        # The victim never noticed.
        victim.send(HEARTBEAT, {"generation": 1})
        f = victim.recv_json()
        self.assertIsNotNone(f, "the victim's connection was closed")
        self.assertEqual(f[0], HEARTBEAT, f)
        # Its own agent, reconnecting with the secret, takes its place back.
        body = join_body("take", "n0", mx=1, resume=claim)
        body["secret"] = joined["secret"]
        p = self.peer(d)
        p.send(JOIN, body)
        op, again = p.recv_json()
        self.assertEqual(op, JOINED, again)
        self.assertTrue(again["resumed"], again)
        self.assertTrue(victim.closed_within())

    @staticmethod
    def vm_kb(d, field):
        with open("/proc/%d/status" % d.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError("no %s in /proc/%d/status" % (field, d.pid))

    def test_job_cost_does_not_grow_with_max(self):
        # Address space (VmData), not RSS: what a calloc of max entries reserved whether or not
        # its pages were touched, and steady on a loaded machine. 100 jobs of max=2, then 100 of
        # max=100000, one waiting member each: the second hundred costs what the first did
        # (arrays sized by max would add 100000 x 16 bytes, 1.6 MB, a job), and neither more
        # than 128 KB a job (a sanitizer build's allocator included).
        d = self.daemon()
        self.assert_serving(d)
        n, grown = 100, []
        for tag, mx in (("small", 2), ("big", 100000)):
            before = self.vm_kb(d, "VmData")
            for i in range(n):
                p = self.peer(d)
                body = join_body("%s-%d" % (tag, i), "n0", mx=mx)
                body["min"] = 2  # waits for a second node: no round, no store
                body["node_rank"] = 0
                p.send(JOIN, body)
                op, joined = p.recv_json()
                self.assertEqual(op, JOINED, joined)
            grown.append(self.vm_kb(d, "VmData") - before)
        self.assertLess(grown[1], grown[0] + n * 16, "%d jobs of max=100000 took %d KB, of max=2 "
                        "%d KB" % (n, grown[1], grown[0]))
        self.assertLess(grown[1], n * 128, "%d jobs of max=100000 with one member each took %d KB"
                        % (n, grown[1]))

    def test_worker_exit_values_are_checked(self):
        d = self.daemon()
        for i, (fields, words) in enumerate((
                ({"exit_code": -2**63}, "out of range"),
                ({"exit_code": 256}, "out of range"),
                ({"signal": 1000}, "out of range"),
                ({"reason": "forged\nline"}, "control characters"),
                ({"rank": 5}, "is not one of this node's ranks"),
                ({"local_rank": 1, "rank": 1}, "is not one of this node's ranks"))):
            p = self.peer(d)
            run = "wx-%d" % i
            p.send(JOIN, join_body(run, "n0", mx=1))
            self.assertEqual(p.recv_json()[0], JOINED)
            op, rnd = p.recv_json()
            self.assertEqual(op, ROUND, rnd)
            w = {"generation": rnd["generation"], "rank": 0, "local_rank": 0, "exit_code": 1,
                 "signal": 0, "time": time.time(), "host": "host-n0"}
            w.update(fields)
            p.send(WORKER_EXIT, w)
            self.assert_refused(p, words)
        self.assert_serving(d)
        self.assertFalse(d.find_log(r"restart 1 of"), "a refused WORKER_EXIT restarted a job")


if __name__ == "__main__":
    main()
