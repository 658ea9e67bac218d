#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_peer_bad_input.py: an rdzv peer (a connection that starts with HELLO) that breaks the
# rendezvous protocol: a HELLO rdzvd can't accept, a frame header it can't read, STORE on a
# connection that joined a job, a JOIN it refuses. Each is told why (an ERROR frame where the
# protocol has room for one), closed, and logged; other clients are served throughout.

import json
import struct
import time

from authtest import ERROR, HELLO, JOIN, JOINED, STORE, Peer, frame, join_body
from rdzvtest import DaemonTestCase, fresh_client_works, main

GOOD_HELLO = {"magic": "rdzv", "version": 1, "peer": "peer-bad-input"}


class PeerBadInput(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon()

    def peer(self):
        p = Peer(self.d.port)
        self.addCleanup(p.close)
        return p

    def hello(self):
        p = self.peer()
        p.send(HELLO, GOOD_HELLO)
        op, _ = p.recv_json()
        self.assertEqual(op, HELLO)
        return p

    def expect_error_then_close(self, p, needle):
        f = p.recv_json()
        self.assertIsNotNone(f, "closed without an ERROR frame")
        op, body = f
        self.assertEqual(op, ERROR, body)
        self.assertIn(needle, body["error"])
        self.assertTrue(p.closed_within(), "not closed after the ERROR")

    def test_bad_hello_is_refused_with_the_reason(self):
        m = self.d.mark()
        p = self.peer()
        p.send(HELLO, {"magic": "nope", "version": 1, "peer": "x"})
        f = p.recv_json()
        self.assertEqual(f[0], ERROR, f)
        self.assertTrue(f[1]["error"], f)
        self.assertTrue(p.closed_within())
        self.d.wait_log(p.peer_tag + r": rendezvous: .*closing connection", since=m,
                        levels=("warn",))
        fresh_client_works(self, self.d)

    def test_unreadable_frame_headers_close_the_connection(self):
        for name, hdr, why in (
                ("version", struct.pack("<BBHI", JOIN, 9, 0, 2), "unsupported protocol version"),
                ("reserved", struct.pack("<BBHI", JOIN, 1, 1, 2), "reserved header bits set"),
                ("op", struct.pack("<BBHI", 0x7E, 1, 0, 2), "unknown message type")):
            with self.subTest(name=name):
                m = self.d.mark()
                p = self.hello()
                p.sock.sendall(hdr + b"{}")
                self.assertTrue(p.closed_within(), "still open after a bad %s" % name)
                self.d.wait_log(p.peer_tag + r".*rendezvous: " + why, since=m)
        fresh_client_works(self, self.d)

    def test_oversized_frame_is_refused_from_its_header(self):
        m = self.d.mark()
        p = self.hello()
        p.sock.sendall(struct.pack("<BBHI", JOIN, 1, 0, 0x7FFFFFF0))  # no body follows
        self.assertTrue(p.closed_within(), "rdzvd waited for a 2 GiB body")
        self.d.wait_log(p.peer_tag + r".*JOIN message too large \(2147483632 bytes, limit \d+\)",
                        since=m)

    def test_frame_in_pieces_is_served(self):
        p = self.peer()
        data = frame(HELLO, GOOD_HELLO)
        for i in range(0, len(data), 3):  # the header split too
            p.sock.sendall(data[i:i + 3])
            time.sleep(0.01)
        op, _ = p.recv_json()
        self.assertEqual(op, HELLO)

    def test_store_after_join_is_refused(self):
        m = self.d.mark()
        p = self.hello()
        p.send(JOIN, join_body("peer-store-after-join", "n1", 2, mn=2, host="h",
                                 last_call_ms=100, max_restarts=0,
                                 heartbeat_timeout_ms=600000))
        op, body = p.recv_json()
        self.assertEqual(op, JOINED, body)
        p.send(STORE, {})
        self.expect_error_then_close(p, "STORE on a connection that has joined a job")
        self.d.wait_log(p.peer_tag + r": rendezvous: STORE after JOIN, closing connection",
                        since=m, levels=("warn",))
        fresh_client_works(self, self.d)

    def test_store_then_tcpstore_works(self):
        # Without a token, from loopback, STORE turns the connection into a TCPStore client.
        p = self.hello()
        p.send(STORE, {})
        p.sock.sendall(struct.pack("<B", 13) + struct.pack("<I", 0x5A5A1234))  # PING
        got = p._exact(4, 5.0)
        self.assertEqual(struct.unpack("<I", got)[0], 0x5A5A1234)

    def test_bad_join_gets_an_error_and_is_closed(self):
        m = self.d.mark()
        p = self.hello()
        p.send(JOIN, b"{not json")
        f = p.recv()
        self.assertIsNotNone(f, "closed without an ERROR frame")
        self.assertEqual(f[0], ERROR, f)
        self.assertTrue(json.loads(f[1])["error"])
        self.assertTrue(p.closed_within())
        fresh_client_works(self, self.d)
        self.assertIsNotNone(self.d.find_log(p.peer_tag, since=m), self.d.log())


if __name__ == "__main__":
    main()
