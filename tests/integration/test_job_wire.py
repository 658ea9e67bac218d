#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_job_wire.py: what rdzvd's job wire side (daemon/job/rdzvd-job-wire.c) reads of an agent's
# frames and what it leaves alone, kept as it was when the inline parsing moved to proto/'s codec:
# a stale NCCL_ID is ignored whatever its ids say, the STATUS body is not looked at, a HEARTBEAT is
# decoded like every other message (it carries progress), and a refusal names the message whose
# body was bad.

import json

from authtest import JOIN, JOINED, ERROR, Peer
from rdzvtest import DaemonTestCase, main

NCCL_ID, HEARTBEAT, LEAVE, STATUS, STATUS_REPLY = 0xA6, 0xA7, 0xAA, 0xB0, 0xB1

JOIN_BODY = {"run_id": "wire", "node_id": "n0", "host": "nodeA", "nproc": 1, "node_rank": -1,
             "min": 2, "max": 2, "last_call_ms": 100, "max_restarts": 0, "nccl": "off",
             "nccl_ids": 1, "rank_hint": False, "heartbeat_timeout_ms": 60000,
             "join_timeout_ms": 600000, "scale_up_now": False}


class JobWire(DaemonTestCase):

    def joined_peer(self):
        """A peer that said HELLO and JOINed a job that waits for a second node (generation 0)."""
        d = self.daemon()
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(JOIN, JOIN_BODY)
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        return d, p

    def assert_alive(self, p):
        """The connection still serves: a HEARTBEAT is answered with a HEARTBEAT."""
        p.send(HEARTBEAT, {"generation": 0})
        f = p.recv()
        self.assertIsNotNone(f, "rdzvd closed the connection")
        self.assertEqual(f[0], HEARTBEAT, f)

    def assert_refused(self, p, prefix):
        f = p.recv()
        self.assertIsNotNone(f, "closed without an ERROR")
        self.assertEqual(f[0], ERROR, f)
        self.assertTrue(json.loads(f[1])["error"].startswith(prefix), f)
        self.assertTrue(p.closed_within())

    def test_stale_nccl_id_is_ignored_whatever_its_ids(self):
        d, p = self.joined_peer()
        p.send(NCCL_ID, {"generation": 99, "ids": ["not hex"]})
        p.send(NCCL_ID, {"generation": 99, "ids": list(range(100))})
        self.assert_alive(p)

    def test_nccl_id_without_generation_is_refused(self):
        d, p = self.joined_peer()
        p.send(NCCL_ID, {"ids": []})
        self.assert_refused(p, "NCCL_ID: ")

    def test_heartbeat_is_answered_with_the_member_generation(self):
        d, p = self.joined_peer()
        p.send(HEARTBEAT, {"generation": 7})
        f = p.recv()
        self.assertIsNotNone(f, "rdzvd closed the connection")
        self.assertEqual(f[0], HEARTBEAT, f)
        ans = json.loads(f[1])
        # Protocol 1.15: with what the job waits for, its nodes (1 of 2), the join timeout's
        # time left.
        left = ans["wait"].pop("left_ms")
        self.assertEqual(ans, {"generation": 0,
                               "wait": {"for": "nodes", "nodes": 1, "need": 2, "max": 2}})
        self.assertTrue(590000 <= left <= 600000, left)

    def test_malformed_heartbeat_closes_the_connection(self):
        # Since HEARTBEAT carries progress its body is decoded like every other
        # message's: a bad one closes that connection, with an ERROR naming the message.
        for bad in (b"not json", {"generation": "x"},
                    {"generation": 1, "progress": [{"local_rank": 0, "step": -1, "age_ms": 0}]}):
            with self.subTest(bad=bad):
                d, p = self.joined_peer()
                p.send(HEARTBEAT, bad)
                self.assert_refused(p, "HEARTBEAT")

    def test_status_body_is_not_looked_at(self):
        d = self.daemon()
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(STATUS, b"[1, 2")
        op, body = p.recv_json()
        self.assertEqual(op, STATUS_REPLY, body)
        self.assertEqual(body["daemon"], "rdzvd")

    def test_second_join_on_a_joined_connection_is_refused(self):
        """Policy row E0-2: a connection bound to its member acts on its own job only; a JOIN
        on it (here of another job) is refused, and no job of that name is made."""
        d, p = self.joined_peer()
        other = dict(JOIN_BODY, run_id="other", node_id="n9")
        p.send(JOIN, other)
        self.assert_refused(p, "this connection has already joined job 'wire'")
        q = Peer(d.port)
        self.addCleanup(q.close)
        q.hello()
        q.send(STATUS, {})
        op, body = q.recv_json()
        self.assertEqual(op, STATUS_REPLY, body)
        self.assertNotIn("other", [j["run_id"] for j in body["jobs"]], body)

    def test_bad_json_refusal_names_the_message(self):
        d, p = self.joined_peer()
        p.send(LEAVE, b"{")
        self.assert_refused(p, "LEAVE: bad JSON")


if __name__ == "__main__":
    main()
