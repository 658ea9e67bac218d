#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_torch_client.py: PyTorch's own TCPStore client against rdzvd: Debian 12's 1.13 (2.0
# numbering, no VALIDATE, keys prefixed with "/") and, in the Debian 13 root
# (tests/torch2/in-root.sh), 2.6 (VALIDATE at connect, the modern numbering): every op the binding
# has (2.x: multi_get, multi_set, append, queues where present), several clients at once,
# wait_for_workers, PrefixStore, and raw-socket cross-checks of what reaches the wire.
# With RDZV_FRONT_PROXY (tests/agent/front-proxy), the clients go through the node's store front
# (rdzv-agent --store-front) to rdzvd, with the same assertions (integration-torch-client-front);
# the raw-socket cross-checks still read rdzvd directly.
# Exits 77 (skipped) when torch is not importable.

import json
import os
import subprocess
import threading
import time
import unittest
from datetime import timedelta

from rdzvtest import DaemonTestCase, main, skip_without_torch, torch_major

skip_without_torch()
import torch.distributed as dist  # noqa: E402

TORCH2 = torch_major() >= 2

HOST = "127.0.0.1"
T = timedelta(seconds=10)
FRONT = os.environ.get("RDZV_FRONT_PROXY")


class TorchClient(DaemonTestCase):

    def setUp(self):
        self.d = self.daemon()
        self.port = self.front(self.d.port) if FRONT else self.d.port
        self.store = self.new_store()
        self.raw = self.client(self.d, dialect="2.0")

    def front(self, port):
        """A store front to rdzvd's port: its own port. At the end it must not have lost
        rdzvd, nor sent upstream more than it was asked."""
        p = subprocess.Popen([FRONT, HOST, str(port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def done():
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err)
            stats = json.loads(out)
            self.assertLessEqual(stats["forwarded"], stats["requests"], stats)

        self.addCleanup(done)
        return int(p.stdout.readline())

    def new_store(self, timeout=T, **kw):
        return dist.TCPStore(HOST, self.port, None, False, timeout, **kw)

    def store_sync(self):
        """What self.store sent without a reply (a SET) has reached rdzvd, before the raw
        connection reads it: a request with a reply after it, through a front (which forwards
        in order); directly, the SET is in rdzvd's socket first."""
        if FRONT:
            self.store.num_keys()

    def raw_sync(self):
        self.raw.sync()

    def test_set_get(self):
        st = self.store
        st.set("x", "1")
        self.assertEqual(st.get("x"), b"1")
        st.set("x", b"\x00\xffbinary")
        self.assertEqual(st.get("x"), b"\x00\xffbinary")
        st.set("empty", "")
        self.assertEqual(st.get("empty"), b"")
        big = bytes(i % 241 for i in range(1 << 20))
        st.set("big", big)
        self.assertEqual(st.get("big"), big)

    def test_add(self):
        st = self.store
        self.assertEqual(st.add("n", 5), 5)
        self.assertEqual(st.add("n", 7), 12)
        self.assertEqual(st.get("n"), b"12")
        self.assertEqual(st.add("n", -13), -1)
        self.assertEqual(st.add("fresh", 0), 0)
        self.assertEqual(st.get("fresh"), b"0")

    def test_compare_set(self):
        st = self.store
        # Missing key + non-empty expected: the expected value comes back, nothing stored.
        self.assertEqual(st.compare_set("k", "exp", "des"), b"exp")
        self.assertEqual(st.num_keys(), 0)
        self.assertEqual(st.compare_set("k", "", "first"), b"first")
        self.assertEqual(st.compare_set("k", "nope", "second"), b"first")
        self.assertEqual(st.compare_set("k", "first", "second"), b"second")
        self.assertEqual(st.get("k"), b"second")

    def test_delete_and_num_keys(self):
        st = self.store
        self.assertEqual(st.num_keys(), 0)
        st.set("a", "1")
        st.set("b", "2")
        st.add("c", 1)
        self.assertEqual(st.num_keys(), 3)
        self.assertTrue(st.delete_key("a"))
        self.assertFalse(st.delete_key("a"))
        self.assertFalse(st.delete_key("never"))
        self.assertEqual(st.num_keys(), 2)
        self.assertEqual(self.raw.num_keys(), 2)

    def test_check_if_present(self):
        if not hasattr(self.store, "check"):
            self.skipTest("this torch's TCPStore binding has no check()")
        self.store.set("p", "1")
        self.assertTrue(self.store.check(["p"]))
        self.assertFalse(self.store.check(["p", "q"]))

    def test_multi_set_multi_get(self):
        if not TORCH2:
            self.skipTest("torch 1.13's TCPStore has no multi_get/multi_set")
        st = self.store
        st.multi_set(["m1", "m2", "m3"], ["one", b"\x00two", ""])
        self.assertEqual(st.multi_get(["m3", "m1", "m2"]), [b"", b"one", b"\x00two"])
        self.assertEqual(self.raw.get("/m2"), b"\x00two")
        self.raw.set("/m4", "from-raw")
        self.raw_sync()
        self.assertEqual(st.multi_get(["m4"]), [b"from-raw"])
        # A missing key: multi_get waits for it, under the store's timeout.
        short = self.new_store(timeout=timedelta(seconds=1))
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            short.multi_get(["m1", "never"])
        self.assertLess(time.monotonic() - t0, 5)

    def test_append(self):
        if not TORCH2:
            self.skipTest("torch 1.13's TCPStore has no append")
        st = self.store
        st.append("log", "ab")  # a missing key is created
        st.append("log", b"\x00cd")
        self.assertEqual(st.get("log"), b"ab\x00cd")
        self.assertEqual(self.raw.get("/log"), b"ab\x00cd")
        st.set("log", "x")
        st.append("log", "y")
        self.assertEqual(st.get("log"), b"xy")

    def test_queues(self):
        st = self.store
        if not hasattr(st, "queue_push"):
            self.skipTest("this torch's TCPStore binding has no queues")
        st.queue_push("q", "a")
        st.queue_push("q", b"\x00b")
        self.assertEqual(st.queue_len("q"), 2)
        self.assertEqual(st.queue_pop("q"), b"a")
        self.assertEqual(st.queue_pop("q"), b"\x00b")
        self.assertEqual(st.queue_len("q"), 0)

    def test_wait(self):
        st = self.store
        st.set("here", "1")
        st.wait(["here"])
        st.wait(["here"], timedelta(seconds=2))
        # Woken by another client's writes.
        other = self.new_store()
        done = threading.Event()
        errs = []

        def waiter():
            try:
                other.wait(["w1", "w2"], timedelta(seconds=10))
                done.set()
            except BaseException as e:  # reported below
                errs.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)  # the behaviour: the wait stays blocked while its keys are missing
        self.assertFalse(done.is_set())
        st.set("w1", "x")
        time.sleep(0.2)  # the same with one key of two set
        self.assertFalse(done.is_set())
        st.add("w2", 1)
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(errs, [])
        self.assertTrue(done.is_set())
        self.assertEqual(other.get("w1"), b"x")

    def test_wait_timeout_raises(self):
        st = self.new_store()  # its socket keeps the short receive timeout: don't reuse it
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            st.wait(["never"], timedelta(seconds=1))
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 5)
        # The daemon is fine and other clients are unaffected.
        self.store.set("after", "1")
        self.assertEqual(self.store.get("after"), b"1")

    def test_set_timeout(self):
        st = self.new_store()
        st.set_timeout(timedelta(seconds=1))
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            st.get("missing")  # = WAIT then GET, under the store timeout
        self.assertLess(time.monotonic() - t0, 5)
        st2 = self.new_store()
        st2.set_timeout(timedelta(seconds=1))
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            st2.wait(["missing2"])
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 5)

    def test_keys_on_the_wire_have_a_slash(self):
        self.raw.set("/x", "from-raw")
        self.raw_sync()
        self.assertEqual(self.store.get("x"), b"from-raw")
        self.store.set("y", "from-torch")
        self.store.add("z", 4)  # a reply: the SET before it has been applied
        self.assertEqual(self.raw.get("/y"), b"from-torch")
        self.assertEqual(self.raw.get("y"), b"")
        self.assertEqual(self.raw.get("/z"), b"4")
        with self.client(self.d) as modern:
            self.assertEqual(sorted(modern.list()), [b"/x", b"/y", b"/z"])

    def test_prefix_store(self):
        ps = dist.PrefixStore("job", self.store)
        ps.set("k", "v")
        self.assertEqual(ps.get("k"), b"v")
        self.assertEqual(ps.add("ctr", 2), 2)
        self.assertEqual(self.raw.get("/job/k"), b"v")
        self.assertEqual(self.raw.get("/job/ctr"), b"2")
        self.assertEqual(self.store.get("job/k"), b"v")
        nested = dist.PrefixStore("inner", dist.PrefixStore("outer", self.store))
        nested.set("deep", "1")
        self.store_sync()
        self.assertEqual(self.raw.get("/outer/inner/deep"), b"1")
        self.assertEqual(nested.compare_set("deep", "1", "2"), b"2")
        self.assertTrue(nested.delete_key("deep"))
        nested.wait([], timedelta(seconds=1))
        self.raw.set("/outer/inner/late", "x")
        self.raw_sync()
        nested.wait(["late"], timedelta(seconds=5))
        self.assertEqual(ps.num_keys(), self.raw.num_keys())

    def test_many_clients_counter_and_barrier(self):
        n, adds = 8, 50
        stores = [self.new_store() for _ in range(n)]
        errs = []
        done = []

        def rank(i):
            try:
                st = stores[i]
                for _ in range(adds):
                    st.add("counter", 1)
                if st.add("arrived", 1) == n:
                    st.set("go", "1")
                st.wait(["go"], timedelta(seconds=20))
                done.append(int(st.get("counter")))
            except BaseException as e:  # reported below
                errs.append(e)

        ts = [threading.Thread(target=rank, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertFalse(any(t.is_alive() for t in ts))
        self.assertEqual(errs, [])
        # After the barrier, everyone saw every ADD.
        self.assertEqual(done, [n * adds] * n)
        self.assertEqual(self.raw.get("/counter"), str(n * adds).encode())

    def test_wait_for_workers(self):
        n = 4
        stores, errs = [], []
        lock = threading.Lock()

        def worker():
            try:
                st = dist.TCPStore(HOST, self.port, n, False, T, wait_for_workers=True)
                with lock:
                    stores.append(st)
            except BaseException as e:  # reported below
                errs.append(e)

        ts = [threading.Thread(target=worker) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        self.assertFalse(any(t.is_alive() for t in ts))
        self.assertEqual(errs, [])
        self.assertEqual(len(stores), n)
        # Each client did ADD "init/" 1 (no leading slash).
        self.assertEqual(self.raw.get("init/"), str(n).encode())
        self.assertEqual(self.raw.get("/init/"), b"")
        stores[0].set("after-init", "ok")
        self.assertEqual(stores[-1].get("after-init"), b"ok")


@unittest.skipIf(FRONT, "rdzvd's own --legacy handling: no front")
class TorchClientRefused(DaemonTestCase):

    def test_legacy_none_takes_a_2x_client(self):
        if not TORCH2:
            self.skipTest("torch 1.13 sends no VALIDATE")
        # 2.x validates at connect (VALIDATE, then PING on newer versions), which is all that
        # --legacy none asks for; the modern numbering follows.
        d = self.daemon("--legacy", "none")
        st = dist.TCPStore(HOST, d.port, None, False, timedelta(seconds=3))
        self.assertEqual(st.add("x", 2), 2)
        st.set("y", "1")
        self.assertTrue(st.check(["x", "y"]))
        with self.client(d) as c:
            self.assertEqual(sorted(c.list()), [b"/x", b"/y"])
        self.assertNotIn("not VALIDATE", d.log())

    def test_legacy_none_refuses_1_13_client(self):
        if TORCH2:
            self.skipTest("torch 2.x sends VALIDATE")
        d = self.daemon("--legacy", "none")
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            st = dist.TCPStore(HOST, d.port, None, False, timedelta(seconds=3))
            st.add("x", 1)
        self.assertLess(time.monotonic() - t0, 8)
        d.wait_log(r"not VALIDATE.*--legacy none", levels=("warn",))
        with self.client(d) as c:
            self.assertEqual(c.num_keys(), 0)


if __name__ == "__main__":
    main()
