#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_persistence.py: rdzvd --state-dir: keys written by PyTorch 1.13 TCPStore clients and by
# raw clients survive a SIGKILL and a restart on the same port; a bad --state-dir is one clear
# error line; without --state-dir nothing is written anywhere. The torch parts are skipped when
# torch is not importable. An APPEND journals only its own bytes; a corrupt record in
# the middle of the journal stops rdzvd with the file untouched.

import time
import os
import subprocess
import tempfile
from datetime import timedelta

from rdzvtest import HOST, RDZVD, DaemonTestCase, i64, main, proc_wchar
from rdzvtest import s as enc_str

try:
    import torch.distributed as dist
    HAVE_TORCH = dist.is_available()
except Exception:  # ImportError, or a broken install
    dist = None
    HAVE_TORCH = False

T = timedelta(seconds=10)


class Persistence(DaemonTestCase):

    def setUp(self):
        self._state = tempfile.TemporaryDirectory(prefix="rdzvtest-state-")
        self.addCleanup(self._state.cleanup)
        self.state = os.path.join(self._state.name, "state")  # created by rdzvd

    def torch_store(self, port):
        return dist.TCPStore(HOST, port, None, False, T)

    def restart(self, d, *extra, start_timeout=None):
        """SIGKILL d, then start a new rdzvd on the same port and state dir."""
        port = d.port
        d.kill()
        kw = {"start_timeout": start_timeout} if start_timeout else {}
        return self.daemon("--state-dir", self.state, "--port", str(port), *extra, **kw)

    def test_keys_survive_sigkill_torch_and_raw(self):
        if not HAVE_TORCH:
            self.skipTest("torch not importable")
        d = self.daemon("--state-dir", self.state)
        self.assertEqual(os.stat(self.state).st_mode & 0o777, 0o700)
        st = self.torch_store(d.port)
        st.set("plain", "hello")
        st.set("bin", b"\x00\xff\x01")
        self.assertEqual(st.add("counter", 5), 5)
        self.assertEqual(st.add("counter", 7), 12)
        self.assertEqual(st.compare_set("cas", "", "first"), b"first")
        self.assertEqual(st.compare_set("cas", "first", "second"), b"second")
        self.assertEqual(st.compare_set("cas", "nope", "third"), b"second")
        st.set("gone", "x")
        self.assertTrue(st.delete_key("gone"))
        big = bytes(i % 251 for i in range(300000))
        st.set("big", big)
        with self.client(d) as c:  # the repo's raw client, modern numbering
            c.set(b"raw/k", b"raw-v")
            c.append(b"raw/log", b"ab")
            c.append(b"raw/log", b"cd")
            c.multi_set([(b"raw/m1", b"1"), (b"raw/m2", b"2")])
            c.queue_push(b"raw/q", b"i1")
            c.queue_push(b"raw/q", b"i2")
            c.queue_push(b"raw/q", b"i3")
            self.assertEqual(c.queue_pop(b"raw/q"), (3, b"i1"))
            c.sync()
            nkeys = c.num_keys()
        del st

        d2 = self.restart(d)
        d2.wait_log(r"journal .*main\.journal: replayed \d+ records")
        st = self.torch_store(d2.port)
        self.assertEqual(st.get("plain"), b"hello")
        self.assertEqual(st.get("bin"), b"\x00\xff\x01")
        self.assertEqual(st.get("cas"), b"second")
        self.assertEqual(st.get("big"), big)
        self.assertEqual(st.add("counter", 1), 13)  # goes on from the saved counter
        self.assertFalse(st.delete_key("gone"))     # still deleted
        self.assertEqual(st.num_keys(), nkeys)
        with self.client(d2) as c:
            self.assertEqual(c.check([b"/gone"]), 1)  # CHECK_NOT_READY
            self.assertEqual(c.get(b"raw/k"), b"raw-v")
            self.assertEqual(c.get(b"raw/log"), b"abcd")
            self.assertEqual(c.multi_get([b"raw/m1", b"raw/m2"]), [b"1", b"2"])
            self.assertEqual(c.queue_len(b"raw/q"), 2)
            self.assertEqual(c.queue_pop(b"raw/q"), (2, b"i2"))
            c.sync()
        del st

        # A clean stop keeps them too, and the pop above was journaled.
        d2.stop()
        d3 = self.daemon("--state-dir", self.state, "--port", str(d2.port))
        with self.client(d3) as c:
            self.assertEqual(c.get(b"/counter"), b"13")
            self.assertEqual(c.queue_pop(b"raw/q"), (1, b"i3"))
            self.assertEqual(c.queue_len(b"raw/q"), 0)

    def test_acknowledged_survives_sigkill_with_batching(self):
        # Requests from many connections land in one loop iteration, so their records are
        # written as one batch; every reply that arrived must survive an immediate SIGKILL.
        for mode in ("everysec", "always"):
            d = self.daemon("--state-dir", self.state, "--fsync", mode)
            clients = [self.client(d) for _ in range(20)]
            replies = []
            for _ in range(100):
                for c in clients:
                    c.req("ADD", enc_str(b"cnt-" + mode.encode()), i64(1))
                # The daemon serves the 20 connections in the order they became readable, not
                # in ours: the counter's values come back once each, in any order.
                replies += [c.r_i64() for c in clients]
            self.assertEqual(sorted(replies), list(range(1, 2001)))
            d2 = self.restart(d, "--fsync", mode)
            with self.client(d2) as c:
                self.assertEqual(c.add(b"cnt-" + mode.encode(), 0), 2000)
            d2.stop()

    def crashed_with_keys(self):
        """An rdzvd on self.state that acknowledged k0..k19 = v0..v19, then SIGKILLed."""
        d = self.daemon("--state-dir", self.state)
        with self.client(d) as c:
            for i in range(20):
                c.set(b"k%d" % i, b"v%d" % i)
            c.sync()
        d.kill()
        return d

    def test_torn_tail_after_crash(self):
        d = self.crashed_with_keys()
        # A record cut short, as a crash in the middle of write(2) leaves it.
        with open(os.path.join(self.state, "main.journal"), "ab") as f:
            f.write(b"\x12\x34\x56\x78\x01\x05\x00\x00\x00\x40\x00")
        d2 = self.daemon("--state-dir", self.state, "--port", str(d.port))
        d2.wait_log(r"dropped 11 bytes of torn or corrupt tail", levels=["warn"])
        with self.client(d2) as c:
            self.assertEqual(c.num_keys(), 20)
            self.assertEqual(c.get(b"k19"), b"v19")

    def test_append_journals_only_its_bytes(self):
        # 256 one-byte APPENDs to an 8 MiB value wrote 3 GiB to the journal
        # (each recorded the key's whole new value). Now each records its own byte: rdzvd writes
        # a few KB (write(2) bytes, /proc/PID/io; compaction could hide a file size's growth).
        d = self.daemon("--state-dir", self.state)
        base = (8 << 20) - 256  # --max-value-len is 8 MiB: room for 256 bytes
        tail = bytes(b"0123456789"[i % 10] for i in range(256))
        # The value grows by realloc: glibc moves a block this large with mremap, without a copy
        # (under 10 ms for all 256 here), but the sanitizers' allocator copies it every time
        # (9.2 s for the 256 in the ASan build, 36 ms each): a reply may take that long.
        with self.client(d, timeout=60) as c:
            c.set(b"big", bytes(i % 251 for i in range(base)))
            c.sync()
            wrote0 = proc_wchar(d.pid)
            t0 = time.monotonic()
            for i in range(256):
                c.append(b"big", tail[i:i + 1])
            c.sync()
            print("\n256 APPENDs to an 8 MiB value took %.2f s" % (time.monotonic() - t0),
                  flush=True)
            wrote = proc_wchar(d.pid) - wrote0
            self.assertLess(wrote, 64 << 10, "256 one-byte APPENDs: rdzvd wrote %d bytes" % wrote)
            self.assertGreaterEqual(wrote, 256 * (13 + 3 + 1))
            # One byte past --max-value-len: refused, the connection closed, nothing changed.
            mark = d.mark()
            c.append(b"big", b"x")
            c.assert_closed()
        d.wait_log(r"APPEND would make a value larger than 8388608 bytes, closing connection",
                   since=mark, levels=("warn",))
        d2 = self.restart(d, start_timeout=60)  # the replay grows the value 256 times too
        with self.client(d2) as c:
            v = c.get(b"big")
            self.assertEqual(len(v), 8 << 20)
            self.assertEqual(v[:base], bytes(i % 251 for i in range(base)))
            self.assertEqual(v[base:], tail)

    def test_corrupt_record_mid_file_stops_rdzvd(self):
        # One corrupt byte in the middle of main.journal silently truncated
        # the file, dropping every later record. Now rdzvd stops with one line naming the file
        # and the record's byte offset, and leaves the file as it is; the line's own command
        # keeps the records before it.
        d = self.crashed_with_keys()
        path = os.path.join(self.state, "main.journal")
        with open(path, "rb") as f:
            img = bytearray(f.read())
        rec = img.index(b"k10v10") - 13  # the record: a 13-byte header, key, value
        img[rec + 13 + 4] ^= 0x40         # one byte of its value
        with open(path, "wb") as f:
            f.write(img)
        rc, err = self.run_rdzvd(["--state-dir", self.state])
        self.assertEqual(rc, 1, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn("main.journal: corrupt record at byte offset %d (CRC mismatch)" % rec,
                      lines[0])
        self.assertIn("truncate -s %d %s" % (rec, path), lines[0])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), bytes(img), "the journal was changed")
        # As the line says: cut it there by hand, and the records before it are kept.
        os.truncate(path, rec)
        d2 = self.daemon("--state-dir", self.state, "--port", str(d.port))
        with self.client(d2) as c:
            self.assertEqual(c.num_keys(), 10)
            self.assertEqual(c.get(b"k9"), b"v9")
            self.assertEqual(c.check([b"k10"]), 1)  # CHECK_NOT_READY

    def test_fsync_modes_accepted(self):
        for mode in ("always", "no", "everysec"):
            d = self.daemon("--state-dir", self.state, "--fsync", mode)
            with self.client(d) as c:
                c.set(b"mode", mode.encode())
                c.sync()
            d.wait_log(r"fsync %s\)" % mode)
            d.stop()
        d = self.daemon("--state-dir", self.state)
        with self.client(d) as c:
            self.assertEqual(c.get(b"mode"), b"everysec")

    def run_rdzvd(self, args, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("RDZVD_")}
        e.update(env or {})
        p = subprocess.run([RDZVD, "--port", "0", "--bind", HOST] + args, env=e,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_unusable_state_dir(self):
        a_file = os.path.join(self._state.name, "a-file")
        with open(a_file, "w") as f:
            f.write("x")
        for bad in (a_file, "/proc/x", os.path.join(a_file, "sub")):
            rc, err = self.run_rdzvd(["--state-dir", bad])
            self.assertNotEqual(rc, 0, err)
            lines = err.strip().splitlines()
            self.assertEqual(len(lines), 1, err)
            self.assertIn("--state-dir %s" % bad, lines[0])
        # Also from the environment.
        rc, err = self.run_rdzvd([], env={"RDZVD_STATE_DIR": a_file})
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--state-dir %s" % a_file, err)
        rc, err = self.run_rdzvd(["--fsync", "sometimes"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--fsync", err)
        # A journal that is not one: a clear error, not an empty store.
        os.mkdir(self.state)
        with open(os.path.join(self.state, "main.journal"), "wb") as f:
            f.write(b"garbage, not a journal header")
        rc, err = self.run_rdzvd(["--state-dir", self.state])
        self.assertNotEqual(rc, 0, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("main.journal", err)

    def test_remove_state_dir_at_a_normal_end_only(self):
        # --remove-state-dir (the replicas an agent starts): a SIGKILL keeps the directory, and
        # the keys come back; a normal end (SIGTERM, exit 0) deletes it and all in it.
        d = self.daemon("--state-dir", self.state, "--remove-state-dir")
        with self.client(d) as c:
            c.set(b"k", b"v")
            c.sync()
        d2 = self.restart(d, "--remove-state-dir")
        with self.client(d2) as c:
            self.assertEqual(c.get(b"k"), b"v")
        self.assertTrue(os.path.isdir(self.state))
        d2.stop()
        self.assertFalse(os.path.exists(self.state))
        self.assertIn("deleted --state-dir %s (--remove-state-dir)" % self.state, d2.log())

    def test_nothing_written_without_state_dir(self):
        empty = tempfile.TemporaryDirectory(prefix="rdzvtest-cwd-")
        self.addCleanup(empty.cleanup)
        old_cwd = os.getcwd()
        os.chdir(empty.name)
        try:
            d = self.daemon()
        finally:
            os.chdir(old_cwd)
        with self.client(d) as c:
            for i in range(100):
                c.set(b"k%d" % i, b"v")
            c.add(b"n", 1)
            c.queue_push(b"q", b"x")
            c.sync()
        opened = []
        for fd in os.listdir("/proc/%d/fd" % d.pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (d.pid, fd))
            except OSError:
                continue
            if target.startswith("/") and not target.startswith("/dev/"):
                opened.append(target)
        # Only its log and stdout files, which the test harness handed it.
        self.assertEqual(sorted(opened), sorted([d.log_path, d.out_path]))
        d.stop()
        self.assertEqual(os.listdir(empty.name), [])
        self.assertFalse(os.path.exists(self.state))


if __name__ == "__main__":
    main()
