#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_status_limits.py: STATUS always answers (issue 20, finding 7). With ~1,000 jobs, or ~2,000
# spares added to one job by anyone, the status document would pass the 1 MiB frame limit; rdzvd
# then lists what fits and counts the rest ("jobs_left_out", per job "members_left_out"), and
# rdzvctl status, status --json, /status.json, the status page and /metrics all answer.

import json
import re
import subprocess

from authtest import HELLO, JOIN, JOINED, Peer, frame
from metricstest import daemon_with_metrics, http_get
from rdzvtest import RDZVCTL, DaemonTestCase, main

ROUND = 0xA4
SHOW_MEMBERS = 256  # RDZV_STATUS_SHOW_MEMBERS
LONG = "x" * 100


def join_body(run_id, node_id, lo=2, hi=2):
    # Long names: each job or node costs as much of the document as a peer can make it.
    return {"run_id": run_id, "node_id": node_id, "host": "h" * 255, "nproc": 1, "node_rank": -1,
            "min": lo, "max": hi, "last_call_ms": 100, "max_restarts": 0, "nccl": "off",
            "nccl_ids": 1, "rank_hint": False, "heartbeat_timeout_ms": 600000,
            "join_timeout_ms": 600000, "scale_up_now": False}


class StatusLimits(DaemonTestCase):

    def start(self):
        d, self.mport = daemon_with_metrics(self)
        return d

    def joins(self, d, bodies):
        """One connection per body: HELLO and JOIN pipelined, then both answers read."""
        peers = []
        for b in bodies:
            p = Peer(d.port)
            self.addCleanup(p.close)
            p.sock.sendall(frame(HELLO, {"magic": "rdzv", "version": 1, "peer": "t"}) +
                           frame(JOIN, b))
            peers.append(p)
        answers = []
        for p in peers:
            op, _ = p.recv_json()
            self.assertEqual(op, HELLO)
            op, body = p.recv_json()
            self.assertEqual(op, JOINED, body)
            answers.append(body)
        return peers, answers

    def ctl(self, d, *args):
        p = subprocess.run([RDZVCTL, "-e", f"127.0.0.1:{d.port}", "-t", "10", "status", *args],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def http(self, path):
        return http_get(self.mport, path)

    def test_a_thousand_jobs_are_answered_with_a_count_of_those_left_out(self):
        d = self.start()
        n = 1000
        ids = ["job-%04d-%s" % (i, LONG) for i in range(n)]
        self.joins(d, [join_body(rid, "node-" + rid) for rid in ids])

        st = json.loads(self.ctl(d, "--json"))
        self.assertGreater(st["jobs_left_out"], 0)
        self.assertEqual(len(st["jobs"]) + st["jobs_left_out"], n)
        self.assertGreater(len(st["jobs"]), 100)
        text = self.ctl(d)  # another reply: its ages, and so how much fits, may differ a little
        m = re.search(r"\n\((\d+) more jobs not listed: the STATUS reply is limited", text)
        self.assertTrue(m, "no note of the jobs left out in: ..." + text[-300:])
        self.assertEqual(text.count("\njob job-") + int(m.group(1)), n)
        self.assertTrue(text.startswith("rdzvd "), text[:300])

        doc = json.loads(self.http("/status.json"))
        self.assertEqual(len(doc["jobs"]) + doc["jobs_left_out"], n)
        self.assertEqual(self.http("/").count('<h2 class="job">'), n)
        metrics = self.http("/metrics")
        self.assertEqual(metrics.count("rdzvd_job_generation{job="), n)
        self.assertIn("rdzvd_jobs %d\n" % n, metrics)

    def test_two_thousand_spares_are_answered_with_a_count_of_members_left_out(self):
        d = self.start()
        run_id = "spares-" + LONG
        peers, _ = self.joins(d, [join_body(run_id, "member", 1, 1)])
        op, rnd = peers[0].recv_json()
        self.assertEqual(op, ROUND, rnd)
        spares = 2000
        _, answers = self.joins(d, [join_body(run_id, "spare-%04d-%s" % (i, LONG), 1, 1)
                                    for i in range(spares)])
        self.assertTrue(all(a["spare"] for a in answers))

        st = json.loads(self.ctl(d, "--json"))
        job = st["jobs"][0]
        self.assertEqual(len(job["nodes"]), SHOW_MEMBERS)
        self.assertEqual(job["members_left_out"], spares + 1 - SHOW_MEMBERS)
        self.assertEqual(job["nodes"][0]["node_rank"], 0)  # the generation's first
        self.assertEqual(job["nodes"][0]["node_id"], "")  # hidden without a token
        self.assertEqual(st["jobs_left_out"], 0)
        text = self.ctl(d)
        self.assertTrue("(%d more members not listed)" % (spares + 1 - SHOW_MEMBERS) in text,
                        text[-300:])

        self.assertEqual(json.loads(self.http("/status.json"))["jobs"][0]["members_left_out"],
                         spares + 1 - SHOW_MEMBERS)
        self.assertIn("%d more member(s) not listed" % (spares + 1 - SHOW_MEMBERS),
                      self.http("/"))
        self.assertIn('rdzvd_job_members_not_listed{job="%s"} %d'
                      % (run_id, spares + 1 - SHOW_MEMBERS), self.http("/metrics"))


if __name__ == "__main__":
    main()
