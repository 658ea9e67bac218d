#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every descriptor a job holds counts against --max-conns. Each formed
generation holds its store's listening socket and, with --state-dir, its journal; --max-conns
counted neither, so a token holder's connections and one-node jobs together (336 connections
under an open-file limit of 1,024) left an honest job with "too many open files". rdzvd runs here
under an open-file limit of 256 (--max-conns 192 by default), with 140 idle TCPStore connections
and then as many one-node jobs as it takes: connections plus the generations' descriptors stay
within --max-conns (a job past it gets no store, said in one line, and fails; its agent's
connection is refused at the limit), rdzvd never runs out of descriptors, and once the
connections go, a new job forms."""
import os
import resource
import shutil
import socket
import tempfile

from authtest import JOIN, JOINED, Peer, join_body
from rdzvtest import HOST, VALIDATE_BYTES, DaemonTestCase, main

LIMIT = 256


class JobDescriptors(DaemonTestCase):

    def test_jobs_and_connections_stay_within_the_limit(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < LIMIT:
            self.skipTest("open-file limit %d is below %d" % (hard, LIMIT))
        # This process and the rdzvd it starts: 256 descriptors each.
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
        state = tempfile.mkdtemp(prefix="rdzv-fds-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state, "--handshake-timeout", "0")
        idle = []
        self.addCleanup(lambda: [c.close() for c in idle])
        for _ in range(140):
            c = socket.create_connection((HOST, d.port), timeout=5)
            c.sendall(VALIDATE_BYTES)
            idle.append(c)
        peers, formed, refused = [], 0, 0
        self.addCleanup(lambda: [p.close() for p in peers])
        for i in range(50):
            try:
                p = Peer(d.port)
                peers.append(p)
                p.hello()
                p.send(JOIN, join_body("fds-%d" % i, "n0", 1))
                op, body = p.recv_json()
                formed += op == JOINED
            except (OSError, AssertionError, ValueError, TypeError):  # closed: None
                refused += 1
        log = d.log()
        open_fds = len(os.listdir("/proc/%d/fd" % d.proc.pid))
        self.assertGreater(formed, 5, log[-2000:])
        self.assertGreater(refused, 0, "50 jobs fitted under the limit: the test proves nothing")
        # --max-conns (192) covers connections and job descriptors; the rest of the 256 is the
        # daemon's own (listeners, journals, epoll, stdio) and headroom.
        self.assertLessEqual(open_fds, 192 + 24, "rdzvd holds %d descriptors" % open_fds)
        self.assertNotIn("listener: accept:", log)
        self.assertRegex(log, r"descriptors of job generations")
        # Once the idle connections and the agents go, a new job forms and gets its store.
        ports = [c.getsockname()[1] for c in idle] + [p.local_port for p in peers]
        for c in idle:
            c.close()
        for p in peers:
            p.close()
        idle.clear()
        peers.clear()
        for port in ports:  # rdzvd has seen each of them close
            d.wait_log(r"\(127\.0\.0\.1:%d\): closed: " % port)
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(JOIN, join_body("fds-after", "n0", 1))
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        self.assertNotIn("listener: accept:", d.log())


if __name__ == "__main__":
    main()
