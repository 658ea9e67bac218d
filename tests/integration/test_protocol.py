#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_protocol.py: byte-exact TCPStore exchanges with a real rdzvd, in each opcode numbering
# (modern >= 2.2 with VALIDATE, legacy 2.0 = PyTorch 1.x, legacy 2.1), and the store semantics
# PyTorch clients depend on (WAIT counting, CANCEL_WAIT, COMPARE_SET's odd replies, ADD text).

import time
import unittest

from rdzvtest import (CHECK_NOT_READY, CHECK_READY, VALIDATE_BYTES, WAIT_CANCELED,
                      WAIT_STOP_WAITING, DaemonTestCase, enc, fresh_client_works, i64, main, s,
                      u32)


class ModernBytes(DaemonTestCase):
    """Exact bytes for the modern numbering, written out by hand."""

    def setUp(self):
        self.d = self.daemon()
        self.c = self.client(self.d, validate=False)

    def xchg(self, req_hex, reply_hex):
        self.c.send(bytes.fromhex(req_hex))
        want = bytes.fromhex(reply_hex)
        if want:
            self.assertEqual(self.c.recv_exact(len(want)), want)

    def test_validate_then_ping(self):
        self.c.send(bytes.fromhex("00 CE F7 85 3C"))
        self.c.expect_nothing()
        self.xchg("0D 78 56 34 12", "78 56 34 12")
        self.xchg("0D 00 00 00 00", "00 00 00 00")
        self.xchg("0D FF FF FF FF", "FF FF FF FF")
        self.c.expect_nothing()

    def test_every_op_bytes(self):
        x = self.xchg
        x("00 CE F7 85 3C", "")
        # SET "k" = "v1": no reply
        x("01" "0100000000000000" "6B" "0200000000000000" "7631", "")
        # GET "k" -> "v1"
        x("03" "0100000000000000" "6B", "0200000000000000" "7631")
        # GET missing "z" -> empty
        x("03" "0100000000000000" "7A", "0000000000000000")
        # ADD "n" += 5 -> 5; += -2 -> 3
        x("04" "0100000000000000" "6E" "0500000000000000", "0500000000000000")
        x("04" "0100000000000000" "6E" "FEFFFFFFFFFFFFFF", "0300000000000000")
        # CHECK ["k","n"] -> READY(0); CHECK ["k","q"] -> NOT_READY(1)
        x("05" "0200000000000000" "0100000000000000" "6B" "0100000000000000" "6E", "00")
        x("05" "0200000000000000" "0100000000000000" "6B" "0100000000000000" "71", "01")
        # WAIT ["k"] (present) -> STOP_WAITING(0) at once
        x("06" "0100000000000000" "0100000000000000" "6B", "00")
        # GETNUMKEYS -> 2 (k, n)
        x("07", "0200000000000000")
        # COMPARE_SET "k" expected "v1" desired "v2" -> "v2"
        x("02" "0100000000000000" "6B" "0200000000000000" "7631" "0200000000000000" "7632",
          "0200000000000000" "7632")
        # APPEND "k" += "!": no reply; then GET -> "v2!"
        x("09" "0100000000000000" "6B" "0100000000000000" "21", "")
        x("03" "0100000000000000" "6B", "0300000000000000" "763221")
        # MULTI_SET [("a","1"),("b","2")]: no reply
        x("0B" "0200000000000000" "0100000000000000" "61" "0100000000000000" "31"
          "0100000000000000" "62" "0100000000000000" "32", "")
        # MULTI_GET ["b","zz","a"] -> "2", "", "1" (no count prefix)
        x("0A" "0300000000000000" "0100000000000000" "62" "0200000000000000" "7A7A"
          "0100000000000000" "61",
          "0100000000000000" "32" "0000000000000000" "0100000000000000" "31")
        # DELETE_KEY "a" -> 1, again -> 0
        x("08" "0100000000000000" "61", "0100000000000000")
        x("08" "0100000000000000" "61", "0000000000000000")
        # CANCEL_WAIT with nothing pending -> WAIT_CANCELED(1)
        x("0C", "01")
        # QUEUE_PUSH "q" "i1": no reply; QUEUE_LEN -> 1; QUEUE_POP -> 1 then "i1"; POP -> 0 only
        x("0E" "0100000000000000" "71" "0200000000000000" "6931", "")
        x("10" "0100000000000000" "71", "0100000000000000")
        x("0F" "0100000000000000" "71", "0100000000000000" "0200000000000000" "6931")
        x("0F" "0100000000000000" "71", "0000000000000000")
        x("10" "0100000000000000" "71", "0000000000000000")
        # PING
        x("0D EF BE AD DE", "EF BE AD DE")
        self.c.expect_nothing()
        # LIST: keys k, n, b in some order
        self.c.send(b"\x11")
        n = self.c.r_i64()
        self.assertEqual(n, 3)
        self.assertEqual(sorted(self.c.r_str() for _ in range(n)), [b"b", b"k", b"n"])
        self.c.expect_nothing()


class ModernSemantics(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon()
        self.c = self.client(self.d)

    def test_no_reply_ops(self):
        c = self.c
        for send in (lambda: c.set("a", "1"), lambda: c.append("a", "2"),
                     lambda: c.multi_set([("b", "3"), ("c", "4")]),
                     lambda: c.queue_push("q", "x")):
            send()
            c.expect_nothing()
            c.sync()
        self.assertEqual(c.multi_get(["a", "b", "c"]), [b"12", b"3", b"4"])
        self.assertEqual(c.queue_len("q"), 1)

    def test_get_missing_is_empty(self):
        self.assertEqual(self.c.get("nope"), b"")
        self.assertEqual(self.c.multi_get(["nope", "nada"]), [b"", b""])
        # Reading a missing key does not create it.
        self.assertEqual(self.c.num_keys(), 0)
        self.assertEqual(self.c.check(["nope"]), CHECK_NOT_READY)

    def test_set_overwrites_and_binary_values(self):
        c = self.c
        blob = bytes(range(256)) * 4
        c.set(b"\x00bin\xff", blob)
        self.assertEqual(c.get(b"\x00bin\xff"), blob)
        c.set(b"\x00bin\xff", b"")
        self.assertEqual(c.get(b"\x00bin\xff"), b"")
        # An empty value still counts as a key.
        self.assertEqual(c.check([b"\x00bin\xff"]), CHECK_READY)
        self.assertEqual(c.num_keys(), 1)
        c.set(b"", b"empty key")
        self.assertEqual(c.get(b""), b"empty key")

    def test_add_keeps_decimal_text(self):
        c = self.c
        self.assertEqual(c.add("n", 5), 5)
        self.assertEqual(c.add("n", 7), 12)
        self.assertEqual(c.get("n"), b"12")
        self.assertEqual(c.add("n", -20), -8)
        self.assertEqual(c.get("n"), b"-8")
        self.assertEqual(c.add("n", 0), -8)
        c.set("m", "41")
        self.assertEqual(c.add("m", 1), 42)
        self.assertEqual(c.get("m"), b"42")
        self.assertEqual(c.add("big", 2**62), 2**62)
        self.assertEqual(c.get("big"), str(2**62).encode())

    def test_add_on_non_decimal_closes_that_connection(self):
        other = self.client(self.d)
        other.set("shared", "before")
        self.c.set("word", "abc")
        mark = self.d.mark()
        self.c.req("ADD", s("word"), i64(1))
        self.c.assert_closed()
        self.d.wait_log(self.c.peer_tag + r".*not a decimal integer", since=mark,
                        levels=("warn",))
        # Value unchanged, other connection unaffected.
        self.assertEqual(other.get("word"), b"abc")
        self.assertEqual(other.get("shared"), b"before")

    def test_compare_set_odd_replies(self):
        c = self.c
        # Missing key + non-empty expected: returns expected, stores nothing.
        self.assertEqual(c.compare_set("k", "exp", "des"), b"exp")
        self.assertEqual(c.check(["k"]), CHECK_NOT_READY)
        self.assertEqual(c.num_keys(), 0)
        # Missing key + empty expected: stores desired, returns it.
        self.assertEqual(c.compare_set("k", "", "first"), b"first")
        self.assertEqual(c.get("k"), b"first")
        # Mismatch: returns current, no change.
        self.assertEqual(c.compare_set("k", "wrong", "second"), b"first")
        self.assertEqual(c.get("k"), b"first")
        # Present key + empty expected is a plain mismatch.
        self.assertEqual(c.compare_set("k", "", "third"), b"first")
        # Match: replaced, returns the new value.
        self.assertEqual(c.compare_set("k", "first", "second"), b"second")
        self.assertEqual(c.get("k"), b"second")
        # An empty current value matches an empty expected.
        c.set("e", "")
        self.assertEqual(c.compare_set("e", "", "filled"), b"filled")
        self.assertEqual(c.num_keys(), 2)

    def test_check_and_numkeys_and_delete(self):
        c = self.c
        self.assertEqual(c.check([]), CHECK_READY)
        c.set("a", "1")
        c.set("b", "2")
        self.assertEqual(c.check(["a", "b"]), CHECK_READY)
        self.assertEqual(c.check(["a", "b", "c"]), CHECK_NOT_READY)
        self.assertEqual(c.num_keys(), 2)
        self.assertEqual(c.delete("a"), 1)
        self.assertEqual(c.delete("a"), 0)
        self.assertEqual(c.delete("never"), 0)
        self.assertEqual(c.num_keys(), 1)
        self.assertEqual(c.check(["a"]), CHECK_NOT_READY)
        self.assertEqual(c.get("a"), b"")

    def test_numkeys_counts_only_keys_with_values(self):
        c = self.c
        w = self.client(self.d)
        w.wait_send(["pending"])  # a wait registration is not a key
        w.expect_nothing()
        c.queue_push("q", "item")  # a queue is not a key
        c.set("real", "1")
        self.assertEqual(c.num_keys(), 1)
        self.assertEqual(c.list(), [b"real"])
        # A queue key is "present" for CHECK (as in PyTorch's libuv server).
        self.assertEqual(c.check(["q"]), CHECK_READY)

    def test_append(self):
        c = self.c
        c.append("a", "x")
        c.append("a", "")
        c.append("a", "yz")
        self.assertEqual(c.get("a"), b"xyz")
        self.assertEqual(c.num_keys(), 1)

    def test_multi_set_get(self):
        c = self.c
        kvs = [("m/%d" % i, "v%d" % i) for i in range(50)]
        c.multi_set(kvs)
        self.assertEqual(c.multi_get([k for k, _ in kvs]), [v.encode() for _, v in kvs])
        self.assertEqual(c.num_keys(), 50)
        c.multi_set([("m/0", "a"), ("m/0", "b")])  # applied in order
        self.assertEqual(c.get("m/0"), b"b")
        self.assertEqual(c.multi_get([]), [])
        c.multi_set([])
        c.sync()

    def test_list(self):
        c = self.c
        self.assertEqual(c.list(), [])
        names = [b"/a", b"init/", b"\x00\xff", b"x" * 300]
        for k in names:
            c.set(k, b"1")
        c.delete(b"/a")
        self.assertEqual(sorted(c.list()), sorted(names[1:]))

    def test_ping_nonces(self):
        for nonce in (0, 1, 0xFFFFFFFF, 4242):
            self.c.ping(nonce)

    def test_queue(self):
        c = self.c
        self.assertEqual(c.queue_pop("q"), (0, None))
        self.assertEqual(c.queue_len("q"), 0)
        c.queue_push("q", "one")
        c.queue_push("q", "")
        c.queue_push("q", "three")
        self.assertEqual(c.queue_len("q"), 3)
        self.assertEqual(c.queue_pop("q"), (3, b"one"))
        self.assertEqual(c.queue_pop("q"), (2, b""))
        self.assertEqual(c.queue_pop("q"), (1, b"three"))
        self.assertEqual(c.queue_pop("q"), (0, None))
        self.assertEqual(c.queue_len("q"), 0)
        # Queues and keys are separate namespaces.
        c.set("q", "kv")
        c.queue_push("q", "item")
        self.assertEqual(c.get("q"), b"kv")
        self.assertEqual(c.queue_pop("q"), (1, b"item"))
        self.assertEqual(c.get("q"), b"kv")

    def test_queue_push_wakes_one_waiter(self):
        w1 = self.client(self.d)
        w2 = self.client(self.d)
        w1.wait_send(["jobs"])
        w1.expect_nothing()  # registered first
        w2.wait_send(["jobs"])
        w2.expect_nothing()
        self.c.queue_push("jobs", "j1")
        self.assertEqual(w1.r_u8(), WAIT_STOP_WAITING)  # the oldest waiter
        w2.expect_nothing()
        self.assertEqual(w1.queue_pop("jobs"), (1, b"j1"))
        self.c.queue_push("jobs", "j2")
        self.assertEqual(w2.r_u8(), WAIT_STOP_WAITING)
        self.assertEqual(w2.queue_pop("jobs"), (1, b"j2"))
        w1.expect_nothing(0.05)

    # -- WAIT --

    def test_wait_present_replies_at_once(self):
        self.c.set("a", "1")
        self.assertEqual(self.c.wait(["a"], timeout=2), WAIT_STOP_WAITING)
        self.assertEqual(self.c.wait([], timeout=2), WAIT_STOP_WAITING)

    def test_wait_counts_only_missing_keys(self):
        c, w = self.c, self.client(self.d)
        c.set("a", "1")
        c.sync()
        # a is present at request time: only b is waited for.
        w.wait_send(["a", "b"])
        w.expect_nothing()
        c.set("b", "1")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        w.expect_nothing()
        # Writing a present key again does not count, nor does a second write of a key whose
        # registration was already used.
        w.wait_send(["a", "c", "d"])
        w.expect_nothing()
        c.set("a", "again")
        c.set("c", "1")
        w.expect_nothing()
        c.set("c", "2")
        w.expect_nothing()
        c.set("d", "1")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        w.expect_nothing()
        w.sync()

    def test_wait_woken_by_each_creating_write(self):
        c = self.c
        writers = {
            "SET": lambda k: c.set(k, "v"),
            "ADD": lambda k: self.assertEqual(c.add(k, 3), 3),
            "APPEND": lambda k: c.append(k, "v"),
            "MULTI_SET": lambda k: c.multi_set([("unrelated/" + k, "x"), (k, "v")]),
            "COMPARE_SET": lambda k: self.assertEqual(c.compare_set(k, "", "v"), b"v"),
        }
        for name, write in writers.items():
            with self.subTest(op=name):
                w = self.client(self.d)
                key = "w/" + name
                w.wait_send([key])
                w.expect_nothing()
                write(key)
                self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
                w.expect_nothing(0.05)
                w.sync()

    def test_wait_not_woken_by_delete_or_other_keys(self):
        c, w = self.c, self.client(self.d)
        w.wait_send(["k"])
        w.expect_nothing()
        self.assertEqual(c.delete("k"), 0)
        c.set("k2", "x")
        self.assertEqual(c.compare_set("k", "", "v"), b"v")  # creates k: wakes
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        # Deleting a present key does not produce a reply either.
        w.wait_send(["gone"])
        c.set("gone", "x")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        self.assertEqual(c.delete("gone"), 1)
        w.expect_nothing()

    def test_wait_multi_key_with_multi_set(self):
        w = self.client(self.d)
        w.wait_send(["x", "y", "z"])
        w.expect_nothing()
        self.c.multi_set([("x", "1"), ("y", "2")])
        w.expect_nothing()
        self.c.multi_set([("z", "3")])
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)

    def test_two_waiters_on_different_connections(self):
        w1, w2 = self.client(self.d), self.client(self.d)
        w1.wait_send(["shared"])
        w2.wait_send(["shared", "only2"])
        w1.expect_nothing()
        w2.expect_nothing(0.05)
        self.c.set("shared", "1")
        self.assertEqual(w1.r_u8(), WAIT_STOP_WAITING)
        w2.expect_nothing()
        self.c.add("only2", 1)
        self.assertEqual(w2.r_u8(), WAIT_STOP_WAITING)
        w1.sync()
        w2.sync()

    def test_cancel_wait(self):
        c, w = self.c, self.client(self.d)
        # Nothing pending: still WAIT_CANCELED.
        self.assertEqual(w.cancel_wait(), WAIT_CANCELED)
        self.assertEqual(w.cancel_wait(), WAIT_CANCELED)
        # Pending: WAIT_CANCELED, and a later SET sends nothing more.
        w.wait_send(["k", "k2"])
        w.expect_nothing()
        self.assertEqual(w.cancel_wait(), WAIT_CANCELED)
        c.set("k", "1")
        c.set("k2", "1")
        w.expect_nothing()
        w.sync()
        # Race: the wait was answered before the cancel arrived: STOP_WAITING then CANCELED.
        w.wait_send(["late"])
        c.set("late", "1")
        c.sync()  # the SET is applied before the cancel is sent
        w.req("CANCEL_WAIT")
        self.assertEqual(w.recv_exact(2), bytes([WAIT_STOP_WAITING, WAIT_CANCELED]))
        w.expect_nothing()
        # The connection keeps working after a cancel.
        w.wait_send(["again"])
        c.set("again", "1")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)

    def test_closed_waiter_is_forgotten(self):
        w = self.client(self.d)
        w.wait_send(["k"])
        w.expect_nothing()
        w.close()
        self.d.wait_log(w.peer_tag + r": closed: ")
        self.c.set("k", "1")  # must not crash writing to a closed waiter
        self.assertEqual(self.c.get("k"), b"1")
        fresh_client_works(self, self.d)

    # -- framing --

    def test_split_into_single_bytes(self):
        c = self.client(self.d, validate=False)
        data = (VALIDATE_BYTES + enc("modern", "SET", s("split"), s("value!")) +
                enc("modern", "GET", s("split")) + enc("modern", "ADD", s("n"), i64(9)) +
                enc("modern", "PING", u32(0xCAFEF00D)))
        for i in range(len(data)):
            c.send(data[i:i + 1])
            time.sleep(0.003)
        self.assertEqual(c.r_str(), b"value!")
        self.assertEqual(c.r_i64(), 9)
        self.assertEqual(c.r_u32(), 0xCAFEF00D)
        c.expect_nothing()

    def test_coalesced_requests(self):
        c = self.client(self.d, validate=False)
        n = 300
        data = bytearray(VALIDATE_BYTES)
        for i in range(n):
            data += enc("modern", "SET", s("c/%d" % i), s("v%d" % i))
            data += enc("modern", "ADD", s("ctr"), i64(1))
            data += enc("modern", "GET", s("c/%d" % i))
        data += enc("modern", "GETNUMKEYS") + enc("modern", "PING", u32(7))
        c.send(bytes(data))
        for i in range(n):
            self.assertEqual(c.r_i64(), i + 1)
            self.assertEqual(c.r_str(), b"v%d" % i)
        self.assertEqual(c.r_i64(), n + 1)
        self.assertEqual(c.r_u32(), 7)
        c.expect_nothing()

    def test_large_value(self):
        big = bytes(i % 251 for i in range(3 << 20))
        self.c.set("big", big)
        self.assertEqual(self.c.get("big"), big)
        self.c.append("big", b"tail")
        self.assertEqual(self.c.get("big"), big + b"tail")


class Legacy20(DaemonTestCase):
    """The default: clients without VALIDATE speak PyTorch 1.x/2.0 numbering."""

    def setUp(self):
        self.d = self.daemon()
        self.c = self.client(self.d, dialect="2.0")

    def test_bytes(self):
        c = self.c
        # SET "k" "v" (op 0): no reply
        c.send(bytes.fromhex("00" "0100000000000000" "6B" "0100000000000000" "76"))
        c.expect_nothing()
        # GET (2)
        c.send(bytes.fromhex("02" "0100000000000000" "6B"))
        self.assertEqual(c.recv_exact(9), bytes.fromhex("0100000000000000" "76"))
        # ADD (3)
        c.send(bytes.fromhex("03" "0100000000000000" "6E" "0400000000000000"))
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0400000000000000"))
        # CHECK (4)
        c.send(bytes.fromhex("04" "0100000000000000" "0100000000000000" "6E"))
        self.assertEqual(c.recv_exact(1), b"\x00")
        # WAIT (5) on a present key
        c.send(bytes.fromhex("05" "0100000000000000" "0100000000000000" "6B"))
        self.assertEqual(c.recv_exact(1), b"\x00")
        # GETNUMKEYS (6)
        c.send(b"\x06")
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0200000000000000"))
        # COMPARE_SET (1)
        c.send(bytes.fromhex("01" "0100000000000000" "6B" "0100000000000000" "76"
                             "0100000000000000" "77"))
        self.assertEqual(c.recv_exact(9), bytes.fromhex("0100000000000000" "77"))
        # DELETE_KEY is 8 in this numbering
        c.send(bytes.fromhex("08" "0100000000000000" "6B"))
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0100000000000000"))
        c.send(b"\x06")
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0100000000000000"))
        c.expect_nothing()

    def test_semantics(self):
        c, w = self.c, self.client(self.d, dialect="2.0")
        self.assertEqual(c.add("ctr", 2), 2)
        self.assertEqual(c.add("ctr", 10), 12)
        self.assertEqual(c.get("ctr"), b"12")
        self.assertEqual(c.get("missing"), b"")
        self.assertEqual(c.compare_set("cas", "x", "y"), b"x")
        self.assertEqual(c.compare_set("cas", "", "y"), b"y")
        w.wait_send(["a", "b"])
        w.expect_nothing()
        c.set("a", "1")
        w.expect_nothing()
        c.set("b", "1")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        self.assertEqual(c.num_keys(), 4)

    def test_watch_key_notifications(self):
        """PyTorch <= 2.0's watchKey: WATCH_KEY (7) answers KEY_CALLBACK_REGISTERED (3), then
        every change of the key arrives as u8 type, key, old value, new value."""
        watcher, c = self.client(self.d, dialect="2.0"), self.c

        def note(t, key, old, new):
            return bytes([t]) + s(key) + s(old) + s(new)

        watcher.send(enc("2.0", "WATCH_KEY", s("/w")))
        self.assertEqual(watcher.recv_exact(1), b"\x03")
        c.set("/w", "a")
        self.assertEqual(watcher.recv_exact(len(note(1, b"/w", b"", b"a"))),
                         note(1, b"/w", b"", b"a"))          # KEY_CREATED
        c.set("/w", "bb")
        self.assertEqual(watcher.recv_exact(len(note(0, b"/w", b"a", b"bb"))),
                         note(0, b"/w", b"a", b"bb"))        # KEY_UPDATED
        self.assertEqual(c.delete("/w"), 1)
        self.assertEqual(watcher.recv_exact(len(note(2, b"/w", b"bb", b""))),
                         note(2, b"/w", b"bb", b""))         # KEY_DELETED
        self.assertEqual(c.add("/w", 5), 5)
        self.assertEqual(watcher.recv_exact(len(note(1, b"/w", b"", b"5"))),
                         note(1, b"/w", b"", b"5"))
        c.set("/other", "x")
        watcher.expect_nothing()
        watcher.close()
        c.set("/w", "after the watcher left")  # nothing to send, nothing breaks
        self.assertEqual(c.get("/w"), b"after the watcher left")

    def test_byte_9_is_unknown(self):
        self.c.set("x", "1")
        mark = self.d.mark()
        self.c.send(bytes.fromhex("09" "0100000000000000" "78" "0100000000000000" "79"))
        self.c.assert_closed()
        self.d.wait_log(self.c.peer_tag + r".*(unknown|unexpected).*0x09", since=mark,
                        levels=("warn",))
        fresh_client_works(self, self.d, dialect="2.0")

    def test_modern_and_legacy_side_by_side(self):
        m = self.client(self.d)  # VALIDATE picks modern numbering on this connection only
        m.set("from-modern", "1")
        m.sync()  # SET has no reply: make sure it was applied before the other connection reads
        self.assertEqual(self.c.get("from-modern"), b"1")
        self.c.set("from-legacy", "2")
        self.assertEqual(m.get("from-legacy"), b"2")
        self.assertEqual(m.delete("from-modern"), 1)  # modern DELETE_KEY = 8 too
        self.assertEqual(self.c.delete("from-legacy"), 1)
        m.ping(99)
        # Byte 13 is PING for m but unknown for the legacy connection.
        self.c.send(bytes.fromhex("0D 01 02 03 04"))
        self.c.assert_closed()
        m.ping(100)


class Legacy21(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon("--legacy", "2.1")
        self.c = self.client(self.d, dialect="2.1")

    def test_bytes(self):
        c = self.c
        c.send(bytes.fromhex("00" "0100000000000000" "6B" "0100000000000000" "76"))
        # DELETE_KEY is 7
        c.send(bytes.fromhex("07" "0100000000000000" "6B"))
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0100000000000000"))
        # APPEND is 8 (no reply), MULTI_GET 9
        c.send(bytes.fromhex("08" "0100000000000000" "61" "0100000000000000" "78"))
        c.send(bytes.fromhex("08" "0100000000000000" "61" "0100000000000000" "79"))
        c.send(bytes.fromhex("09" "0200000000000000" "0100000000000000" "61"
                             "0100000000000000" "6B"))
        self.assertEqual(c.recv_exact(18), bytes.fromhex("0200000000000000" "7879"
                                                         "0000000000000000"))
        # MULTI_SET 10 (no reply), then GETNUMKEYS 6
        c.send(bytes.fromhex("0A" "0100000000000000" "0100000000000000" "62"
                             "0100000000000000" "7A"))
        c.send(b"\x06")
        self.assertEqual(c.recv_exact(8), bytes.fromhex("0200000000000000"))
        # CANCEL_WAIT 11 -> 01
        c.send(b"\x0B")
        self.assertEqual(c.recv_exact(1), b"\x01")
        c.expect_nothing()

    def test_wait_cancel_and_append_wake(self):
        c, w = self.c, self.client(self.d, dialect="2.1")
        w.wait_send(["p"])
        w.expect_nothing()
        self.assertEqual(w.cancel_wait(), WAIT_CANCELED)
        c.set("p", "1")
        w.expect_nothing()
        w.wait_send(["q"])
        c.append("q", "x")
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        w.wait_send(["r"])
        c.multi_set([("r", "1")])
        self.assertEqual(w.r_u8(), WAIT_STOP_WAITING)
        self.assertEqual(c.multi_get(["q", "r"]), [b"x", b"1"])

    def test_byte_12_is_unknown(self):
        mark = self.d.mark()
        self.c.send(b"\x0C")
        self.c.assert_closed()
        self.d.wait_log(self.c.peer_tag + r".*(unknown|unexpected).*0x0c", since=mark,
                        levels=("warn",))
        fresh_client_works(self, self.d, dialect="2.1")
        fresh_client_works(self, self.d, dialect="modern")


class LegacyNone(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon("--legacy", "none")

    def test_refuses_client_without_validate(self):
        for first in (enc("2.0", "ADD", s("init/"), i64(1)),
                      enc("2.0", "SET", s("/k"), s("v")),
                      enc("2.0", "GETNUMKEYS")):
            with self.subTest(first=first[:1].hex()):
                c = self.client(self.d, dialect="2.0")
                mark = self.d.mark()
                c.send(first)
                self.assertEqual(c.assert_closed(), b"")
                self.d.wait_log(c.peer_tag + r".*not VALIDATE", since=mark, levels=("warn",))
        with self.client(self.d) as m:
            self.assertEqual(m.num_keys(), 0)  # nothing the refused clients sent was applied
            m.ping(5)

    def test_modern_client_served(self):
        fresh_client_works(self, self.d)


class LegacyOptions(unittest.TestCase):

    def test_bad_legacy_value_rejected(self):
        import subprocess
        from rdzvtest import RDZVD
        for bad in ("2.2", "modern", "", "x"):
            p = subprocess.run([RDZVD, "--port", "0", "--bind", "127.0.0.1", "--legacy", bad],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            self.assertNotEqual(p.returncode, 0, bad)
            self.assertIn(b"--legacy", p.stderr)


if __name__ == "__main__":
    main()
