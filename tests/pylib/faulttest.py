# SPDX-License-Identifier: Apache-2.0
"""Helpers for the fault-injection tests: one real rdzvd, real rdzv-agents, fault-worker (or
PyTorch gloo scripts) as workers, and a record of every worker start and crash."""
import os
import re
import signal
import subprocess
import time

import agenttest
from agenttest import AGENT, AgentTestCase, finish, start  # noqa: F401
import rdzvtest

BUILD = agenttest.BUILD
WORKER = os.environ.get("FAULT_WORKER", os.path.join(BUILD, "tests", "faults", "fault-worker"))

# Fast failure handling for tests: 2 s from TERM to KILL, half a second of last call, no NCCL
# (the NCCL case says so). The heartbeat timeout stays at its default (5 s) except where a test
# measures it: on a loaded 2-core machine a 1 s timeout sees nodes that are merely slow as lost.
FAST = ["--grace", "2", "--last-call", "0.5", "--nccl", "off", "--connect-timeout", "20"]
HB = 2  # --heartbeat-timeout of the tests that wait for it
# rdzv-train's model in the fault tests: under the sanitizers a narrower hidden layer (the same
# paths through the trainer, the agent and rdzvd, a quarter of the arithmetic, so about the gcc
# build's pace); a test that compares losses compares with the same build's run.
TRAIN_LAYERS = "784,16,784" if rdzvtest.asan_build(BUILD) else "784,64,784"

EVENT_RE = re.compile(r"^(start|crash) (\d+) gen=(-?\d+) rank=(-?\d+) restart=(-?\d+) "
                      r"world=(-?\d+) pid=(\d+) node=(-?\d+) agent=(\d+)$")


class Event:
    __slots__ = ("kind", "t", "gen", "rank", "restart", "world", "pid", "node", "agent")

    def __init__(self, m):
        self.kind = m.group(1)
        self.t = int(m.group(2)) / 1e6
        self.gen, self.rank, self.restart, self.world, self.pid, self.node, self.agent = (
            int(m.group(i)) for i in range(3, 10))

    def __repr__(self):
        return f"{self.kind}(gen={self.gen} rank={self.rank} pid={self.pid} t={self.t:.3f})"


def free_port():
    """A free port for torchrun's own store, which needs one before it starts (rdzvd takes
    --port 0 and says its port in its --port-file: Daemon): rdzvtest.fixed_port."""
    return rdzvtest.fixed_port()


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class FaultTestCase(AgentTestCase):
    """self.dir: FAULT_DIR of the test's workers; self.agent(...) starts one agent on the
    test's daemon (self.d) running fault-worker."""

    def setUp(self):
        self.dir = self.outdir()
        self.agents = []

    def start_daemon(self, *args, **kw):
        self.d = self.daemon(*args, **kw)
        self.ep = f"127.0.0.1:{self.d.port}"
        return self.d

    def agent(self, run_id, *args, worker=None, env=None, ep=None, prefix=(), fast=True):
        cmd = [*prefix, AGENT, "--endpoint", ep or self.ep, "--rdzv-id", run_id,
               *(FAST if fast else []), *args, "--", *(worker or [WORKER])]
        e = {"FAULT_DIR": self.dir}
        e.update(env or {})
        p = start(cmd, env=e)
        self.agents.append(p)
        self.addCleanup(self._reap, p)
        return p

    def _reap(self, p):
        if p.poll() is None:
            kill_quietly(p.pid, signal.SIGCONT)
            rdzvtest.kill_proc(p, group=True)
        try:
            p.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            pass

    # -- the workers' record --

    def events(self, kind=None, gen=None):
        try:
            with open(os.path.join(self.dir, "events")) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        evs = []
        for line in lines:
            m = EVENT_RE.match(line)
            if not m:
                raise AssertionError(f"bad line in the workers' record: {line!r}")
            ev = Event(m)
            if (kind is None or ev.kind == kind) and (gen is None or ev.gen == gen):
                evs.append(ev)
        return evs

    def wait_starts(self, gen, n, timeout=20.0, agents=()):
        """Wait until n workers of generation gen have started; returns their start events."""
        deadline = time.monotonic() + timeout
        while True:
            evs = self.events("start", gen)
            if len(evs) >= n:
                return evs
            for p in agents:
                if p.poll() is not None:
                    _, _, err = finish(p, timeout=5)
                    raise AssertionError(f"an agent exited with {p.returncode} while waiting for "
                                         f"generation {gen}:\n{err[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(evs)} of {n} workers of generation {gen} started within {timeout}s; "
                    f"record: {self.events()}\nrdzvd log:\n{self.d.log()[-4000:]}")
            time.sleep(0.02)

    def release(self):
        """Let every running and future fault-worker exit 0."""
        open(os.path.join(self.dir, "release"), "w").close()

    def env_of(self, gen, rank):
        d = {}
        with open(os.path.join(self.dir, f"env.{gen}.{rank}")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                d[k] = v
        return d

    def worker_pid(self, gen, rank):
        with open(os.path.join(self.dir, f"pid.{gen}.{rank}")) as f:
            return int(f.read())

    def wait_pids_gone(self, pids, timeout):
        deadline = time.monotonic() + timeout
        while any(pid_alive(p) for p in pids):
            if time.monotonic() > deadline:
                return [p for p in pids if pid_alive(p)]
            time.sleep(0.01)
        return []

    def finish_all(self, ps, code=0, timeout=30):
        """Every agent in ps exits with code; returns their stderr."""
        errs = []
        for p in ps:
            rc, _, err = finish(p, timeout=timeout)
            self.assertEqual(rc, code, f"agent exit status; its log:\n{err[-3000:]}\nrdzvd log:\n"
                                       f"{self.d.log()[-3000:]}")
            errs.append(err)
        return errs

    def assert_generation(self, gen, world, nnodes=None, restart=None):
        """Every rank 0..world-1 of gen started exactly once, with a consistent environment."""
        evs = self.events("start", gen)
        self.assertEqual(sorted(e.rank for e in evs), list(range(world)),
                         f"generation {gen}: each rank exactly once; record {self.events()}")
        for e in evs:
            env = self.env_of(gen, e.rank)
            self.assertEqual(int(env["WORLD_SIZE"]), world)
            self.assertEqual(env["RDZV_GENERATION"], str(gen))
            if nnodes is not None:
                self.assertEqual(int(env["GROUP_WORLD_SIZE"]), nnodes)
            if restart is not None:
                self.assertEqual(env["TORCHELASTIC_RESTART_COUNT"], str(restart),
                                 f"rank {e.rank} of generation {gen}")
        return evs


def main():
    agenttest.main()
