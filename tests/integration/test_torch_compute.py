#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rdzv.torch measures each step's compute time for the module it wraps, with no
change to the training loop: rdzv.progress(step) writes "step N compute_ms M" (proto/WORKER.md),
M the time since the last report less the backward's wait on its all-reduces. One process,
gloo on CPU; and two, which must exit once they trained. Exits 77 (skipped) when torch is not
importable."""
import json
import os
import selectors
import subprocess
import sys
import time
import unittest

from rdzvtest import fixed_port, kill_proc, main, native_stacks, skip_without_torch, track

skip_without_torch()
sys.path.insert(0, os.path.join(os.environ.get("RDZV_SOURCE_ROOT", "../.."), "python"))
import torch  # noqa: E402

import rdzv  # noqa: E402
import rdzv.torch as rt  # noqa: E402


class Slow(torch.nn.Module):
    """A linear layer whose forward takes at least 30 ms: compute the timer must count."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        time.sleep(0.03)
        return self.lin(x)


# A worker of a world of 2 that trains 5 steps and returns from main() (DDP's reducer then drops
# the last reference to the process group). Its training thread is alone on one CPU and every
# other thread (the process group's) runs at nice 19: they run after it, so that it reaches the
# group's teardown while they finish the last all-reduce (a race that a loaded machine loses
# now and then). Through rdzv.torch; with RDZV_TEST_PLAIN=1 an unmodified script (DDP itself)
# under rdzv-agent's hooks, which time its model.
WORKER = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[1])
PLAIN = os.environ.get("RDZV_TEST_PLAIN") == "1"
if PLAIN:
    os.environ["RDZV_PROGRESS_FD"] = str(os.pipe()[1])
    import rdzv._hooks
    rdzv._hooks.install()
import torch, torch.distributed as dist
if not PLAIN:
    import rdzv, rdzv.torch as rt
cpus = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpus[int(os.environ["RANK"]) % len(cpus)]})

def main():
    torch.set_num_threads(1)
    job = None if PLAIN else rt.init("gloo")
    if PLAIN:
        dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 784))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if PLAIN else job.wrap(model)
    me = threading.get_native_id()
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != me:
            os.setpriority(os.PRIO_PROCESS, int(tid), 19)
    for step in range(1, 6):
        x = torch.randn(32, 784)
        opt.zero_grad()
        ((ddp(x) - x) ** 2).mean().backward()
        opt.step()
        if not PLAIN:
            rdzv.progress(step)
    if PLAIN and rdzv._hooks._seen.get(ddp) is None:
        raise SystemExit("the hooks did not time the model")
    dist.destroy_process_group()
    print("trained", flush=True)

main()
"""
# rdzv-agent's hooks in a plain DDP script of a world of 2 (its progress channel a pipe of its
# own, read back at the end): each DDP model's gradients against the mean of the ranks' local
# gradients summed by hand (for two ranks a + b, equal bit for bit whatever the order), and the
# "step" lines. A: timed (its forward sleeps 30 ms: compute). B: the script's own hook, before
# its first forward: not timed. C and D: their hooks (a Python one, a builtin one) registered
# after the first forward: they run in the timer's place. Prints one JSON object.
HOOKED = r"""
import copy, json, os, sys, time
sys.path.insert(0, sys.argv[1])
rfd, wfd = os.pipe()
os.set_blocking(rfd, False)
os.environ["RDZV_PROGRESS_FD"] = str(wfd)
import rdzv._hooks
rdzv._hooks.install()
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
out = {"same": {}, "timed": {}}

class Slow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

    def forward(self, x):
        time.sleep(0.03)
        return self.b(torch.relu(self.a(x)))

def lines():
    try:
        return os.read(rfd, 65536).decode().splitlines()
    except BlockingIOError:
        return []

def train(name, ddp, steps, late=None):
    ref = copy.deepcopy(ddp.module)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    same = True
    for step in range(steps):
        torch.manual_seed(100 * step + rank)
        x = torch.randn(16, 64)
        opt.zero_grad()
        loss = ddp(x).pow(2).mean()
        if late is not None and step == 0:
            late(ddp)
        loss.backward()
        ref.zero_grad()
        ref(x).pow(2).mean().backward()
        for p, q in zip(ddp.module.parameters(), ref.parameters()):
            g = q.grad / world
            dist.all_reduce(g)
            same = same and torch.equal(p.grad, g)
        opt.step()
        with torch.no_grad():
            for p, q in zip(ddp.module.parameters(), ref.parameters()):
                q.copy_(p)
    out["same"][name] = same
    out["timed"][name] = getattr(rdzv._hooks, "_seen", {}).get(ddp) is not None
    out[name] = lines()

torch.manual_seed(0)
a = DDP(Slow())
train("A", a, 3)
b = DDP(Slow())
b.register_comm_hook(None, default_hooks.allreduce_hook)
train("B", b, 2)
del a, b
c = DDP(Slow())
train("C", c, 2, late=lambda m: m.register_comm_hook(None, default_hooks.allreduce_hook))
del c
d = DDP(Slow())
train("D", d, 2, late=lambda m: m._register_builtin_comm_hook(
    dist.BuiltinCommHookType.ALLREDUCE))
dist.destroy_process_group()
print(json.dumps(out), flush=True)
"""
ROUNDS = 3
START_S = 120.0  # to import torch and train 5 steps, on a loaded machine
EXIT_S = 15.0  # from "trained" to the exit


# rdzv-agent's hooks installed, then a library looks for torch before the script imports it
# (transformers, accelerate and datasets call importlib.util.find_spec("torch") as they load):
# the optimizer's steps are still reported. Prints what the progress channel got.
FIND_FIRST = r"""
import importlib.util, os, sys
sys.path.insert(0, sys.argv[1])
r, w = os.pipe()
os.environ["RDZV_PROGRESS_FD"] = str(w)
import rdzv._hooks
rdzv._hooks.install()
assert importlib.util.find_spec("torch") is not None
import torch
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=0.1)
for _ in range(3):
    p.grad = torch.ones(1)
    opt.step()
os.close(w)
print(os.read(r, 4096).decode(), end="")
"""


class ComputeTest(unittest.TestCase):
    def test_hooks_count_steps_after_a_find_spec_of_torch(self):
        python = os.path.join(os.environ.get("RDZV_SOURCE_ROOT", "../.."), "python")
        p = subprocess.run([sys.executable, "-c", FIND_FIRST, python], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([ln.split(" compute_ms ")[0] for ln in p.stdout.splitlines()],
                         ["step 1", "step 2", "step 3"], p.stdout)

    def test_wrapped_module_reports_its_compute_time(self):
        port = fixed_port()
        rfd, wfd = os.pipe()
        os.environ.update(RDZV_PROGRESS_FD=str(wfd), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
        rdzv._fd = rdzv._UNSET  # read the variable again
        job = rt.init("gloo")
        ddp = job.wrap(Slow())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step in range(1, 4):  # the user's loop, unchanged
            opt.zero_grad()
            ddp(torch.randn(8, 16)).sum().backward()
            opt.step()
            rdzv.progress(step)
        os.close(wfd)
        torch.distributed.destroy_process_group()
        lines = os.read(rfd, 4096).decode().splitlines()
        os.close(rfd)
        self.assertEqual([ln.split(" compute_ms ")[0] for ln in lines],
                         ["step 1", "step 2", "step 3"], lines)
        for ln in lines:
            self.assertRegex(ln, r"^step \d compute_ms \d+$")
            self.assertTrue(30 <= int(ln.split()[-1]) < 10000, lines)

    def test_hooks_time_a_plain_ddp_and_keep_its_gradients(self):
        """rdzv-agent's hooks in an unmodified script (HOOKED): a DDP model's gradients are
        DDP's own, timed or not; its steps carry the compute time while it is the one DDP
        model, timed; a hook of the script's own, before or after the first forward, is
        used, and the steps are then plain."""
        python = os.path.join(os.environ.get("RDZV_SOURCE_ROOT", "../.."), "python")
        port = fixed_port()
        ps = []
        for rank in (0, 1):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), WORLD_SIZE="2")
            p = subprocess.Popen([sys.executable, "-c", HOOKED, python], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            track(p)
            self.addCleanup(kill_proc, p)
            ps.append(p)
        for rank, p in enumerate(ps):
            out, err = p.communicate(timeout=START_S)
            self.assertEqual(p.returncode, 0, "rank %d: %s" % (rank, err[-3000:]))
            got = json.loads(out.splitlines()[-1])
            self.assertEqual(got["same"], dict.fromkeys("ABCD", True), got)
            self.assertEqual([ln.split(" compute_ms ")[0] for ln in got["A"]],
                             ["step 1", "step 2", "step 3"], got)
            for ln in got["A"]:
                self.assertRegex(ln, r"^step \d compute_ms \d+$")
                self.assertTrue(30 <= int(ln.split()[-1]) < 10000, got)
            self.assertEqual(got["timed"], {"A": True, "B": False, "C": True, "D": True}, got)
            self.assertEqual(got["B"] + got["C"] + got["D"], ["step %d" % n for n in range(4, 10)],
                             got)

    def wait_trained(self, p, deadline):
        """p's output until it printed "trained" (True) or ended or the deadline (False)."""
        out = b""
        with selectors.DefaultSelector() as sel:
            sel.register(p.stdout, selectors.EVENT_READ)
            while b"trained\n" not in out:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return False, out
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    return False, out
                out += chunk
        return True, out

    def test_workers_exit_once_they_trained(self):
        """The timer's all-reduces leave no Python to the process group's threads: a worker
        whose main() returns right after its last step exits, with the group's threads behind
        it (before: they waited for the GIL while the training thread, holding it, joined them
        in the group's teardown, and the worker never exited; or it aborted at shutdown)."""
        self.exit_after_training(plain=False)

    def test_unmodified_workers_exit_once_they_trained(self):
        """The same in an unmodified script, its model timed by rdzv-agent's hooks: the timer's
        bucket tensors outlive the model (before: the model took them along, the group's thread
        was left to free the last all-reduce's, and waited for the GIL while the training thread
        joined it in the teardown of the group that the model held last)."""
        self.exit_after_training(plain=True)

    def exit_after_training(self, plain):
        python = os.path.join(os.environ.get("RDZV_SOURCE_ROOT", "../.."), "python")
        for rnd in range(ROUNDS):
            port = fixed_port()
            ps = []
            for rank in (0, 1):
                env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                           RANK=str(rank), WORLD_SIZE="2", RDZV_TEST_PLAIN="1" if plain else "0")
                env.pop("RDZV_PROGRESS_FD", None)
                p = subprocess.Popen([sys.executable, "-c", WORKER, python], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                track(p)
                self.addCleanup(kill_proc, p)
                ps.append(p)
            deadline = time.monotonic() + START_S
            for rank, p in enumerate(ps):
                trained, out = self.wait_trained(p, deadline)
                self.assertTrue(trained, "round %d: rank %d did not train 5 steps within %.0f s: "
                                "%s" % (rnd, rank, START_S, out.decode(errors="replace")))
                try:
                    rest = p.communicate(timeout=EXIT_S)[0]
                except subprocess.TimeoutExpired:
                    self.fail("round %d: rank %d (pid %d) trained but did not exit within %.0f s: "
                              "it hangs on its way out; its threads %s" %
                              (rnd, rank, p.pid, EXIT_S, native_stacks(p.pid)))
                how = ("was killed by signal %d on its way out" % -p.returncode
                       if p.returncode < 0 else "exited with %d" % p.returncode)
                self.assertEqual(p.returncode, 0, "round %d: rank %d trained but %s: %s" %
                                 (rnd, rank, how, (out + rest).decode(errors="replace")))


if __name__ == "__main__":
    main()
