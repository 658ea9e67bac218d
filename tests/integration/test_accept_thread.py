#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_accept_thread.py: rdzvd --accept-thread (daemon/net/rdzvd-acceptor.c): accept(2) on a
# thread of its own. A crowd from many addresses is served on the main listener and on a job
# generation's store; out of file descriptors, the thread closes pending connections at once,
# rdzvd says so and goes on serving; the thread is there only when asked for (and by default
# with 4 or more CPUs); shutdown with connections queued ends cleanly. The suite also runs
# several other tests with every rdzvd started with "--accept-thread on" (RDZVTEST_RDZVD_ARGS).

import os
import resource
import socket
import struct
import threading
import time

from rdzvtest import (VALIDATE_BYTES, DaemonTestCase, enc, fresh_client_works, i64, main, s,
                      wait_until)


def threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def crowd(port, n, hosts, key):
    """n raw modern clients, from 127.0.0.2 .. 127.0.0.(hosts + 1), each opens with VALIDATE and
    ADDs 1 to key; returns the replies (ints) and closes them all."""
    socks, out = [], []
    try:
        for i in range(n):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.settimeout(30)
            c.bind(("127.0.0.%d" % (2 + i % hosts), 0))
            c.connect(("127.0.0.1", port))
            c.sendall(VALIDATE_BYTES + enc("modern", "ADD", s(key), i64(1)))
            socks.append(c)
        for c in socks:
            buf = b""
            while len(buf) < 8:
                got = c.recv(8 - len(buf))
                if not got:
                    raise AssertionError("closed before the ADD's reply")
                buf += got
            out.append(struct.unpack("<q", buf)[0])
    finally:
        for c in socks:
            c.close()
    return out


class AcceptThread(DaemonTestCase):
    def test_thread_only_when_asked(self):
        on = self.daemon("--accept-thread", "on")
        off = self.daemon("--accept-thread", "off")
        self.assertEqual(threads(on.pid), 2)
        self.assertEqual(threads(off.pid), 1)
        fresh_client_works(self, on)
        fresh_client_works(self, off)
        auto = self.daemon("--accept-thread", "auto")
        self.assertEqual(threads(auto.pid), 2 if os.cpu_count() >= 4 else 1)

    def test_crowd_from_many_addresses_is_served(self):
        d = self.daemon("--accept-thread", "on")
        results = []

        def one(k):
            results.extend(crowd(d.port, 150, 5, "crowd/n"))

        ts = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        # 600 ADDs, each answered with the count it made: 1 .. 600 once each.
        self.assertEqual(sorted(results), list(range(1, 601)))
        with d.connect() as c:
            self.assertEqual(c.get("crowd/n"), b"600")
        self.assertIsNone(d.find_log(r"accept", levels=("warn", "error")))

    def test_out_of_descriptors_closes_at_once_and_goes_on(self):
        d = self.daemon("--accept-thread", "on", "--max-conns", "10000")
        base = len(os.listdir("/proc/%d/fd" % d.pid))
        limit = base + 40
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (limit, limit))
        mark = d.mark()
        socks, closed = [], 0
        try:
            for i in range(120):
                c = socket.create_connection(("127.0.0.1", d.port), timeout=10)
                c.sendall(VALIDATE_BYTES)
                socks.append(c)
            d.wait_log(r"accept: \d+ connections closed at once: out of file descriptors",
                       since=mark, levels=("warn",))
            for c in socks:  # those dropped see EOF; the others stay open and silent
                c.settimeout(0.05)
                try:
                    if c.recv(1) == b"":
                        closed += 1
                except ConnectionResetError:  # closed with VALIDATE unread: a reset
                    closed += 1
                except socket.timeout:
                    pass
        finally:
            for c in socks:
                c.close()
        self.assertGreater(closed, 0)
        # With its descriptors back, it serves again, through the thread.
        wait_until(lambda: len(os.listdir("/proc/%d/fd" % d.pid)) < limit - 5,
                   "rdzvd closing the connections", timeout=10)
        fresh_client_works(self, d)

    def test_stop_ends_just_connected_clients_in_order(self):
        # A client that connected just before rdzvd stopped gets an orderly end (EOF), as from a
        # loop that accepts on its own thread, not a reset: PyTorch 1.13's callback thread
        # aborts the whole process on a reset (std::system_error, "Connection reset by peer").
        resets = 0
        for _ in range(20):
            d = self.daemon("--accept-thread", "on")
            socks = [socket.create_connection(("127.0.0.1", d.port), timeout=5)
                     for _ in range(2)]
            d.stop()
            for c in socks:
                try:
                    self.assertEqual(c.recv(1), b"")
                except ConnectionResetError:
                    resets += 1
                c.close()
        self.assertEqual(resets, 0)

    def test_stop_with_connections_waiting(self):
        # Connections keep arriving while rdzvd stops: the thread is joined, what it queued is
        # closed, and rdzvd exits 0 with nothing left behind.
        d = self.daemon("--accept-thread", "on")
        stop = threading.Event()

        def hammer():
            while not stop.is_set():
                try:
                    socket.create_connection(("127.0.0.1", d.port), timeout=1).close()
                except OSError:
                    return

        t = threading.Thread(target=hammer)
        t.start()
        time.sleep(0.3)
        try:
            d.stop()
        finally:
            stop.set()
            t.join()
        self.assertEqual(d.proc.returncode, 0)


if __name__ == "__main__":
    main()
