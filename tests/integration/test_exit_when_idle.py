#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_exit_when_idle.py: rdzvd --exit-when-idle SEC[:FIRST] (it ends by itself, exit 0 as on
# SIGTERM, once no rdzv peer has been connected for SEC seconds; FIRST before any came; TCPStore
# clients do not count) and --ready-fd N ("PORT\n" on N once listening, then N closed: EOF when
# rdzvd died first). What a hosting agent (agent/session/agent-host.c) relies on. Real rdzvd, real
# sockets.

import os
import socket
import subprocess
import time

from authtest import EVENT, JOIN, JOINED, LEAVE, ROUND, STORE, Peer, join_body
from rdzvtest import HOST, RDZVD, DaemonTestCase, main, track

JOIN_BODY = {"run_id": "idle", "node_id": "n0", "host": "nodeA", "nproc": 1, "node_rank": -1,
             "min": 2, "max": 2, "last_call_ms": 100, "max_restarts": 0, "nccl": "off",
             "nccl_ids": 1, "rank_hint": False, "heartbeat_timeout_ms": 60000,
             "join_timeout_ms": 600000, "scale_up_now": False}
IDLE_LINE = r"the job is over, exiting \(--exit-when-idle\)"


class ExitWhenIdle(DaemonTestCase):

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        return p

    def assert_runs(self, d, for_s):
        time.sleep(for_s)
        self.assertIsNone(d.proc.poll(), "rdzvd exited while it should not:\n" + d.log())

    def assert_exits(self, d, within_s):
        """rdzvd exits 0 by itself within within_s, saying why. Returns the time it took."""
        t0 = time.monotonic()
        try:
            rc = d.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            self.fail("rdzvd still runs %.1f s later:\n%s" % (within_s, d.log()))
        self.assertEqual(rc, 0, d.log())
        self.assertIsNotNone(d.find_log(IDLE_LINE), d.log())
        self.assertIsNotNone(d.find_log(r"^stopped \("), "the SIGTERM path:\n" + d.log())
        return time.monotonic() - t0

    def test_first_deadline_when_no_agent_comes(self):
        t0 = time.monotonic()
        d = self.daemon("--exit-when-idle", "1:3")
        self.assert_runs(d, 2)  # SEC (1) is not the first deadline
        self.assert_exits(d, 3)
        self.assertGreater(time.monotonic() - t0, 2.9)

    def test_first_deadline_defaults_to_180s(self):
        d = self.daemon("--exit-when-idle", "0.5")
        self.assertIsNotNone(d.find_log(r"no agent has been connected for 0\.5 s "
                                        r"\(none came: 180\.0 s\)"), d.log())
        self.assert_runs(d, 1.5)

    def test_agent_keeps_it_alive_and_its_leaving_starts_the_countdown(self):
        d = self.daemon("--exit-when-idle", "1:1")
        p = self.peer(d)
        p.send(JOIN, JOIN_BODY)
        self.assertEqual(p.recv_json()[0], JOINED)
        self.assert_runs(d, 2.5)
        p.close()
        self.assertLess(self.assert_exits(d, 2), 2)  # SEC + 1 s

    def test_countdown_restarts_when_the_last_agent_goes(self):
        d = self.daemon("--exit-when-idle", "1:1")
        a, b = self.peer(d), self.peer(d)
        a.close()
        self.assert_runs(d, 2)  # b is still connected
        b.close()
        self.assert_runs(d, 0.5)
        c = self.peer(d)  # a new agent within SEC stops the countdown
        self.assert_runs(d, 1.5)
        c.close()
        self.assert_exits(d, 2)

    def test_a_job_that_ended_frees_the_port_as_its_last_agent_leaves(self):
        # The rdzvd an agent hosts frees its port as the job ends, so that a torchrun (or the
        # same line) started then can bind it. SEC 30 here: a job still held would keep it
        # that long.
        d = self.daemon("--exit-when-idle", "30:30")
        a, b = self.peer(d), self.peer(d)
        body = join_body("over", "n0", mx=1)
        body["max_restarts"] = 0
        a.send(JOIN, body)
        self.assertEqual(a.recv_json()[0], JOINED)
        self.assertEqual(a.recv_json()[0], ROUND)
        a.send(LEAVE, {"generation": 1, "status": "succeeded"})
        self.assertEqual(a.recv_json()[0], EVENT)
        a.close()
        self.assert_runs(d, 0.5)  # b, an agent of no job, is still connected
        b.close()
        self.assertLess(self.assert_exits(d, 3), 1.5)
        self.assertIsNotNone(d.find_log(r"every job ended and no agent is connected"), d.log())
        s = socket.socket()
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((HOST, d.port))  # what torchrun's store does next
        s.listen()

    def test_no_job_ended_keeps_it_for_sec(self):
        d = self.daemon("--exit-when-idle", "1.5:30")
        a = self.peer(d)
        a.send(JOIN, JOIN_BODY)  # 1 of 2 nodes: the job never forms, nor ends
        self.assertEqual(a.recv_json()[0], JOINED)
        a.close()
        self.assert_runs(d, 1)
        self.assert_exits(d, 2)
        self.assertIsNotNone(d.find_log(r"no agent connected for 1\.5 s"), d.log())

    def test_tcpstore_clients_do_not_keep_it_alive(self):
        d = self.daemon("--exit-when-idle", "1:1")
        c = self.client(d)
        c.set(b"k", b"v")
        s = Peer(d.port)  # an rdzv peer that became a TCPStore client (rdzvctl's STORE)
        self.addCleanup(s.close)
        s.hello()
        s.send(STORE, {})
        a = self.peer(d)
        a.close()
        self.assert_exits(d, 2)
        c.assert_closed()  # closed at shutdown, not left hanging


class ReadyFd(DaemonTestCase):

    def start(self, *args):
        r, w = os.pipe()
        p = track(subprocess.Popen([RDZVD, "--bind", HOST, "--ready-fd", str(w), *args],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   pass_fds=(w,)))
        os.close(w)
        self.addCleanup(lambda: (p.poll() is None and p.kill(), p.wait(), p.stderr.close()))
        with os.fdopen(r, "rb") as f:
            got = f.read()  # returns at EOF: the write end is rdzvd's only
        return p, got

    def test_port_then_eof(self):
        p, got = self.start("--port", "0")
        self.assertTrue(got.endswith(b"\n"), got)
        port = int(got)
        with socket.create_connection((HOST, port), timeout=5):
            pass  # it listens on the port it wrote
        self.assertIsNone(p.poll())
        p.terminate()
        self.assertEqual(p.wait(timeout=5), 0)

    def test_eof_when_it_cannot_listen(self):
        with socket.socket() as s:
            s.bind((HOST, 0))
            s.listen()
            p, got = self.start("--port", str(s.getsockname()[1]))
            self.assertEqual(got, b"", "nothing written, EOF: rdzvd died before listening")
            self.assertNotEqual(p.wait(timeout=5), 0)

    def test_bad_fd_is_refused(self):
        r = subprocess.run([RDZVD, "--ready-fd", "987"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--ready-fd '987'", r.stderr)


if __name__ == "__main__":
    main()
