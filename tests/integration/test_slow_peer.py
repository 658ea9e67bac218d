#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_slow_peer.py: the output cap (--max-outbuf) holds for rdzv peers too. An rdzv peer that
# says HELLO and then asks for STATUS over and over without ever reading the replies must be
# closed once its queued replies pass the cap, with rdzvd's memory bounded all along and every
# other client served (rdzvd went from 2 MB to 870 MB in 15 s). The same cap
# holds for TCPStore output that a client's own requests do not pace (watch notifications), and
# a key watched many times on one connection is watched once.

import errno
import os
import select
import socket
import tempfile
import time

from authtest import Peer, frame
from metricstest import http_get
from rdzvtest import DaemonTestCase, enc, fresh_client_works, main, s

STATUS, STATUS_REPLY = 0xB0, 0xB1


class RdzvPeerOutputCap(DaemonTestCase):

    CAP = 1 << 20          # --max-outbuf
    RSS_SLACK_KB = 64 << 10  # what rdzvd may grow by while the flood lasts
    FLOOD_S = 15.0         # the old code never closed it: give up after this long

    def test_flooding_status_without_reading_is_closed(self):
        # Under ASan the replies freed as they are written (one batch per loop turn) would count
        # as growth.
        d = self.daemon_without_quarantine("--max-outbuf", "1M")
        other = self.client(d)
        other.ping(1)
        rss0 = d.rss_kb()

        hog = Peer(d.port)
        self.addCleanup(hog.close)
        hog.hello()
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        hog.sock.setblocking(False)
        batch = memoryview(frame(STATUS, b"{}") * 8192)  # 8192 requests per batch
        mark = d.mark()
        closed = False
        peak = rss0
        requests = 0
        pings = 0
        deadline = time.monotonic() + self.FLOOD_S
        while time.monotonic() < deadline:
            _, w, _ = select.select([], [hog.sock], [], 0.1)
            if w:
                try:
                    n = hog.sock.send(batch)
                    requests += n // 10
                except BlockingIOError:
                    pass
                except OSError as e:
                    self.assertIn(e.errno, (errno.EPIPE, errno.ECONNRESET))
                    closed = True
                    break
            peak = max(peak, d.rss_kb())
            if d.find_log(hog.peer_tag + r".*closed", since=mark):
                closed = True
                break
            if pings < int(time.monotonic() * 10):  # other clients are served throughout
                other.ping(pings & 0xFFFF)
                pings = int(time.monotonic() * 10)
        peak = max(peak, d.rss_kb())
        self.assertTrue(closed, "rdzvd did not close an rdzv peer that sent %d STATUS requests "
                        "without reading in %.0f s (RSS %d KiB, was %d KiB)"
                        % (requests, self.FLOOD_S, peak, rss0))
        self.assertLess(peak - rss0, self.RSS_SLACK_KB,
                        "rdzvd RSS grew from %d KiB to %d KiB under an rdzv peer that does not "
                        "read (--max-outbuf 1M)" % (rss0, peak))
        d.wait_log(hog.peer_tag + r".*max-outbuf.*closing connection", since=mark,
                   levels=("warn",))
        # Everyone else is still served: the TCPStore client, a fresh one, a fresh rdzv peer.
        other.ping(2)
        fresh_client_works(self, d)
        p = Peer(d.port)
        self.addCleanup(p.close)
        self.assertEqual(p.hello().get("magic"), "rdzv")
        p.send(STATUS, b"{}")
        op, body = p.recv_json()
        self.assertEqual(op, STATUS_REPLY, body)
        self.assertEqual(body.get("daemon"), "rdzvd")

    def test_reading_peer_is_not_closed(self):
        """Many STATUS requests from a peer that reads its replies are all answered."""
        d = self.daemon("--max-outbuf", "1M")
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        n = 200
        p.sock.sendall(frame(STATUS, b"{}") * n)
        for i in range(n):
            f = p.recv()
            self.assertIsNotNone(f, "closed after %d of %d STATUS replies" % (i, n))
            self.assertEqual(f[0], STATUS_REPLY)
        self.assertIsNone(d.find_log(r"max-outbuf"))


class TcpStoreWatcherCap(DaemonTestCase):
    """A PyTorch <= 2.0 client that watches a key and never reads: the notifications are output
    its own requests do not pace (pausing its reads holds nothing back). It is closed once they
    pass twice the cap, and the client that changes the key is served throughout."""

    VALUE = 64 << 10

    def test_watcher_that_does_not_read_is_closed(self):
        # Under ASan the 25 MiB of replaced 64 KiB values would count as growth.
        d = self.daemon_without_quarantine("--max-outbuf", "1M")
        watcher = self.client(d, dialect="2.0")
        watcher.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        watcher.send(enc("2.0", "WATCH_KEY", s("/w")))
        self.assertEqual(watcher.recv_exact(1), b"\x03")
        setter = self.client(d)
        rss0 = d.rss_kb()
        mark = d.mark()
        for i in range(400):  # 400 x 2 x 64 KiB = 50 MiB of notifications
            setter.set("/w", bytes([i & 0xFF]) * self.VALUE)
            if i % 50 == 0:
                setter.ping(i)
        setter.ping(1)
        d.wait_log(watcher.peer_tag + r".*over --max-outbuf.*closing connection", since=mark,
                   levels=("warn",), timeout=10)
        watcher.assert_closed(timeout=10)
        self.assertLess(d.rss_kb() - rss0, 32 << 10)
        setter.ping(2)
        fresh_client_works(self, d)

    def test_a_key_watched_2000_times_costs_one_notification(self):
        # One connection registers WATCH_KEY on one key 2,000 times, then stops reading; one
        # SET of a 256 KiB value once queued 500 MiB for it (a copy a registration). A key is
        # watched once a connection: rdzvd's peak grows by at most twice --max-outbuf and 4 MiB.
        pfile = os.path.join(tempfile.mkdtemp(prefix="rdzv-watch-"), "metrics-port")
        d = self.daemon_without_quarantine("--max-outbuf", "1M", "--metrics-port", "0",
                                           "--metrics-port-file", pfile)
        watcher = self.client(d, dialect="2.0")
        watcher.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        watcher.send(enc("2.0", "WATCH_KEY", s("/w")) * 2000)
        self.assertEqual(watcher.recv_exact(2000), b"\x03" * 2000)
        setter = self.client(d)
        setter.ping(0)
        hwm0 = d.status_kb("VmHWM")
        rss0 = d.rss_kb()
        mark = d.mark()
        setter.set("/w", b"v" * (256 << 10))
        setter.ping(1)
        grown = d.status_kb("VmHWM") - max(hwm0, rss0)
        self.assertLessEqual(grown, (2 << 10) + (4 << 10),
                             "rdzvd's peak grew by %d KiB on one SET of a key watched 2,000 "
                             "times (--max-outbuf 1M)" % grown)
        self.assertIsNone(d.find_log(watcher.peer_tag + r".*clos", since=mark),
                          "one notification closed the watcher")
        # Each further change is one notification (old and new value): past twice the cap the
        # watcher is closed before the next is made, and counted.
        for i in range(16):
            setter.set("/w", bytes([i]) * (256 << 10))
        setter.ping(2)
        d.wait_log(watcher.peer_tag + r".*more due, over --max-outbuf 1048576 twice.*closing",
                   since=mark, levels=("warn",), timeout=10)
        watcher.assert_closed(timeout=10)
        with open(pfile) as f:
            m = http_get(int(f.read()), "/metrics")
        self.assertIn("\nrdzvd_outbuf_closes_total 1\n", m)
        setter.ping(3)
        fresh_client_works(self, d)

if __name__ == "__main__":
    main()
