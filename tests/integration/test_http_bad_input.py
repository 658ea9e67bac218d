#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_http_bad_input.py: rdzvd's HTTP status server (--metrics-port) under bad input. Whoever
# can reach the port may send anything: a request that is not one gets 400, a method other than
# GET/HEAD 405, an unknown path 404, one that never ends 413 at RDZVD_HTTP_MAX_REQ bytes, a
# client that says nothing (or dribbles) is closed after RDZVD_HTTP_TIMEOUT_MS, and past
# RDZVD_HTTP_MAX_CONNS at once a new connection takes the slot of one silent for
# RDZVD_HTTP_EVICT_AFTER_MS, or is closed at accept. Through all of it the daemon keeps serving
# HTTP and its store clients, and stops cleanly on SIGTERM.

import re
import socket
import struct
import time

from metricstest import daemon_with_metrics, http_get
from rdzvtest import (HOST, T_STOP, DaemonTestCase, fresh_client_works, main,
                      read_until_closed, skip_without_ipv6)

MAX_REQ = 8192     # RDZVD_HTTP_MAX_REQ
MAX_CONNS = 64     # RDZVD_HTTP_MAX_CONNS
TIMEOUT_S = 5.0    # RDZVD_HTTP_TIMEOUT_MS
EVICT_AFTER_S = 2.0  # RDZVD_HTTP_EVICT_AFTER_MS
T_LONG = 60.0      # generous bound for anything that takes TIMEOUT_S on a loaded machine


def recv_all(sock, timeout=T_LONG):
    """Everything until the server closes (EOF or reset) within timeout."""
    return read_until_closed(sock, timeout)


def parse(reply):
    """(status code, headers dict (lower-case names), body) of one HTTP response."""
    head, sep, body = reply.partition(b"\r\n\r\n")
    if not sep:
        raise AssertionError("no end of headers in %r" % reply[:300])
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"^HTTP/1\.1 (\d{3}) \S", lines[0])
    if not m:
        raise AssertionError("bad status line %r" % lines[0])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(m.group(1)), hdrs, body


class HttpBadInput(DaemonTestCase):

    def setUp(self):
        self.d, self.mport = daemon_with_metrics(self)

    def conn(self):
        c = socket.create_connection((HOST, self.mport), timeout=T_LONG)
        self.addCleanup(c.close)
        return c

    def exchange(self, data, shut_wr=False):
        """Send data on a new connection; (code, headers, body) of the one reply."""
        c = self.conn()
        c.sendall(data)
        if shut_wr:
            c.shutdown(socket.SHUT_WR)
        code, hdrs, body = parse(recv_all(c))
        self.assertEqual(int(hdrs["content-length"]), len(body), hdrs)
        self.assertEqual(hdrs.get("connection"), "close")
        return code, hdrs, body

    def assert_still_serving(self):
        self.assertIn("rdzvd_uptime_seconds", http_get(self.mport, "/metrics", timeout=T_LONG))
        fresh_client_works(self, self.d)

    # ---- requests that are not GET of a known page ----

    def test_not_a_request_line_is_400(self):
        for data in (b"\r\n\r\n", b"\n\n", b"GET\r\n\r\n", b" \r\n\r\n", b"\x16\x03\x01\n\n"):
            with self.subTest(data=data):
                code, hdrs, body = self.exchange(data)
                self.assertEqual(code, 400)
                self.assertEqual(body, b"bad request\n")
        self.assert_still_serving()

    def test_refused_requests_are_logged_rate_limited(self):
        # Each refused request is one warning naming the peer; a burst (anyone who reaches the
        # port can send one) gives at most 10 lines per 10 s window, not one per request.
        mark = self.d.mark()
        t0 = time.monotonic()
        for data, what in ((b"\r\n\r\n", r"not an HTTP request line \(400\)"),
                           (b"POST / HTTP/1.1\r\n\r\n",
                            r"a method other than GET or HEAD \(405\)")):
            c = self.conn()
            port = c.getsockname()[1]
            c.sendall(data)
            recv_all(c)
            self.d.wait_log(r"status page: 127\.0\.0\.1 port %d: %s; closed$" % (port, what),
                            since=mark, levels=["warn"])
        for _ in range(30):
            self.assertEqual(self.exchange(b"\n\n")[0], 400)
        burst = time.monotonic() - t0
        lines = [ln for ln in self.d.log_lines(mark) if "status page:" in ln]
        if burst < 9.0:  # all in the limiter's first window
            self.assertEqual(len(lines), 10, lines)
        else:
            self.assertLess(len(lines), 32, lines)
        self.assert_still_serving()

    def test_other_methods_are_405(self):
        for m in (b"POST", b"PUT", b"DELETE", b"get", b"GETX", b"GETGETGETGET"):
            with self.subTest(method=m):
                code, _, body = self.exchange(m + b" /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(code, 405)
                self.assertEqual(body, b"only GET\n")
        self.assert_still_serving()

    def test_unknown_paths_are_404_with_a_hint(self):
        long_path = b"/metrics" + b"a" * 600  # longer than the daemon's path buffer
        for path in (b"/nothing", b"/metrics/", b"/metrics?x=1", b"//", b"/status.json.bak",
                     long_path, b"/" + b"%00" * 200):
            with self.subTest(path=path[:40]):
                code, _, body = self.exchange(b"GET " + path + b" HTTP/1.0\r\n\r\n")
                self.assertEqual(code, 404)
                self.assertIn(b"try /, /metrics or /status.json", body)
        self.assert_still_serving()

    def test_each_page_answers_with_its_type(self):
        for path, ctype, needle in ((b"/", "text/html", b"<h1>rdzvd "),
                                    (b"/index.html", "text/html", b"</html>"),
                                    (b"/metrics", "text/plain; version=0.0.4",
                                     b"# TYPE rdzvd_jobs gauge"),
                                    (b"/status.json", "application/json", b"{")):
            with self.subTest(path=path):
                code, hdrs, body = self.exchange(b"GET " + path + b" HTTP/1.0\r\n\r\n")
                self.assertEqual(code, 200)
                self.assertTrue(hdrs["content-type"].startswith(ctype), hdrs)
                self.assertEqual(hdrs["cache-control"], "no-store")
                self.assertIn(needle, body)
        # LF-only line ends, and no HTTP version at all, are still understood.
        code, _, body = self.exchange(b"GET /metrics\n\n")
        self.assertEqual(code, 200)
        self.assertIn(b"rdzvd_uptime_seconds", body)

    def test_head_has_no_body(self):
        # RFC 9110 9.3.2: the same header fields as GET, no content.
        c = self.conn()
        c.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = recv_all(c)
        code, hdrs, body = parse(reply)
        self.assertEqual(code, 200)
        self.assertGreater(int(hdrs["content-length"]), 100)  # what GET would send
        self.assertEqual(body, b"", "HEAD got a body: %r" % body[:100])
        c = self.conn()
        c.sendall(b"HEAD /nothing HTTP/1.1\r\n\r\n")
        code, hdrs, body = parse(recv_all(c))
        self.assertEqual((code, body), (404, b""))
        self.assertGreater(int(hdrs["content-length"]), 0)
        self.assert_still_serving()

    def test_request_in_pieces_and_with_a_body_gets_one_reply(self):
        c = self.conn()
        for piece in (b"GE", b"T /stat", b"us.json HTTP/1.1\r\n", b"Host: x\r\n", b"\r", b"\n"):
            c.sendall(piece)
            time.sleep(0.05)
        # What follows the end of the headers (a body, a second request) is not answered.
        c.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        code, hdrs, body = parse(recv_all(c))
        self.assertEqual(code, 200)
        self.assertEqual(hdrs["content-type"], "application/json")
        self.assertEqual(int(hdrs["content-length"]), len(body))
        self.assertNotIn(b"HTTP/1.1", body)

    # ---- requests that never end ----

    def test_endless_request_is_413_at_the_limit(self):
        c = self.conn()
        c.sendall(b"GET /" + b"a" * (MAX_REQ - 6))  # one short of the buffer: still waiting
        time.sleep(0.2)
        c.sendall(b"a" * 5000)  # past it: refused, whatever else comes
        code, _, body = parse(recv_all(c))
        self.assertEqual(code, 413)
        self.assertEqual(body, b"request too large\n")
        self.assert_still_serving()

    def test_nul_bytes_do_not_hide_the_limit(self):
        code, _, _ = self.exchange(b"GET / HTTP/1.0\x00" + b"\x00" * MAX_REQ + b"\r\n\r\n")
        self.assertEqual(code, 413)

    def test_silent_and_dribbling_clients_are_closed_without_a_reply(self):
        silent = self.conn()
        dribble = self.conn()
        half = self.conn()
        half.sendall(b"GET /metrics HTTP/1.1\r\n")
        t0 = time.monotonic()
        # While they wait, others are served.
        self.assert_still_serving()
        got_dribble = b""
        closed = False
        dribble.settimeout(0.2)
        while time.monotonic() - t0 < T_LONG:
            try:
                dribble.sendall(b"X")
                chunk = dribble.recv(4096)
                if not chunk:
                    closed = True
                    break
                got_dribble += chunk
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
        # The deadline is for the whole request, not for each byte.
        self.assertTrue(closed, "a client sending a byte every 0.2 s was never closed")
        self.assertEqual(got_dribble, b"")
        self.assertGreater(time.monotonic() - t0, TIMEOUT_S / 2)
        self.assertEqual(recv_all(silent), b"")
        self.assertEqual(recv_all(half), b"")
        self.assert_still_serving()

    def test_client_that_goes_away_early(self):
        # Closes before the end of its request; closes (reset) right after sending it.
        c = self.conn()
        c.sendall(b"GET /metr")
        c.close()
        c = socket.create_connection((HOST, self.mport), timeout=T_LONG)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        c.close()  # RST: the reply has nowhere to go
        c = socket.create_connection((HOST, self.mport), timeout=T_LONG)
        c.shutdown(socket.SHUT_WR)  # EOF with nothing sent
        self.assertEqual(recv_all(c), b"")
        c.close()
        self.assert_still_serving()

    # ---- too many connections ----

    def test_connections_past_the_limit_are_closed_at_accept(self):
        idle = []
        for _ in range(MAX_CONNS):
            c = socket.create_connection((HOST, self.mport), timeout=T_LONG)
            idle.append(c)
        self.addCleanup(lambda: [c.close() for c in idle])
        # Accepted in order: the first 64 hold every slot, so the next one is closed unread.
        c = socket.create_connection((HOST, self.mport), timeout=T_LONG)
        c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        self.assertEqual(recv_all(c), b"", "connection %d was served" % (MAX_CONNS + 1))
        c.close()
        # Those already in are not hurt.
        idle[0].sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        code, _, _ = parse(recv_all(idle[0]))
        self.assertEqual(code, 200)
        for c in idle:
            c.close()
        # Slots come back once they close.
        deadline = time.monotonic() + T_LONG
        while True:
            try:
                self.assertIn("rdzvd_uptime_seconds", http_get(self.mport, "/metrics"))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        fresh_client_works(self, self.d)

    def test_a_scrape_takes_the_slot_of_a_silent_client(self):
        # 64 connections that say nothing hold every slot; once they have been silent for
        # EVICT_AFTER_S (and long before their TIMEOUT_S), a scrape takes the oldest one's slot.
        t0 = time.monotonic()
        idle = [self.conn() for _ in range(MAX_CONNS)]
        time.sleep(EVICT_AFTER_S + 0.5)  # the behaviour: silent past EVICT_AFTER_S
        self.assertIn("rdzvd_uptime_seconds", http_get(self.mport, "/metrics", timeout=2))
        self.assertLess(time.monotonic() - t0, TIMEOUT_S)
        self.assertEqual(recv_all(idle[0], timeout=2), b"")  # the oldest gave its slot
        idle[-1].sendall(b"GET /metrics HTTP/1.0\r\n\r\n")  # the newest still holds its own
        self.assertEqual(parse(recv_all(idle[-1]))[0], 200)

    def test_sigterm_with_open_http_connections(self):
        conns = [self.conn() for _ in range(5)]
        conns[0].sendall(b"GET /metr")
        fresh_client_works(self, self.d)  # the daemon is up; the connections were accepted
        time.sleep(0.2)
        log = self.d.stop(timeout=T_STOP * 4)
        self.assertIn("received Terminated", log)
        for c in conns:
            self.assertEqual(recv_all(c, timeout=T_STOP), b"")


class HttpIPv6(DaemonTestCase):

    def test_metrics_on_ipv6_loopback(self):
        skip_without_ipv6(self)
        d, mport = daemon_with_metrics(self, "--metrics-bind", "::1")
        d.wait_log(r"metrics and status page on http://::1:%d/" % mport)
        with socket.create_connection(("::1", mport), timeout=T_LONG) as c:
            c.sendall(b"GET /status.json HTTP/1.0\r\n\r\n")
            code, hdrs, _ = parse(recv_all(c))
        self.assertEqual(code, 200)
        self.assertEqual(hdrs["content-type"], "application/json")


if __name__ == "__main__":
    main()
