#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_http_thread.py: rdzvd's HTTP status server (--metrics-port) runs on a thread of its own
# ("rdzvd-http", at nice +10), which asks the store's loop for each body made from the jobs.
# Requests of every kind at once each get their whole answer, made after they came (a store key set
# before the request is counted); and the thread ends with the daemon, on SIGTERM and on
# --exit-when-idle, with bodies still being asked for. Real rdzvd, real sockets.

import glob
import json
import os
import socket
import subprocess
import time

from metricstest import daemon_with_metrics, http_get
from rdzvtest import HOST, T_STOP, DaemonTestCase, fresh_client_works, main, read_until_closed

T_LONG = 60.0
NICE = 10  # RDZVD_HTTP_NICE
PATHS = ["/", "/metrics", "/status.json", "/job/no-such-run", "/index.html"]


def threads(pid):
    """{name: nice} of pid's threads."""
    out = {}
    for stat in glob.glob("/proc/%d/task/*/stat" % pid):
        try:
            with open(stat) as f:
                line = f.read()
        except OSError:
            continue  # a thread that ended meanwhile
        name = line[line.index("(") + 1:line.rindex(")")]
        out[name] = int(line[line.rindex(")") + 2:].split()[16])  # field 19, nice
    return out


def thread_names(pid):
    return list(threads(pid))


def send_requests(port, n):
    """n connections, each with a whole GET of one of PATHS sent; [(path, socket)]."""
    out = []
    for i in range(n):
        path = PATHS[i % len(PATHS)]
        c = socket.create_connection((HOST, port), timeout=T_LONG)
        c.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
        out.append((path, c))
    return out


def store_keys(metrics):
    for line in metrics.splitlines():
        if line.startswith('rdzvd_store_keys{store="main"} '):
            return int(line.split()[-1])
    raise AssertionError("no rdzvd_store_keys in\n" + metrics[:2000])


class HttpThread(DaemonTestCase):

    def test_the_status_server_has_a_thread_of_its_own(self):
        d, mport = daemon_with_metrics(self)
        self.assertIn("rdzvd_uptime_seconds", http_get(mport, "/metrics", timeout=T_LONG))
        ts = threads(d.pid)
        self.assertEqual(sorted(ts), ["rdzvd", "rdzvd-http"], ts)
        # Below the store's loop (RDZVD_HTTP_NICE): where CPUs are short, the store goes first.
        self.assertEqual(ts["rdzvd-http"], min(19, ts["rdzvd"] + NICE), ts)
        plain = self.daemon()
        fresh_client_works(self, plain)
        self.assertNotIn("rdzvd-http", thread_names(plain.pid))

    def test_requests_of_every_kind_at_once_each_get_their_whole_answer(self):
        d, mport = daemon_with_metrics(self)
        for rnd in range(3):
            conns = send_requests(mport, 60)  # under RDZVD_HTTP_MAX_CONNS
            for path, c in conns:
                reply = read_until_closed(c, T_LONG)
                c.close()
                head, _, body = reply.partition(b"\r\n\r\n")
                status = head.split(b"\r\n")[0]
                want = b"404" if path.startswith("/job/") else b"200"
                self.assertIn(want, status, (rnd, path, reply[:300]))
                length = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                self.assertEqual(int(length[0].split(b":")[1]), len(body), (rnd, path))
                if path == "/status.json":
                    self.assertIn("jobs", json.loads(body))
                elif path == "/metrics":
                    self.assertIn(b"rdzvd_uptime_seconds", body)
                elif path.startswith("/job/"):
                    self.assertIn(b"no such job", body)
                else:
                    self.assertIn(b"<html", body.lower())
        fresh_client_works(self, d)

    def test_each_answer_is_made_after_its_request_came(self):
        d, mport = daemon_with_metrics(self)
        c = self.client(d)
        base = store_keys(http_get(mport, "/metrics", timeout=T_LONG))
        for i in range(20):
            c.set(b"http-thread/%d" % i, b"v")  # answered: the store's loop applied it
            self.assertEqual(store_keys(http_get(mport, "/metrics", timeout=T_LONG)),
                             base + i + 1)
            doc = json.loads(http_get(mport, "/status.json", timeout=T_LONG))
            self.assertEqual(doc["stats"]["main_store_keys"], base + i + 1, doc["stats"])

    def test_sigterm_while_answers_are_asked_for(self):
        d, mport = daemon_with_metrics(self)
        conns = send_requests(mport, 60)
        log = d.stop(timeout=T_STOP * 4)
        self.assertIn("received Terminated", log)
        for _, c in conns:
            read_until_closed(c, T_STOP)  # an answer or none; closed either way
            c.close()

    def test_exit_when_idle_ends_the_thread_too(self):
        d, mport = daemon_with_metrics(self, "--exit-when-idle", "1:1")
        conns = send_requests(mport, 10)
        try:
            rc = d.proc.wait(timeout=T_LONG)
        except subprocess.TimeoutExpired:
            self.fail("rdzvd still runs:\n" + d.log())
        self.assertEqual(rc, 0, d.log())
        self.assertIsNotNone(d.find_log(r"^stopped \("), d.log())
        for _, c in conns:
            read_until_closed(c, T_STOP)
            c.close()
        self.assertFalse(os.path.exists("/proc/%d" % d.pid) and
                         "rdzvd-http" in thread_names(d.pid))


if __name__ == "__main__":
    main()
