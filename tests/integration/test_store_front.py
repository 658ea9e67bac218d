#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_store_front.py: the node's store front (agent/front/agent-front.h, rdzv-agent
# --store-front) alone, between raw TCPStore clients and rdzvd (tests/agent/front-proxy): the
# waits of one key list are one upstream WAIT; the GETs of one key share a request until a change
# is forwarded (a client reads its own writes); CANCEL_WAIT is answered WAIT_CANCELED, after a
# STOP_WAITING too, and cancels the upstream wait; a client past its bound or sending a malformed
# frame is closed and the others go on; the store lost closes every client's connection; every
# op's reply comes through whole.
# PyTorch's own clients through it: integration-torch-client-front.

import json
import os
import subprocess
import time

from rdzvtest import HOST, Client, DaemonTestCase, enc, main, s

FRONT = os.environ.get("RDZV_FRONT_PROXY")
STOP_WAITING, WAIT_CANCELED = 0, 1


class StoreFront(DaemonTestCase):

    def setUp(self):
        if not FRONT:
            self.skipTest("RDZV_FRONT_PROXY (tests/agent/front-proxy) not given")
        self.d = self.daemon()
        self.proc = subprocess.Popen([FRONT, HOST, str(self.d.port)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.end)
        self.port = int(self.proc.stdout.readline())

    def end(self):
        """The front's exit status, its counts and what it said, once (stdin closed)."""
        if not hasattr(self, "ended"):
            out, err = self.proc.communicate(timeout=30)
            self.ended = (self.proc.returncode, json.loads(out) if out.strip() else None, err)
        return self.ended

    def raw(self):
        c = Client(self.d.port)
        self.addCleanup(c.close)
        return c

    def client(self, *a, **kw):
        c = Client(self.port, *a, **kw)
        self.addCleanup(c.close)
        return c

    def test_waits_of_one_key_list_are_one_upstream_wait(self):
        cs = [self.client() for _ in range(8)]
        for c in cs:
            c.wait_send(["k"])
        for c in cs:
            c.sync()  # each WAIT is registered before the key is set (a PING after it)
        cs[0].wait_send(["k", "other"])  # another list: a wait of its own
        self.raw().set("k", "v")
        for c in cs:
            self.assertEqual(c.r_u8(), STOP_WAITING)
            self.assertEqual(c.get("k"), b"v")
        cs[0].expect_nothing()  # "other" is not set
        self.raw().set("other", "1")
        self.assertEqual(cs[0].r_u8(), STOP_WAITING)
        rc, st, err = self.end()
        self.assertEqual(rc, 0, err)
        self.assertEqual((st["waits"], st["upstream_waits"], st["wait_conns"]), (9, 2, 2), st)

    def test_a_queue_item_wakes_one_waiter(self):
        # queue_pop(block=True) is WAIT of its key, then QUEUE_POP: each item wakes one waiter,
        # as on rdzvd. A key the front has seen hold a queue (a QUEUE_LEN here) is waited on by
        # each waiter on its own.
        a, b = self.client(), self.client()
        self.assertEqual(a.queue_len("q"), 0)
        for c in (a, b):
            c.wait_send(["q"])
            c.sync()
        raw = self.raw()
        raw.queue_push("q", "item1")
        raw.sync()
        first = self.first_answer((a, b))
        self.assertEqual(first.queue_pop("q"), (1, b"item1"))
        other = b if first is a else a
        other.expect_nothing()
        raw.queue_push("q", "item2")
        self.assertEqual(other.r_u8(), STOP_WAITING)
        self.assertEqual(other.queue_pop("q"), (1, b"item2"))
        rc, st, err = self.end()
        self.assertEqual(rc, 0, err)
        self.assertEqual((st["waits"], st["upstream_waits"], st["wait_conns"]), (2, 2, 2), st)

    def first_answer(self, cs):
        """The one of cs that gets STOP_WAITING (within a few seconds)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for c in cs:
                c.sock.settimeout(0.05)
                try:
                    b = c.sock.recv(1)
                except OSError:
                    continue
                self.assertEqual(b, bytes([STOP_WAITING]))
                return c
        self.fail("no waiter was woken")

    def test_gets_of_one_key_share_a_request_until_a_change(self):
        raw = self.raw()
        raw.set("k", "v1")
        raw.sync()  # applied before the front's GET comes on a connection of its own
        c = self.client()
        # Eight GETs in one write: two go upstream, the six queued behind the second share it.
        c.send(b"".join(enc("modern", "GET", s("k")) for _ in range(8)))
        self.assertEqual([c.r_str() for _ in range(8)], [b"v1"] * 8)
        # A change in between: the GET after it asks again, and reads the change.
        c.send(enc("modern", "GET", s("k")) + enc("modern", "SET", s("k"), s("v2")) +
               enc("modern", "GET", s("k")))
        self.assertEqual([c.r_str(), c.r_str()], [b"v1", b"v2"])
        rc, st, err = self.end()
        self.assertEqual(rc, 0, err)
        # the first GET went out at once; the six after the second, queued behind it, share it
        self.assertEqual((st["requests"], st["forwarded"], st["shared_gets"]), (11, 5, 6), st)

    def test_cancel_wait(self):
        c = self.client()
        c.wait_send(["never"])
        c.sync()
        self.assertEqual(c.cancel_wait(), WAIT_CANCELED)
        self.raw().set("never", "now")  # the wait is gone: nothing comes
        c.expect_nothing()
        # The 2.1+ race: the STOP_WAITING came first; CANCEL_WAIT is answered all the same.
        c.wait_send(["k"])
        c.sync()
        self.raw().set("k", "v")
        self.assertEqual(c.r_u8(), STOP_WAITING)
        self.assertEqual(c.cancel_wait(), WAIT_CANCELED)
        c.sync()
        rc, st, err = self.end()
        self.assertEqual(rc, 0, err)
        # the cancelled one closed (which cancels it on rdzvd): a connection each
        self.assertEqual((st["upstream_waits"], st["wait_conns"]), (2, 2), st)

    def test_every_op(self):
        # Each reply's framing through the front (the raw client reads exactly what it expects,
        # and a PING after them proves nothing is left over).
        c = self.client()
        c.set("a", "1")
        self.assertEqual(c.compare_set("a", "1", "2"), b"2")
        self.assertEqual(c.add("n", -3), -3)
        self.assertEqual(c.check(["a", "n"]), 0)
        self.assertEqual(c.check(["a", "missing"]), 1)
        c.append("a", "34")
        c.multi_set([("m1", "x"), ("m2", "")])
        self.assertEqual(c.multi_get(["a", "m1", "m2", "missing"]), [b"234", b"x", b"", b""])
        # An empty reply, whole with no byte: what follows is not held behind it.
        self.assertEqual(c.multi_get([]), [])
        self.assertEqual(c.wait(["a"]), 0)
        self.assertEqual(c.num_keys(), 4)
        self.assertEqual(c.delete("m1"), 1)
        self.assertEqual(c.delete("m1"), 0)
        self.assertEqual(c.queue_pop("q"), (0, None))
        c.queue_push("q", "i1")
        c.queue_push("q", "")
        self.assertEqual(c.queue_len("q"), 2)
        self.assertEqual(c.queue_pop("q"), (2, b"i1"))
        self.assertEqual(c.queue_pop("q"), (1, b""))
        self.assertEqual(sorted(c.list()), [b"a", b"m2", b"n"])
        c.sync()
        self.assertEqual(self.raw().get("a"), b"234")

    def test_a_legacy_client(self):
        c = self.client(dialect="2.0")  # PyTorch 1.13's numbering, no VALIDATE
        c.set("/x", "1")
        self.assertEqual(c.add("/n", 5), 5)
        self.assertEqual(c.wait(["/x"]), STOP_WAITING)
        self.assertEqual(c.get("/x"), b"1")
        self.assertEqual(self.raw().get("/n"), b"5")

    def test_a_client_past_its_bound_or_malformed_is_closed_alone(self):
        other = self.client()
        other.set("k", "v")
        greedy = self.client()
        greedy.send(b"".join(enc("modern", "GET", s("k")) for _ in range(65)))
        greedy.assert_closed()
        bad = self.client()
        bad.send(b"\xee")
        bad.assert_closed()
        watch = self.client(dialect="2.0")
        watch.send(enc("2.0", "WATCH_KEY", s("k")))
        watch.assert_closed()
        self.assertEqual(other.get("k"), b"v")
        rc, st, err = self.end()
        self.assertEqual(rc, 0, err)
        self.assertIn("more than 64 requests in flight", err)
        self.assertIn("WATCH_KEY", err)

    def test_the_store_lost_closes_every_client(self):
        cs = [self.client() for _ in range(3)]
        cs[0].wait_send(["never"])
        for c in cs:
            c.sync()
        t0 = time.monotonic()
        self.d.kill()
        for c in cs:
            c.assert_closed()
        self.assertLess(time.monotonic() - t0, 5)
        with self.assertRaises(ConnectionRefusedError):  # a new one at once, not left waiting
            Client(self.port)
        rc, _, err = self.end()
        self.assertEqual(rc, 1, err)
        self.assertIn("the store at 127.0.0.1:%d" % self.d.port, err)  # the first to notice


if __name__ == "__main__":
    main()
