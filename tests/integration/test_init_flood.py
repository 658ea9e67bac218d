#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Honest floods are not reset. As init_process_group does, thousands of ranks
connect to rdzvd at once, all from one address, and each sends its first bytes only after its
connect returned, sometimes long after (a rank descheduled on a busy host; here: every connection is
opened first, and only then does any send). With --max-handshaking at its default (1024), 2,976 of
4,000 such connections were closed as "too many connections before their handshake" by an older
rdzvd: a connection past the quota took the slot of a silent one from its own address, whatever its
age. Then a connection was only shed for one that had been silent RDZVD_HS_SHED_AGE_MS (3 s); where
opening them took about that long itself (a loaded machine), the oldest were still shed. Now
connections before their handshake are bounded by what they cost (--max-handshaking-bytes), which
16,000 fit (issue 71, case 7): all of them pass an init barrier (each ADDs a counter, the one that
reads 16,000 SETs a key, all WAIT on it) with nothing closed, however long opening them takes
within --handshake-timeout."""
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time

from rdzvtest import (HOST, SOURCE_ROOT, VALIDATE_BYTES, DaemonTestCase, enc, i64, keys, main,
                      s)

N = 16000


def recv_exact(sock, n, deadline):
    b = b""
    while len(b) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no reply in time")
        sock.settimeout(left)
        chunk = sock.recv(n - len(b))
        if not chunk:
            raise ConnectionResetError("closed by rdzvd")
        b += chunk
    return b


def release(tc, last, socks, prefix, deadline):
    """The barrier's end: last (the connection that read the full count) SETs prefix/go, every
    connection WAITs on it and must read STOP_WAITING."""
    tc.assertIsNotNone(last, "no connection read the full count")
    last.sendall(enc("modern", "SET", s(prefix + b"/go"), s(b"1")))
    wait = enc("modern", "WAIT", keys([prefix + b"/go"]))
    for c in socks:
        c.sendall(wait)
    for c in socks:
        tc.assertEqual(recv_exact(c, 1, deadline), b"\x00")  # STOP_WAITING


class InitFlood(DaemonTestCase):

    @staticmethod
    def close_all(socks):
        """Closed with a reset: 16,000 ports left in TIME_WAIT would leave the tests after this
        one no two free consecutive ports for a while."""
        linger = struct.pack("ii", 1, 0)
        for c in socks:
            try:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            except OSError:
                pass
            c.close()

    @staticmethod
    def listen_overflows():
        """TcpExt ListenOverflows of this network namespace: connections the kernel dropped or
        reset because a listener's accept queue was full (None when unreadable)."""
        try:
            with open("/proc/net/netstat") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        for head, vals in zip(lines[::2], lines[1::2]):
            if head.startswith("TcpExt:"):
                row = dict(zip(head.split()[1:], vals.split()[1:]))
                return int(row["ListenOverflows"]) if "ListenOverflows" in row else None
        return None

    def barrier(self, port, n, gap):
        """n connections opened at once, then gap seconds of silence, then the barrier; returns
        how many were closed or reset by rdzvd."""
        socks = []
        self.addCleanup(self.close_all, socks)
        overflows = self.listen_overflows()
        t0 = time.monotonic()
        for _ in range(n):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect((HOST, port))
            except BlockingIOError:
                pass
            socks.append(c)
        self.opened_in = time.monotonic() - t0
        time.sleep(gap)
        lost = 0
        add = VALIDATE_BYTES + enc("modern", "ADD", s(b"/flood/count"), i64(1))
        for c in socks:
            c.setblocking(True)
            try:
                c.sendall(add)
            except OSError:
                lost += 1
        deadline = time.monotonic() + 120
        last = None
        for c in socks:
            try:
                if struct.unpack("<q", recv_exact(c, 8, deadline))[0] == n:
                    last = c
            except (OSError, ConnectionResetError):
                lost += 1
        after = self.listen_overflows()
        # Every close rdzvd makes on its own is logged at warn (a shed, a refusal, a limit; a
        # burst of them rate-limited, the first still written): any warning or error counts.
        closes = [ln for ln in self.d.log().splitlines() if "[warn]" in ln or "[error]" in ln]
        if lost and not closes and overflows is not None and after is not None and \
                after > overflows:
            # rdzvd closed none: the kernel dropped them, its accept queue (somaxconn) full while
            # rdzvd (slower in a sanitizer build, on a loaded machine) accepted the burst. Not
            # rdzvd's doing; it must still serve. The barrier, short of them, is not run.
            self.assertEqual(self.client(self.d).add(b"/flood/after", 1), 1)
            print("\n%d of %d connections lost to the kernel's accept queue (ListenOverflows "
                  "+%d), none closed by rdzvd (the barrier is not run)"
                  % (lost, n, after - overflows), flush=True)
            return lost
        self.assertEqual(lost, 0, "%d of %d connections were closed by rdzvd (opened in %.2f s; "
                         "rdzvd's closes: %s; ListenOverflows %s -> %s)"
                         % (lost, n, self.opened_in, closes[:3], overflows, after))
        release(self, last, socks, b"/flood", deadline)
        return lost

    def test_16000_ranks_at_once_with_the_default_limits(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < N + 500:
            self.skipTest("open-file limit %d is below %d" % (hard, N + 500))
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        d = self.d = self.daemon(log_level="warn")
        t0 = time.monotonic()
        if self.barrier(d.port, N, gap=0.5):
            return
        print("\n%d connections opened at once (in %.2f s), silent 0.5 s, through the barrier in "
              "%.2f s" % (N, self.opened_in, time.monotonic() - t0), flush=True)
        self.assertNotIn("too many connections before their handshake", d.log())
        self.assertNotIn("closing connection", d.log())


class OneProcessCrowd(DaemonTestCase):
    """Issue 71, case 7: an honest crowd from one address completes its barrier. One process
    opens 16,000 TCPStore connections at once, then sends each one's ADD of the barrier key
    (tests/bench/crowd.py), as when a host's ranks start together. rdzvd with its default limits
    closed 14,976 of them: past --max-handshaking (1,024 connections) each newcomer took the slot
    of one silent 3 s, and the first had waited that long for the rest to open. Now connections
    before their handshake are bounded by what they cost (--max-handshaking-bytes, 32 MiB: under
    1 KiB each), which such a crowd fits, and by their deadline (--handshake-timeout). How fast
    it completes beside a minimal epoll server is a benchmark (tests/bench/run-crowd-bench.sh,
    docs/BENCHMARKS.md)."""

    def test_16000_connections_then_their_adds(self):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < N + 500:
            self.skipTest("open-file limit %d is below %d" % (hard, N + 500))
        d = self.daemon(log_level="warn")
        crowd = os.path.join(SOURCE_ROOT, "tests", "bench", "crowd.py")
        p = subprocess.run([sys.executable, crowd, "--port", str(d.port), "--conns", str(N),
                            "--key", "/crowd/cnt", "--timeout", "150"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=200)
        self.assertEqual(p.stderr, b"")
        res = json.loads(p.stdout)
        closes = [ln for ln in d.log().splitlines() if "[warn]" in ln or "[error]" in ln]
        print("\n%d connections from one process: opened in %.2f s, ADDs sent by %.2f s, "
              "%d replies by %.2f s" % (N, res["opened_s"], res["sent_s"] or 0, res["ok"],
                                      res["done_s"]), flush=True)
        # (Opening them past --handshake-timeout, 10 s, would be the time bound, not the
        # budget: only another crowd to 127.0.0.1 at once, short of ports, has done that.)
        self.assertEqual(res["ok"], N, "%d of %d connections got no reply (first: %s; opened in "
                         "%.1f s; rdzvd's closes: %s)" % (res["lost"], N, res["first_loss"],
                                                          res["opened_s"], closes[:3]))
        self.assertEqual(res["max"], N)
        self.assertEqual(closes, [])
        self.assertEqual(p.returncode, 0)
        self.assertEqual(self.client(d).add(b"/crowd/cnt", 0), N)


if __name__ == "__main__":
    main()
