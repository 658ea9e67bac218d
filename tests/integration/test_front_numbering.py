#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_front_numbering.py: rdzvd's store-front numbering (proto/TCPSTORE.md section 9), byte by
# byte with a real rdzvd: a connection opened by VALIDATE with the front's magic gets every reply
# framed (00 and the reply, in turn), and its TAG_WAITs answered out of turn (01 and the tag)
# between any two replies; TAG_CANCEL drops one tag's waits. And what must be refused: the tag
# ops in any other numbering, PyTorch's WAIT and CANCEL_WAIT in this one, a tag that is not 8
# bytes, the front's name for --legacy.

import subprocess
import unittest

from rdzvtest import (FRAME_REPLY, FRAME_WOKEN, RDZVD, DaemonTestCase, enc, fresh_client_works,
                      i64, keys, main, s, u32, u64)


def tag(n):
    return u64(n)


class FrontTestCase(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon()
        self.f = self.client(self.d, "front")
        self.other = self.client(self.d)

    def req(self, op, *parts):
        self.f.send(enc("front", op, *parts))

    def reply(self, n):
        """One framed reply of n bytes."""
        got = self.f.recv_exact(1 + n)
        self.assertEqual(got[0], FRAME_REPLY, "not a reply frame: %r" % got)
        return got[1:]

    def woken(self, t):
        self.assertEqual(self.f.recv_exact(9), bytes([FRAME_WOKEN]) + tag(t))

    def tag_wait(self, t, ks):
        self.f.send(enc("front", "TAG_WAIT", u64(len(ks) + 1), s(tag(t)),
                        b"".join(s(k) for k in ks)))

    def sync(self, nonce=0x5EED):
        self.req("PING", u32(nonce))
        self.assertEqual(self.reply(4), u32(nonce))


class Replies(FrontTestCase):

    def test_every_reply_framed_and_none_for_the_ops_without(self):
        self.req("SET", s("k"), s("v1"))  # none
        self.req("GET", s("k"))
        self.assertEqual(self.reply(8 + 2), s("v1"))
        self.req("ADD", s("n"), i64(5))
        self.assertEqual(self.reply(8), i64(5))
        self.req("CHECK", keys(["k", "missing"]))
        self.assertEqual(self.reply(1), b"\x01")
        self.req("COMPARE_SET", s("k"), s("v1"), s("v2"))
        self.assertEqual(self.reply(8 + 2), s("v2"))
        self.req("APPEND", s("k"), s("!"))  # none
        self.req("MULTI_SET", u64(1), s("a"), s("1"))  # none
        self.req("MULTI_GET", keys([]))  # an empty reply: its frame byte alone
        self.assertEqual(self.reply(0), b"")
        self.req("MULTI_GET", keys(["a", "k"]))
        self.assertEqual(self.reply(8 + 1 + 8 + 3), s("1") + s("v2!"))
        self.req("QUEUE_PUSH", s("q"), s("i"))  # none
        self.req("QUEUE_LEN", s("q"))
        self.assertEqual(self.reply(8), u64(1))
        self.req("QUEUE_POP", s("q"))
        self.assertEqual(self.reply(8 + 8 + 1), u64(1) + s("i"))
        self.req("DELETE_KEY", s("a"))
        self.assertEqual(self.reply(8), u64(1))
        self.req("GETNUMKEYS")
        self.assertEqual(self.reply(8), u64(2))
        self.req("LIST")
        got = self.reply(8 + 9 + 9)
        self.assertEqual(got[:8], u64(2))
        self.assertEqual(sorted([got[8:17], got[17:]]), sorted([s("k"), s("n")]))
        self.sync()
        self.f.expect_nothing()


class TagWaits(FrontTestCase):

    def test_woken_out_of_turn_between_replies(self):
        self.tag_wait(1, ["a"])
        self.tag_wait(2, ["b", "c"])
        self.sync()
        self.other.set("b", "1")
        self.other.sync()
        self.f.expect_nothing()  # c is still missing
        self.other.set("c", "1")
        self.woken(2)
        self.req("GET", s("b"))
        self.assertEqual(self.reply(9), s("1"))
        self.other.set("a", "1")
        self.woken(1)
        self.f.expect_nothing()

    def test_keys_present_or_none_answer_at_once(self):
        self.other.set("here", "1")
        self.other.sync()
        self.tag_wait(7, ["here"])
        self.woken(7)
        self.tag_wait(8, [])
        self.woken(8)
        self.sync()

    def test_its_own_write_wakes_it_after_the_reply(self):
        self.tag_wait(3, ["n"])
        self.tag_wait(4, ["m"])
        self.req("ADD", s("n"), i64(1))
        self.assertEqual(self.reply(8), i64(1))  # the reply first, whole
        self.woken(3)
        self.req("SET", s("m"), s("x"))  # no reply: the frame alone
        self.woken(4)
        self.sync()

    def test_one_write_wakes_every_tag_of_the_key(self):
        for t in (10, 11, 12):
            self.tag_wait(t, ["go"])
        self.sync()
        self.other.set("go", "1")
        for t in (10, 11, 12):
            self.woken(t)
        self.f.expect_nothing()

    def test_tag_cancel_drops_that_tag_only(self):
        self.tag_wait(20, ["x"])
        self.tag_wait(21, ["x"])
        self.req("TAG_CANCEL", s(tag(20)))  # no reply
        self.req("TAG_CANCEL", s(tag(99)))  # none such: nothing either
        self.sync()
        self.other.set("x", "1")
        self.woken(21)
        self.f.expect_nothing()

    def test_plain_clients_waits_unchanged_beside_a_front(self):
        self.other.wait_send(["y"])
        self.tag_wait(30, ["y"])
        self.sync()
        with self.client(self.d) as w:
            w.set("y", "1")
        self.assertEqual(self.other.r_u8(), 0)  # STOP_WAITING, unframed
        self.woken(30)

    def test_tag_waits_count_against_max_wait_keys(self):
        d = self.daemon("--max-wait-keys", "3")
        f = self.client(d, "front")
        f.send(enc("front", "TAG_WAIT", u64(3), s(tag(1)), s("a"), s("b")))
        mark = d.mark()
        f.send(enc("front", "TAG_WAIT", u64(3), s(tag(2)), s("c"), s("e")))
        f.assert_closed()
        d.wait_log(f.peer_tag + r".*more than 3 keys waited on", since=mark, levels=("warn",))
        fresh_client_works(self, d)


class Refused(DaemonTestCase):
    """Each closes that connection alone, logged; rdzvd serves the next."""

    def refused(self, dialect, data, pattern, **kw):
        d = self.daemon()
        c = self.client(d, dialect, **kw)
        if dialect == "modern":
            c.ping()
        mark = d.mark()
        c.send(data)
        c.assert_closed()
        d.wait_log(c.peer_tag + r".*" + pattern, since=mark, levels=("warn",))
        fresh_client_works(self, d)

    def test_tag_wait_in_the_modern_numbering(self):
        self.refused("modern", b"\x12" + u64(1) + s(tag(1)), r"unknown operation \(0x12\)")

    def test_tag_cancel_in_the_modern_numbering(self):
        self.refused("modern", b"\x13" + s(tag(1)), r"unknown operation \(0x13\)")

    def test_tag_wait_from_a_1x_client(self):
        self.refused("2.0", b"\x12" + u64(1) + s(tag(1)), r"unknown operation \(0x12\)")

    def test_pytorch_wait_in_the_front_numbering(self):
        self.refused("front", b"\x06" + keys(["k"]), r"unknown operation \(0x06\).*front")

    def test_pytorch_cancel_wait_in_the_front_numbering(self):
        self.refused("front", b"\x0c", r"unknown operation \(0x0c\).*front")

    def test_a_tag_of_7_bytes(self):
        self.refused("front", b"\x12" + u64(2) + s(b"1234567") + s("k"),
                     r"TAG_WAIT's tag of 7 bytes, not 8")

    def test_tag_wait_without_its_tag(self):
        self.refused("front", b"\x12" + u64(0), r"TAG_WAIT without its tag")

    def test_a_cancel_tag_of_9_bytes(self):
        self.refused("front", b"\x13" + s(b"123456789"), r"TAG_CANCEL's tag of 9 bytes")

    def test_validate_again(self):
        self.refused("front", b"\x00\xce\xf7\x85\x3c", r"VALIDATE after the start")

    def test_front_is_no_legacy_numbering(self):
        r = subprocess.run([RDZVD, "--port", "0", "--bind", "127.0.0.1", "--legacy", "front"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("--legacy", r.stderr)
        self.assertIn("expected 2.0, 2.1 or none", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    main()
