#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_malformed.py: hostile or broken peers. Each bad input must close that one connection,
# with a log line saying why, while rdzvd keeps serving everyone else: a client connected
# before the bad one, and a fresh client afterwards.

import select
import socket
import threading
import time
import unittest

from rdzvtest import (VALIDATE_BYTES, Client, Daemon, DaemonTestCase, enc, fresh_client_works,
                      i64, keys, main, s, u32, u64)

MAX_VALUE = 1024
MAX_KEYS = 16


class BadInput(unittest.TestCase):
    """One daemon with small limits for all the single-connection cases."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon("--max-value-len", str(MAX_VALUE), "--max-keys", str(MAX_KEYS),
                       "--max-key-len", "256")
        try:
            cls.survivor = cls.d.connect()
            cls.survivor.set("survivor", "here")
            cls.legacy_survivor = cls.d.connect("2.0")
            cls.legacy_survivor.set("legacy-survivor", "here")
        except BaseException:
            cls.d.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.survivor.close()
        cls.legacy_survivor.close()
        cls.d.stop()

    def bad(self, data, reason, dialect="modern", level="warn", validate=None, expect=b""):
        """Send data on a new connection; assert rdzvd closes it (sending only `expect` first),
        logs `reason` for it at `level`, and keeps serving the others."""
        c = Client(self.d.port, dialect=dialect, validate=validate)
        try:
            mark = self.d.mark()
            c.send(data)
            got = c.assert_closed()
            self.assertEqual(got, expect)
            self.d.wait_log(c.peer_tag + ".*" + reason, since=mark, levels=(level,))
        finally:
            c.close()
        self.assert_still_serving()

    def assert_still_serving(self):
        self.survivor.ping(11)
        self.assertEqual(self.survivor.get("survivor"), b"here")
        self.assertEqual(self.legacy_survivor.get("legacy-survivor"), b"here")
        fresh_client_works(self, self.d)
        fresh_client_works(self, self.d, dialect="2.0")

    def test_absurd_key_length(self):
        # SET whose key claims 2^63 bytes: refused as soon as the length arrives.
        self.bad(enc("modern", "SET", u64(1 << 63)), r"key too long: 9223372036854775808 > "
                 r"limit 256, closing connection")
        # Same on a legacy connection, for GET (2.0 numbering: 2), and all-ones.
        self.bad(b"\x02" + u64(2**64 - 1), r"key too long: 18446744073709551615 > limit 256",
                 dialect="2.0")
        # One byte over the key limit, in a complete frame.
        self.bad(enc("modern", "GET", s(b"k" * 257)), r"key too long: 257 > limit 256")

    def test_value_over_limit(self):
        # The length alone is enough to refuse: the value itself is never sent.
        self.bad(enc("modern", "SET", s("k"), u64(MAX_VALUE + 1)),
                 r"value too long: %d > limit %d" % (MAX_VALUE + 1, MAX_VALUE))
        self.bad(enc("modern", "SET", s("k"), s(b"v" * (MAX_VALUE + 1))), r"value too long")
        self.bad(enc("modern", "COMPARE_SET", s("k"), s(""), u64(1 << 40)), r"value too long")
        # At the limit is fine.
        with self.d.connect() as c:
            c.set("maxed", b"v" * MAX_VALUE)
            self.assertEqual(len(c.get("maxed")), MAX_VALUE)
        # APPEND that would grow a value past the limit.
        self.bad(enc("modern", "APPEND", s("maxed"), s("x")),
                 r"APPEND would make a value larger than %d bytes" % MAX_VALUE)
        with self.d.connect() as c:
            self.assertEqual(c.get("maxed"), b"v" * MAX_VALUE)  # unchanged

    def test_key_count_over_limit(self):
        n = MAX_KEYS + 1
        self.bad(enc("modern", "WAIT", u64(n)),
                 r"too many keys in one request: %d > limit %d" % (n, MAX_KEYS))
        self.bad(enc("modern", "CHECK", keys(["k%d" % i for i in range(n)])),
                 r"too many keys in one request")
        self.bad(enc("modern", "MULTI_GET", u64(1 << 62)), r"too many keys in one request")
        self.bad(enc("modern", "MULTI_SET", u64(n)), r"too many keys in one request")
        self.bad(enc("2.0", "WAIT", u64(2**64 - 1)), r"too many keys in one request",
                 dialect="2.0")
        with self.d.connect() as c:  # exactly at the limit is fine
            ks = ["ok%d" % i for i in range(MAX_KEYS)]
            c.multi_set([(k, "1") for k in ks])
            self.assertEqual(c.wait(ks), 0)

    def test_unknown_op(self):
        self.bad(b"\x12", r"unknown operation \(0x12\)")
        self.bad(b"\xff", r"unknown operation \(0xff\)")
        self.bad(b"\x09", r"unknown operation \(0x09\) in PyTorch 2.0", dialect="2.0")
        self.bad(b"\x80" + u64(1), r"unknown operation \(0x80\) in PyTorch 2.0", dialect="2.0")

    def test_replies_before_bad_input_are_flushed(self):
        # Good requests and a bad byte in one segment: the good ones' replies still arrive,
        # then the close (a connection closes once its output is flushed).
        data = (enc("modern", "PING", u32(0x01020304)) + enc("modern", "GET", s("survivor")) +
                b"\x42")
        self.bad(data, r"unknown operation \(0x42\)",
                 expect=u32(0x01020304) + s("here"))
        self.bad(enc("modern", "PING", u32(5)) + VALIDATE_BYTES,
                 r"VALIDATE after the start", expect=u32(5))

    def test_truncated_frame_then_close(self):
        for data in (enc("modern", "SET", s("trunc"), u64(10)) + b"abc",
                     enc("modern", "SET", u64(5))[:6],
                     VALIDATE_BYTES[:3]):
            with self.subTest(data=data.hex()):
                c = Client(self.d.port, validate=data[:1] != b"\x00")
                mark = self.d.mark()
                c.send(data)
                c.expect_nothing(0.1)
                c.sock.shutdown(socket.SHUT_WR)
                self.assertEqual(c.assert_closed(), b"")
                c.close()
                self.d.wait_log(c.peer_tag + r".*closed.*(mid-request|peer closed)", since=mark,
                                levels=("info", "warn"))
                self.assert_still_serving()
        with self.d.connect() as c:
            self.assertEqual(c.check(["trunc"]), 1)  # the half SET was not applied

    def test_garbage_after_validate(self):
        self.bad(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", r"unknown operation \(0x47\)")
        self.bad(bytes(range(0xF0, 0x100)) * 4, r"unknown operation \(0xf0\)")

    def test_http_probe_without_validate(self):
        # A port scanner's first bytes, read as the 2.0 numbering: 'G' is no operation.
        self.bad(b"GET / HTTP/1.0\r\n\r\n", r"unknown operation \(0x47\) in PyTorch 2.0",
                 dialect="2.0")

    def test_validate_twice(self):
        self.bad(VALIDATE_BYTES, r"VALIDATE after the start of the connection")
        # Also after a served request (its reply read first).
        c = Client(self.d.port)
        try:
            c.ping(5)
            mark = self.d.mark()
            c.send(VALIDATE_BYTES)
            self.assertEqual(c.assert_closed(), b"")
            self.d.wait_log(c.peer_tag + r".*VALIDATE after the start", since=mark,
                            levels=("warn",))
        finally:
            c.close()
        self.assert_still_serving()

    def test_wrong_magic(self):
        # 00 + 4 bytes that are not the magic: a 2.0 SET whose key length is absurd.
        self.bad(b"\x00\xde\xad\xbe\xef\x00\x00\x00\x00", r"key too long: 4022250974 > limit",
                 validate=False)

    def test_add_on_text_value(self):
        with self.d.connect() as c:
            c.set("text", "twelve")
            c.set("huge", str(2**63 - 1))
            c.sync()
        self.bad(enc("modern", "ADD", s("text"), i64(1)), r"not a decimal integer")
        self.bad(enc("modern", "ADD", s("huge"), i64(1)), r"overflows")
        with self.d.connect() as c:
            self.assertEqual(c.get("text"), b"twelve")
            self.assertEqual(c.get("huge"), str(2**63 - 1).encode())


class LegacyNoneBadInput(DaemonTestCase):

    def test_wrong_magic_refused(self):
        d = self.daemon("--legacy", "none")
        keep = self.client(d)
        c = self.client(d, validate=False)
        mark = d.mark()
        c.send(b"\x00\xde\xad\xbe\xef")
        self.assertEqual(c.assert_closed(), b"")
        d.wait_log(c.peer_tag + r".*not VALIDATE", since=mark, levels=("warn",))
        keep.ping(3)
        fresh_client_works(self, d)


class SlowReader(DaemonTestCase):
    """A client that asks for a lot and never reads: rdzvd must stop reading it instead of
    buffering its replies, and keep serving others promptly."""

    VALUE = 1 << 20

    def test_memory_stays_bounded(self):
        d = self.daemon("--max-outbuf", "4M")
        other = self.client(d)
        other.set("big", bytes(self.VALUE))
        other.sync()
        rss0 = d.rss_kb()

        hog = self.client(d)
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        req = enc("modern", "GET", s("big"))
        n_req = 20000  # 20 GiB of replies if rdzvd buffered them all
        hog.sock.setblocking(False)
        payload = memoryview(req * n_req)
        sent = 0
        deadline = time.monotonic() + 5
        while sent < len(payload) and time.monotonic() < deadline:
            _, w, _ = select.select([], [hog.sock], [], 0.2)
            if w:
                try:
                    sent += hog.sock.send(payload[sent:sent + 65536])
                except BlockingIOError:
                    pass
        # Whatever was accepted, rdzvd now has far more replies to produce than it may queue.
        self.assertGreater(sent // len(req), 100)

        peak = 0
        worst = 0.0
        end = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            other.ping(i)
            self.assertEqual(other.add("ctr", 1), i + 1)
            worst = max(worst, time.monotonic() - t0)
            peak = max(peak, d.rss_kb())
            i += 1
            time.sleep(0.02)
        self.assertLess(peak, 200 * 1024,
                        "rdzvd RSS %d KiB (baseline %d KiB) while a client doesn't read"
                        % (peak, rss0))
        self.assertLess(worst, 1.0, "another client waited %.2fs for a reply" % worst)
        self.assertGreater(i, 20)
        # A fresh client too.
        fresh_client_works(self, d)
        # The hog's connection is still usable state-wise: closing it frees everything.
        hog.close()
        time.sleep(0.2)
        other.ping(77)
        self.assertLess(d.rss_kb(), 200 * 1024)

    def test_paused_reader_gets_every_reply_when_it_reads(self):
        d = self.daemon("--max-outbuf", "1M", log_level="debug")
        c = self.client(d)
        val = bytes(i % 253 for i in range(256 << 10))
        c.set("v", val)
        n = 64  # 16 MiB of replies, 16x the output cap
        c.send(enc("modern", "GET", s("v")) * n + enc("modern", "PING", u32(0xBEEF)))
        d.wait_log(c.peer_tag + r": \d+ reply bytes queued, pausing reads", levels=("debug",))
        other = self.client(d)
        other.ping(1)
        for i in range(n):
            try:
                got = c.r_str(timeout=10)
            except AssertionError as e:
                raise AssertionError("reply %d of %d (output cap 1 MiB, %d KiB each): %s"
                                     % (i, n, len(val) >> 10, e)) from None
            self.assertEqual(len(got), len(val), "reply %d" % i)
            self.assertEqual(got, val, "reply %d" % i)
        self.assertEqual(c.r_u32(), 0xBEEF)
        c.expect_nothing()
        c.ping(2)


class MaxConns(DaemonTestCase):

    def test_extra_connection_closed(self):
        d = self.daemon("--max-conns", "3")
        cs = [self.client(d) for _ in range(3)]
        for i, c in enumerate(cs):
            c.ping(i)  # accepted and served
        mark = d.mark()
        extra = self.client(d)
        try:
            extra.send(VALIDATE_BYTES + enc("modern", "PING", u32(9)))
        except OSError:
            pass  # already closed: fine
        self.assertEqual(extra.assert_closed(), b"")
        d.wait_log(extra.peer_tag + r".*refused: 3 connections open \(limit 3", since=mark,
                   levels=("warn",))
        for i, c in enumerate(cs):
            c.ping(100 + i)
        # Closing one frees its slot.
        cs[0].close()
        deadline = time.monotonic() + 3
        while True:
            c = Client(d.port)
            try:
                c.ping(42)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                c.close()
        cs[1].ping(5)


class PendingHalfFrame(DaemonTestCase):

    def test_half_frame_does_not_block_others(self):
        d = self.daemon()
        stuck = self.client(d)
        frame = enc("modern", "SET", s("slow"), s("finally"))
        stuck.send(frame[:12])  # op + key length + 3 of 4 key bytes
        stuck_legacy = self.client(d, dialect="2.0")
        lframe = enc("2.0", "SET", s("slow2"), s("x"))
        stuck_legacy.send(lframe[:1])  # one byte: not even the handshake is decidable
        worker = self.client(d)
        for i in range(200):
            t0 = time.monotonic()
            worker.set("w%d" % i, "v")
            self.assertEqual(worker.get("w%d" % i), b"v")
            self.assertLess(time.monotonic() - t0, 1.0)
        fresh_client_works(self, d)
        self.assertEqual(worker.check(["slow"]), 1)
        stuck.expect_nothing(0.05)
        stuck_legacy.expect_nothing(0.05)
        # The rest arrives much later: both requests complete normally.
        stuck.send(frame[12:])
        stuck.ping(1)
        stuck_legacy.send(lframe[1:])
        self.assertEqual(stuck_legacy.get("slow2"), b"x")
        self.assertEqual(worker.get("slow"), b"finally")

    def test_many_idle_partial_connections(self):
        d = self.daemon()
        partial = []
        for i in range(50):
            c = self.client(d, validate=False)
            c.send(VALIDATE_BYTES + enc("modern", "SET", u64(100))[:1 + (i % 9)])
            partial.append(c)
        errs = []

        def work():
            try:
                with d.connect() as c:
                    for j in range(100):
                        c.add("n", 1)
            except BaseException as e:  # reported below
                errs.append(e)

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertFalse(any(t.is_alive() for t in ts))
        self.assertEqual(errs, [])
        with d.connect() as c:
            self.assertEqual(c.get("n"), b"400")
        for c in partial:
            self.assertTrue(c.is_open())


if __name__ == "__main__":
    main()
