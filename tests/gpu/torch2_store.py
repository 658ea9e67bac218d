# SPDX-License-Identifier: Apache-2.0
# torch2_store.py HOST PORT: PyTorch 2.x's own TCPStore client (the VALIDATE numbering) against
# a running rdzvd: every op the installed binding has, with the results PyTorch's own server
# gives. CI's Debian PyTorch is 1.13 (tests/integration/test_torch_client.py); this runs where
# a PyTorch 2.x is installed (tests/gpu/gpu-check.sh). Prints one line per op and exits 1 on
# the first wrong answer.
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

host, port = sys.argv[1], int(sys.argv[2])
T = timedelta(seconds=10)
done = []


def store(timeout=T):
    return dist.TCPStore(host, port, None, False, timeout)


def check(name, got, want):
    if got != want:
        print(f"FAIL {name}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)
    done.append(name)
    print(f"ok   {name}", flush=True)


s = store()
s.set("x", "1")
check("set/get", s.get("x"), b"1")
s.set("bin", b"\x00\xffbinary")
check("binary value", s.get("bin"), b"\x00\xffbinary")
check("add", s.add("ctr", 5), 5)
check("add again", s.add("ctr", -2), 3)
check("get of an added key", s.get("ctr"), b"3")
check("compare_set, expected matches", s.compare_set("x", "1", "2"), b"2")
check("compare_set, expected differs", s.compare_set("x", "1", "3"), b"2")
check("compare_set on a missing key", s.compare_set("nokey", "a", "b"), b"a")
if hasattr(s, "check"):
    check("check present", s.check(["x", "ctr"]), True)
    check("check absent", s.check(["x", "nokey"]), False)
n = s.num_keys()
check("delete_key", s.delete_key("x"), True)
check("delete_key of a missing key", s.delete_key("x"), False)
check("num_keys after delete", s.num_keys(), n - 1)

# wait: woken by another client's set; times out on a key nobody sets.
other = store()
threading.Timer(0.2, lambda: other.set("late", "v")).start()
t0 = time.monotonic()
s.wait(["late"])
check("wait woken by another client's set", (s.get("late"), time.monotonic() - t0 < 5),
      (b"v", True))
t0 = time.monotonic()
try:
    s.wait(["never"], timedelta(seconds=0.5))
    check("wait timeout", "returned", "raised")
except Exception as e:  # DistStoreError (2.x) or RuntimeError
    check("wait times out", ("timeout" in str(e).lower() or "wait" in str(e).lower(),
                             0.4 < time.monotonic() - t0 < 5), (True, True))
s.set("after-timeout", "ok")
check("the connection still works after a timed-out wait", s.get("after-timeout"), b"ok")

if hasattr(s, "append"):
    s.append("ap", "ab")
    s.append("ap", "cd")
    check("append", s.get("ap"), b"abcd")
if hasattr(s, "multi_set"):
    s.multi_set(["m1", "m2"], ["v1", b"v2"])
    check("multi_set/multi_get", s.multi_get(["m1", "m2"]), [b"v1", b"v2"])
if hasattr(s, "queue_push"):
    s.queue_push("q", "a")
    s.queue_push("q", "b")
    check("queue_len", s.queue_len("q"), 2)
    check("queue_pop order", (s.queue_pop("q"), s.queue_pop("q")), (b"a", b"b"))
    threading.Timer(0.2, lambda: other.queue_push("q2", "late")).start()
    check("blocking queue_pop woken by a push", s.queue_pop("q2", block=True), b"late")
if hasattr(s, "list_keys"):
    keys = set(s.list_keys())
    check("list_keys holds what was set", {"ctr", "bin", "m1"} <= keys, True)

# PrefixStore and many clients at once, as init_process_group uses them.
p = dist.PrefixStore("default_pg", s)
p.set("0", "a")
check("PrefixStore", dist.PrefixStore("default_pg", other).get("0"), b"a")
errs = []


def worker(i):
    try:
        c = store()
        for _ in range(50):
            c.add("many", 1)
        c.wait(["go"])
    except Exception as e:  # reported below
        errs.append(repr(e))


ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
for t in ts:
    t.start()
s.add("many", 0)  # exists from here on: get() would wait for it
while int(s.get("many")) < 16 * 50 and any(t.is_alive() for t in ts):
    time.sleep(0.01)
s.set("go", "1")
for t in ts:
    t.join(20)
check("16 clients x 50 adds, then all released by one set", (errs, s.get("many")), ([], b"800"))
print(f"PASS torch {torch.__version__} TCPStore client: {len(done)} checks", flush=True)
