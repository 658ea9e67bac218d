#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_store_costs.py: a TCPStore request costs rdzvd what it sends. A reply is
# sized before it is built: a MULTI_GET or LIST whose reply would pass --max-outbuf is refused
# (one warn line, the connection closed with nothing of the reply sent), so a 9 KB MULTI_GET
# naming an 8 MiB key 1,024 times no longer takes rdzvd to 8 GiB and holds its loop for 20 s
# Replies that fit are served as before. APPEND's journal and Raft costs are in
# test_persistence.py and test_replicas.py.

import threading
import time

from rdzvtest import DaemonTestCase, enc, fresh_client_works, keys, main

MIB = 1 << 20


class Sampler:
    """Samples rdzvd's RSS every few milliseconds until stopped: the peak, not only the end."""

    def __init__(self, d):
        self.d, self.peak, self._stop = d, d.rss_kb(), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.005):
            try:
                self.peak = max(self.peak, self.d.rss_kb())
            except (OSError, AssertionError):
                return

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak


class ReplyCap(DaemonTestCase):

    def test_multi_get_of_an_8mib_key_1024_times(self):
        d = self.daemon_without_quarantine()
        other = self.client(d)
        big = bytes(i % 251 for i in range(8 * MIB))
        other.set(b"k", big)
        other.sync()
        mark = d.mark()
        sampler = Sampler(d)
        hog = self.client(d)
        req = enc("modern", "MULTI_GET", keys([b"k"] * 1024))
        self.assertLess(len(req), 10 << 10)
        hog.send(req)
        # Another client's round trip is answered meanwhile.
        t0 = time.monotonic()
        other.ping(1)
        took = time.monotonic() - t0
        got = hog.assert_closed()
        time.sleep(0.2)
        peak = sampler.stop()
        self.assertLess(took, 1.0, "another client waited %.2f s for a PING" % took)
        self.assertEqual(got, b"", "no part of the refused reply is sent")
        self.assertLess(peak, 256 * 1024, "rdzvd RSS peaked at %d KiB" % peak)
        d.wait_log(hog.peer_tag + r".*MULTI_GET of 1024 keys would reply 8589942784 bytes, "
                   r"more than the output cap of 16777216 \(--max-outbuf.*closing connection",
                   since=mark, levels=("warn",))
        # One warning for the one request (and the usual info line of the close).
        self.assertEqual(len([ln for ln in d.log_lines(mark)
                              if "MULTI_GET of" in ln and "rdzvd[warn]" in ln]), 1)
        # A MULTI_GET that fits the cap is served as before, the large value included.
        self.assertEqual(other.multi_get([b"k", b"missing"]), [big, b""])
        fresh_client_works(self, d)

    def value_of(self, outbuf, value_kib):
        """An rdzvd with --max-outbuf outbuf and --max-value-len value_kib KiB, a client, and the
        value of that size it stored under b"v"."""
        d = self.daemon("--max-outbuf", outbuf, "--max-value-len", "%dK" % value_kib)
        c = self.client(d)
        val = bytes(i % 253 for i in range(value_kib << 10))
        c.set(b"v", val)
        return d, c, val

    def test_the_cap_follows_max_outbuf(self):
        # --max-outbuf 1M (and values up to 256 KiB): three 256 KiB values fit, five do not.
        d, c, val = self.value_of("1M", 256)
        self.assertEqual(c.multi_get([b"v"] * 3), [val] * 3)
        mark = d.mark()
        c.send(enc("modern", "MULTI_GET", keys([b"v"] * 5)))
        self.assertEqual(c.assert_closed(), b"")
        d.wait_log(r"MULTI_GET of 5 keys would reply 1310760 bytes, more than the output cap "
                   r"of 1048576", since=mark, levels=("warn",))
        fresh_client_works(self, d)

    def test_a_single_value_is_always_answered(self):
        # A cap below one value still lets a client read back any value it could store.
        d, c, val = self.value_of("64K", 256)
        self.assertEqual(c.get(b"v"), val)
        self.assertEqual(c.multi_get([b"v"]), [val])

    def test_list_past_the_cap_is_refused(self):
        d = self.daemon("--max-outbuf", "256K", "--max-value-len", "64K")
        c = self.client(d)
        key = b"k" * 8000
        for i in range(40):  # 40 keys of 8 KB: a LIST reply of 320 KB
            c.set(key[:-4] + b"%04d" % i, b"")
        c.sync()
        mark = d.mark()
        c.send(enc("modern", "LIST"))
        self.assertEqual(c.assert_closed(), b"")
        d.wait_log(r"LIST of 40 keys would reply 320328 bytes, more than the output cap of "
                   r"262144", since=mark, levels=("warn",))
        with d.connect() as c2:
            self.assertEqual(c2.delete(key[:-4] + b"0000"), 1)
            for i in range(10, 40):
                c2.delete(key[:-4] + b"%04d" % i)
            self.assertEqual(len(c2.list()), 9)


if __name__ == "__main__":
    main()
