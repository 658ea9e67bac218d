#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_identity.py: issue 36, attack 7 and honest case 4, with real rdzvd processes and raw frames:
#   4. a job's record lives until the job ends: after an rdzvd restart, a rebuilt job whose only
#      connected member (a new node's JOIN) disconnects keeps its record, status lists it as
#      waiting for its nodes, and the real agent's resume is taken (it was removed, the next JOIN
#      made a new job, and the real agents were told their generation was over);
#   7. a node's identity is proven: see the Identity tests below.

import shutil
import tempfile

from authtest import JOIN, JOINED, Peer
from rdzvtest import DaemonTestCase, main
from test_attack_join import ROUND, STATUS, STATUS_REPLY, join_body, resume


class Identity(DaemonTestCase):

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        return p

    def state_dir(self):
        state = tempfile.mkdtemp(prefix="rdzv-identity-")
        self.addCleanup(shutil.rmtree, state, True)
        return state

    def join(self, d, run_id, node_id, secret=None, claim=None, mx=1):
        p = self.peer(d)
        body = join_body(run_id, node_id, mx=mx, resume=claim)
        if secret is not None:
            body["secret"] = secret
        p.send(JOIN, body)
        return p, p.recv_json()

    def job_status(self, d, run_id):
        q = self.peer(d)
        q.send(STATUS, {})
        op, st = q.recv_json()
        self.assertEqual(op, STATUS_REPLY)
        return [j for j in st["jobs"] if j["run_id"] == run_id]

    def running_job(self, d, run_id):
        """A one-node job at generation 1: its agent's peer, JOINED and ROUND."""
        p, (op, joined) = self.join(d, run_id, "n0")
        self.assertEqual(op, JOINED, joined)
        op, rnd = p.recv_json()
        self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
        return p, joined, rnd

    def test_record_outlives_its_last_connected_member(self):
        state = self.state_dir()
        d = self.daemon("--state-dir", state)
        _, joined, rnd = self.running_job(d, "keep")
        d.kill()
        d = self.daemon("--state-dir", state)
        # A new node's JOIN rebuilds the job (generation 1 waits for n0), then it goes.
        mark = d.mark()
        p, (op, body) = self.join(d, "keep", "n9")
        self.assertEqual(op, JOINED, body)
        self.assertIsNotNone(d.wait_log(r"job=keep gen=1 rebuilding generation 1", since=mark))
        p.close()
        self.assertIsNotNone(d.wait_log(r"job=keep gen=1 removed \(generation 1\)", since=mark))
        # Its record stays, listed as waiting for its nodes.
        job = self.job_status(d, "keep")
        self.assertEqual(len(job), 1, job)
        self.assertEqual((job[0]["state"], job[0]["generation"]), ("waiting", 1), job)
        self.assertIn("waiting for its nodes since", job[0]["events"][-1]["text"])
        # The next JOIN does not make a new job, and the real agent's resume is taken.
        p, (op, body) = self.join(d, "keep", "n8")
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["spare"], body)
        q, (op, body) = self.join(d, "keep", "n0", secret=joined["secret"],
                                  claim=resume(master_port=rnd["master_port"]))
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        self.assertEqual(body["generation"], 1, body)
        self.assertEqual(self.job_status(d, "keep")[0]["state"], "running")


if __name__ == "__main__":
    main()
