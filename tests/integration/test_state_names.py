#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_state_names.py: --state-dir file names cannot collide across jobs.
# Two run ids whose names under the old 64-bit hash collide (found here in well under a second)
# run side by side with --state-dir, through a SIGKILL and a restart of rdzvd: each job comes
# back with its own generation store and its own keys, and neither's file is touched by the other.
# The jobs' records are in the job table's journal (jobs.journal); files job-<hex>.state that an
# older rdzvd wrote are named in a warning and not read.

import os
import random
import tempfile

import authtest
from authtest import JOIN, JOINED, ROUND, Peer
from rdzvtest import Client, DaemonTestCase, main

M64 = (1 << 64) - 1
K0, K1 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
OLD_SEED = 0x72647a76


def mix(a, b):
    r = a * b
    return (r & M64) ^ (r >> 64)


def old_hash(data, seed=OLD_SEED):
    """rdzv_hash64() (common/rdzv-util.c), which named state files before SHA-256."""
    n = len(data)
    h = seed ^ mix(seed ^ K0, n ^ K1)
    p = 0
    while n - p >= 8:
        h = mix(h ^ int.from_bytes(data[p:p + 8], "little"), K1)
        p += 8
    if n - p:
        t = int.from_bytes(data[p:], "little")
        h = mix(h ^ t ^ ((n - p) << 56), K0)
    return mix(h, h ^ K1)


def old_collision(victim):
    """A 16-byte run id other than victim (16 bytes) with the same old hash: the second block
    cancels the difference the first one makes to the hash state."""
    assert len(victim) == 16
    seed = OLD_SEED
    h0 = seed ^ mix(seed ^ K0, 16 ^ K1)
    h1 = mix(h0 ^ int.from_bytes(victim[:8], "little"), K1)
    want = h1 ^ int.from_bytes(victim[8:], "little")  # h1' ^ p1' must equal this
    ok = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=:;,!@#%^&*()")
    rng = random.Random(20)
    while True:
        p0 = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(8))
        p1 = (want ^ mix(h0 ^ int.from_bytes(p0, "little"), K1)).to_bytes(8, "little")
        if all(c in ok for c in p1):
            other = p0 + p1
            if other != victim:
                return other


def join_body(run_id, resume=None):
    """The JOIN of the one node of job run_id."""
    return authtest.join_body(run_id, "node-of-" + run_id, 1, resume, host="127.0.0.1",
                              last_call_ms=100)


class StateNames(DaemonTestCase):

    def setUp(self):
        self._state = tempfile.TemporaryDirectory(prefix="rdzvtest-state-")
        self.addCleanup(self._state.cleanup)
        self.state = os.path.join(self._state.name, "state")

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        return p

    def form(self, d, run_id):
        """One agent's job of one node: JOIN, JOINED, ROUND. Returns (peer, round)."""
        p = self.peer(d)
        p.send(JOIN, join_body(run_id))
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        op, rnd = p.recv_json()
        self.assertEqual(op, ROUND, rnd)
        rnd["secret"] = body.get("secret", "")  # what the agent sends back when it reconnects
        return p, rnd

    def resume(self, d, run_id, rnd):
        p = self.peer(d)
        body = join_body(run_id, {
            "generation": rnd["generation"], "node_rank": 0, "nnodes": 1, "rank_offset": 0,
            "world_size": 1, "restart_count": rnd["restart_count"],
            "master_port": rnd["master_port"], "left": False})
        if rnd.get("secret"):
            body["secret"] = rnd["secret"]
        p.send(JOIN, body)
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        return p

    def test_old_hash_collision_keeps_jobs_apart_across_sigkill(self):
        victim = b"victim-job-00001"
        attacker = old_collision(victim)
        self.assertNotEqual(attacker, victim)
        self.assertEqual(old_hash(attacker), old_hash(victim))  # the old names collide
        ids = [victim.decode(), attacker.decode()]

        d = self.daemon("--state-dir", self.state, "--fsync", "no")
        rounds = {}
        for rid in ids:  # the victim first: the attacker's fresh store comes second
            p, rnd = self.form(d, rid)
            rounds[rid] = rnd
            with self._store(rnd["master_port"]) as c:
                c.set(b"owner", rid.encode())
                c.set(b"only-" + rid.encode(), b"1")
                c.sync()

        port = d.port
        d.kill()
        d2 = self.daemon("--state-dir", self.state, "--port", str(port), "--fsync", "no")
        for rid in ids:  # the victim's store first: on rdzvd before, it held the attacker's keys
            self.resume(d2, rid, rounds[rid])
            other = ids[1 - ids.index(rid)]
            with self._store(rounds[rid]["master_port"]) as c:
                self.assertEqual(c.get(b"owner"), rid.encode(), rid)
                self.assertEqual(c.get(b"only-" + rid.encode()), b"1", rid)
                self.assertEqual(c.check([b"only-" + other.encode()]), 1, rid)  # NOT_READY
        names = sorted(os.listdir(self.state))
        # The two jobs' records are in the job table's journal, each under its own run id.
        self.assertEqual([n for n in names if n.endswith(".state")], [], names)
        with open(os.path.join(self.state, "jobs.journal"), "rb") as f:
            jobs = f.read()
        for rid in ids:
            self.assertIn(b'"run_id":"' + rid.encode() + b'"', jobs)
        self.assertEqual(len([n for n in names if n.startswith("job-") and
                              n.endswith(".journal")]), 2, names)
        d2.stop()

    def test_records_of_an_older_rdzvd_are_named_not_read(self):
        # An rdzvd before the job table's journal kept each job's record in a file
        # job-<hex>.state: the new one does not read it, and says so once, naming it.
        os.mkdir(self.state, 0o700)
        old = "job-%s.state" % ("ab" * 32)
        with open(os.path.join(self.state, old), "w") as f:
            f.write('{"run_id":"victim-job-00001","min":1,"max":1,"max_restarts":0,'
                    '"generation":40,"restart_count":0,"running":false,"nnodes":0,'
                    '"world_size":0,"store_port":0}')
        d = self.daemon("--state-dir", self.state, "--fsync", "no")
        self.assertRegex(d.log(), r"--state-dir \S+ holds job records of an older rdzvd \(%s, "
                                  r"\.\.\.\): they are not read" % old)
        _, rnd = self.form(d, "victim-job-00001")
        self.assertEqual(rnd["generation"], 1)  # not 41: the old record was not read
        self.assertTrue(os.path.exists(os.path.join(self.state, old)))  # and it is left
        d.stop()

    def _store(self, port):
        c = Client(port)
        self.addCleanup(c.close)
        return c


if __name__ == "__main__":
    main()
