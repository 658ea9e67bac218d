#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_status_limits.py: STATUS always answers. With ~1,000 jobs, or ~2,000
# spares added to one job by anyone, the status document would pass the 1 MiB frame limit; rdzvd
# then lists what fits and counts the rest ("jobs_left_out", per job "members_left_out"), and
# rdzvctl status, status --json, /status.json, the status page and /metrics all answer.

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import authtest
from authtest import HELLO, JOIN, JOINED, ROUND, Peer, frame
from metricstest import daemon_with_metrics, http_get
from rdzvtest import HOST, RDZVCTL, DaemonTestCase, main

SHOW_MEMBERS = 256  # RDZV_STATUS_SHOW_MEMBERS
LONG = "x" * 100
PAGE_MAX = 256 << 10  # RDZVD_PAGE_MAX
PAGE_FULL = 4         # RDZVD_PAGE_FULL
PAGE_ROWS = 100       # RDZVD_PAGE_ROWS
MAX_CONNS = 64        # RDZVD_HTTP_MAX_CONNS
WRITE_TIMEOUT_S = 5   # RDZVD_HTTP_WRITE_TIMEOUT_MS


def page_is_bounded(test, page, n):
    """The status page of n live jobs: at most PAGE_MAX bytes, the first PAGE_FULL jobs
    in full, PAGE_ROWS more as rows, each linked to /job/RUN_ID, the rest counted."""
    test.assertLessEqual(len(page.encode()), PAGE_MAX)
    test.assertTrue(page.endswith("</html>\n"), page[-200:])
    full = page.count('<h2 class="job">')
    rows = page.count('<tr class="job">')
    test.assertEqual(full, min(n, PAGE_FULL))
    test.assertEqual(rows, min(n - full, PAGE_ROWS))
    m = re.search(r'id="jobs-left-out">(\d+) more job\(s\) not listed', page)
    test.assertEqual(full + rows + (int(m.group(1)) if m else 0), n)
    test.assertEqual(page.count('<a href="/job/'), full + rows)


def join_body(run_id, node_id, lo=2, hi=2):
    # Long names: each job or node costs as much of the document as a peer can make it.
    return authtest.join_body(run_id, node_id, hi, mn=lo, host="h" * 255, last_call_ms=100,
                              max_restarts=0, heartbeat_timeout_ms=600000)


class StatusLimits(DaemonTestCase):

    def start(self):
        # Up to 3,000 jobs at once: past --max-jobs' default (1024).
        d, self.mport = daemon_with_metrics(self, "--max-jobs", "10000")
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
        page_is_bounded(self, self.http("/"), n)
        metrics = self.http("/metrics")
        self.assertEqual(metrics.count("rdzvd_job_generation{job="), n)
        self.assertIn("rdzvd_jobs %d\n" % n, metrics)

    def test_a_job_in_full_at_its_own_page(self):
        d = self.start()
        ids = ["page-%03d-%s" % (i, LONG) for i in range(PAGE_FULL + PAGE_ROWS + 20)]
        odd = "odd/id ?#%\x01\x1b<b>&"
        self.joins(d, [join_body(rid, "node-%d" % i) for i, rid in enumerate(ids + [odd])])
        page = self.http("/")
        page_is_bounded(self, page, len(ids) + 1)
        # Past the page's cap, a job is still shown in full at its own page, linked from / when
        # it is listed there (the run id percent-encoded in the link, escaped in the text).
        last = ids[-1]
        self.assertNotIn(last, page)
        job = self.http("/job/" + last)
        self.assertEqual(job.count('<h2 class="job">'), 1)
        self.assertIn('<span class="run-id">%s</span>' % last, job)
        self.assertIn('<table class="nodes">', job)
        self.assertIn("h" * 255, job)  # its node's host
        self.assertIn("recent events", job)
        link = re.search(r'<a href="(/job/page-000-x+)">', page)
        self.assertTrue(link, page[:2000])
        self.assertIn('<span class="run-id">%s</span>' % ids[0], self.http(link.group(1)))
        enc = urllib.parse.quote(odd, safe="")
        job = self.http("/job/" + enc)
        self.assertIn("odd/id ?#%\\x01\\x1b&lt;b&gt;&amp;", job)
        self.assertNotRegex(job, r"[\x00-\x09\x0b-\x1f\x7f]")
        for bad, code in (("/job/nobody", 404), ("/job/", 404), ("/job/%00", 404),
                          ("/job/" + "a" * 200, 404), ("/job/%zz", 400), ("/job/%4", 400)):
            with self.subTest(path=bad):
                with self.assertRaises(urllib.error.HTTPError) as e:
                    self.http(bad)
                self.assertEqual(e.exception.code, code)

    def test_clients_that_never_read_do_not_hold_the_metrics(self):
        # 64 clients ask for / with a tiny receive buffer and never read: each answer stalls in
        # the socket. A scrape of /metrics gets through at once (it takes the slot of the oldest
        # of them), and the others lose theirs after RDZVD_HTTP_WRITE_TIMEOUT_MS.
        # 3,000 jobs: the unbounded page (4.3 MB) was past what the sockets buffer (4 MiB).
        d = self.start()
        n = 3000
        self.joins(d, [join_body("slot-%04d-%s" % (i, LONG), "node-%d" % i) for i in range(n)])
        hogs = []
        for _ in range(MAX_CONNS):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.settimeout(30)
            c.connect((HOST, self.mport))
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            self.addCleanup(c.close)
            hogs.append(c)
        for c in hogs:  # accepted, and its answer has begun (c has 30 s)
            self.assertTrue(c.recv(1, socket.MSG_PEEK), "closed before its answer")
        # Each scrape is answered before a hog's write timeout could have freed it a slot (the
        # bound is the behaviour: one that waited would take the whole timeout).
        for _ in range(3):
            t0 = time.monotonic()
            with urllib.request.urlopen("http://%s:%d/metrics" % (HOST, self.mport),
                                        timeout=WRITE_TIMEOUT_S * 0.9) as r:
                self.assertEqual(r.status, 200)
                self.assertIn(b"rdzvd_jobs %d\n" % n, r.read())
            self.assertLess(time.monotonic() - t0, WRITE_TIMEOUT_S * 0.9)
        # Every hog is closed: after its whole answer (it fit in the socket's buffers), for its
        # slot, or at the write timeout; none is held open.
        for c in hogs:
            got = b""
            try:
                while True:
                    chunk = c.recv(1 << 16)
                    if not chunk:
                        break
                    got += chunk
            except ConnectionResetError:
                pass
            self.assertLessEqual(len(got), PAGE_MAX + 1024)

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
