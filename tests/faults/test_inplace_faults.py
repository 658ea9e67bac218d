# SPDX-License-Identifier: Apache-2.0
"""Recovery in place: rdzv-agent --recovery inplace on CPU/gloo, 2 nodes x 2
rdzv-train workers against a real rdzvd, checkpoints on (so that "no checkpoint is read" is a real
check: one exists when the fault comes). Each case: a worker SIGKILLed; a worker SIGSTOPped with
--progress-timeout 2; an agent SIGKILLed with --nnodes 2:3 and a spare; a node lost with no spare
(the world shrinks to 2), then one that joins with --scale-up now (it grows back to 4). In each, the
workers that were not hit are the same processes to the end (their pids, from the agents' logs, exit
0), only the missing workers are started, rank 0 prints one "reformed" event whose source is a
survivor and no "resumed" event, every agent exits 0, and the final loss and step count equal an
uninterrupted run's (same options) within floating-point noise. The same SIGSTOP without
--progress-timeout is shown not to recover: no step for a bound, then the test kills the job. In the
SIGSTOP case the stopped rank is the one failed, not the ranks blocked on it (they say "wait" on
their progress channel)."""
import glob
import json
import os
import re
import signal
import subprocess
import time
import unittest

from faulttest import (AGENT, BUILD, FAST, TRAIN_LAYERS, FaultTestCase, kill_quietly, main,
                       pid_alive, rdzvtest)

TRAIN = os.environ.get("RDZV_TRAIN") or os.path.join(BUILD, "train", "rdzv-train")

STEPS = 300      # a few seconds at world 4; lr 2e-4 keeps the loss far from 0 (about 5e-4 at 300)
HIT = 60         # the fault comes once rank 0 reported this step (checkpoints at 20, 40, 60)
CKPT_EVERY = 20
PT = 2           # --progress-timeout of the hang case
# the hang without --progress-timeout: no step this long (< the trainer's --timeout)
HANG_BOUND = 8.0
REL = 1e-4       # final loss vs the uninterrupted run's, as test_train_inplace.py



def asan_build():
    return rdzvtest.asan_build(BUILD)


SLOW = 3 if asan_build() else 1  # waits (not the asserted bounds) scale with an ASan build

# The line each agent says last: what failures cost the job (rdzv_cost_format).
COST_RE = re.compile(r"job \S+: wall ([\d.]+) s: start-up ([\d.]+) s \(\d+%\), training "
                     r"([\d.]+) s \(\d+%(?:; ([\d.]+) s of it redoing steps done before)?\), "
                     r"(\d+) recover(?:y|ies) ([\d.]+) s \(\d+%: detect ([\d.]+), stop ([\d.]+), "
                     r"rendezvous ([\d.]+), nccl ([\d.]+), first step ([\d.]+)\)")
STARTED_RE = re.compile(r"started worker rank (\d+) \(local rank (\d+), pid (\d+)\)")
EXITED_RE = re.compile(r"worker rank (\d+) \(local rank \d+, pid (\d+)\) "
                       r"(?:exited with status (\d+)|was killed by signal (\d+))")


def train_cmd(ckpt):
    return [TRAIN, "--backend", "gloo", "--samples", "256", "--batch-size", "32",
            "--layers", TRAIN_LAYERS, "--lr", "0.0002", "--log-every", "10",
            "--steps", str(STEPS), "--ckpt-dir", ckpt, "--ckpt-every", str(CKPT_EVERY),
            "--timeout", "30"]


def agent_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RDZV_", "PET_", "TORCHELASTIC_", "MASTER_", "SLURM_", "PBS_",
                                "OMPI_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # As test_train_inplace.py: in an ASan build, no alternate signal stack for the trainers
    # (a false report in ASan's teardown of the libgloo threads a re-formed context ends).
    env["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                 "use_sigaltstack=0"]))
    return env


class Agent:
    """One rdzv-agent whose stdout and stderr go to files (read while it runs)."""

    def __init__(self, p, out, err):
        self.p, self.out, self.err = p, out, err
        self.pid = p.pid

    def _read(self, path):
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log(self):
        return self._read(self.err)

    def rank0(self):
        """rank 0's JSON lines (only rank 0 prints), as the agent relays them."""
        objs = []
        text = self._read(self.out)
        for line in text[:text.rfind("\n") + 1].splitlines():
            if line.startswith("[rank0]: {"):
                objs.append(json.loads(line[len("[rank0]: "):]))
        return objs

    def steps(self):
        return [o["step"] for o in self.rank0() if "event" not in o and "step" in o]

    def started(self):
        """[(global rank, pid)] of every worker this agent started, in order."""
        return [(int(m.group(1)), int(m.group(3))) for m in STARTED_RE.finditer(self.log())]

    def exits(self):
        """{pid: exit status, or -signal}"""
        res = {}
        for m in EXITED_RE.finditer(self.log()):
            res[int(m.group(2))] = (int(m.group(3)) if m.group(3) is not None
                                    else -int(m.group(4)))
        return res


class TestInplace(FaultTestCase):
    reference = None  # the uninterrupted run's done event, shared by the cases

    def setUp(self):
        super().setUp()
        if not os.access(TRAIN, os.X_OK):
            self.skipTest(f"rdzv-train not built at {TRAIN}")
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.mkdir(self.ckpt)
        self.start_daemon()

    # -- the job --

    def job_agent(self, run_id, *args, name, nproc="2", worker=None):
        # Each agent is a node of its own host (--host NAME), as on a cluster: what a node lost
        # before it ran is charged to its host, and a joiner's own host has lost nothing.
        cmd = [AGENT, "--endpoint", self.ep, "--rdzv-id", run_id, *FAST, "--nproc", nproc,
               "--max-restarts", "3", "--host", name, *args, "--",
               *(worker or train_cmd(self.ckpt))]
        out, err = (os.path.join(self.dir, f"{name}.{s}") for s in ("out", "err"))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(cmd, env=agent_env(), stdin=subprocess.DEVNULL, stdout=fo,
                                 stderr=fe, start_new_session=True)
        rdzvtest.track(p, group=True)
        self.addCleanup(self._reap, p)
        a = Agent(p, out, err)
        self.agents.append(a)
        return a

    def two_agents(self, run_id, *args, nnodes="2"):
        return [self.job_agent(run_id, "--nnodes", nnodes, "--node-rank", str(i), *args,
                               name="ab"[i]) for i in (0, 1)]

    def dump(self, agents):
        return "".join(f"\n--- agent {a.pid} log:\n{a.log()[-4000:]}" for a in agents) + \
            f"\n--- rdzvd log:\n{self.d.log()[-3000:]}"

    def check_running(self, agents):
        for a in agents:
            if a.p.poll() is not None:
                raise AssertionError(f"agent {a.pid} exited with {a.p.returncode}" +
                                     self.dump(agents))

    def wait_workers(self, agents, n=4, timeout=30):
        """{global rank: pid} once the agents started n workers."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            started = [s for a in agents for s in a.started()]
            if len(started) >= n:
                pids = dict(started)
                self.assertEqual(sorted(pids), list(range(n)), f"ranks started: {started}")
                return pids
            self.check_running(agents)
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(started)} of {n} workers started within "
                                     f"{timeout * SLOW} s" + self.dump(agents))
            time.sleep(0.02)

    def wait_step(self, a0, step, agents, timeout=30):
        """Wait until rank 0 (under agent a0) reported step (or later); returns that step."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            steps = a0.steps()
            if steps and steps[-1] >= step:
                return steps[-1]
            self.check_running(agents)
            if time.monotonic() > deadline:
                raise AssertionError(f"rank 0 did not report step {step} within "
                                     f"{timeout * SLOW} s (last {steps[-1:]})" + self.dump(agents))
            time.sleep(0.01)

    def finish_job(self, agents, timeout=60):
        for a in agents:
            try:
                a.p.wait(timeout=timeout * SLOW)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"agent {a.pid} did not finish within {timeout * SLOW} s" +
                                     self.dump(agents))
            self.assertEqual(a.p.returncode, 0, "the job exits 0" + self.dump(agents))

    def checkpoints(self):
        return glob.glob(os.path.join(self.ckpt, "ckpt-*.bin"))

    def uninterrupted(self):
        """The reference: the same job (same options) with no fault; its done event."""
        if TestInplace.reference is None:
            agents = self.two_agents("ref", "--recovery", "inplace")
            self.finish_job(agents)
            objs = agents[0].rank0()
            done = [o for o in objs if o.get("event") == "done"]
            self.assertEqual(len(done), 1, objs)
            self.assertEqual(done[0]["step"], STEPS)
            self.assertEqual(done[0]["world"], 4)
            self.assertEqual([o for o in objs if o.get("event") in ("resumed", "reformed")], [])
            TestInplace.reference = done[0]
            # The next job must not resume from this one's checkpoints.
            for f in self.checkpoints():
                os.unlink(f)
        return TestInplace.reference

    def fault_point(self, a0, agents):
        """Rank 0 reported step HIT and a checkpoint exists (a restart would read it)."""
        self.wait_step(a0, HIT, agents)
        self.assertTrue(self.checkpoints(), "a checkpoint exists before the fault")

    def check_inplace(self, agents, pids, hit, replaced_by=None):
        """After the job: the survivors (pids of the ranks not in hit) ran to the end, only the
        hit ranks were started again (by replaced_by, default their own agent), the state came
        from a survivor, no checkpoint was read, and the result is the uninterrupted run's."""
        want = TestInplace.reference
        dump = self.dump(agents)
        survivors = [r for r in pids if r not in hit]
        exits = {}
        for a in agents:
            exits.update(a.exits())
        for r in survivors:
            self.assertEqual(exits.get(pids[r]), 0,
                             f"survivor rank {r} (pid {pids[r]}) ran to the end" + dump)
        started = [s for a in agents for s in a.started()]
        again = sorted(r for r, pid in started if pids.get(r) != pid)
        self.assertEqual(again, sorted(hit), "only the missing workers are started" + dump)
        for a in (replaced_by or []):
            self.assertEqual(sorted(r for r, _ in a.started()), sorted(hit), dump)
        for r, pid in started:
            if pids.get(r) != pid:
                self.assertEqual(exits.get(pid), 0, f"replacement rank {r} (pid {pid})" + dump)
        objs = agents[0].rank0()
        self.assertEqual([o for o in objs if o.get("event") == "resumed"], [],
                         "no checkpoint is read" + dump)
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertEqual(len(reformed), 1, f"{reformed}{dump}")
        self.assertEqual(reformed[0]["world"], 4)
        self.assertGreaterEqual(reformed[0]["step"], HIT - 1)
        self.assertIn(reformed[0]["source"], survivors, "a survivor sent the state")
        done = [o for o in objs if o.get("event") == "done"]
        self.assertEqual(len(done), 1, f"{objs}{dump}")
        self.assertEqual(done[0]["step"], want["step"])
        self.assertEqual(done[0]["steps"], want["steps"], "rank 0 trained every step itself")
        self.assertEqual(done[0]["world"], 4)
        self.assertAlmostEqual(done[0]["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]),
                               msg="the final loss equals the uninterrupted run's")

    # -- the cases --

    def test_1_worker_sigkill(self):
        self.uninterrupted()
        agents = self.two_agents("wkill", "--recovery", "inplace")
        pids = self.wait_workers(agents)
        self.fault_point(agents[0], agents)
        os.kill(pids[3], signal.SIGKILL)
        self.finish_job(agents)
        self.assertEqual(agents[1].exits().get(pids[3]), -signal.SIGKILL)
        self.check_inplace(agents, pids, [3])
        # rdzvd timed the recovery's phases, and they add up to its total.
        rec = re.findall(r"job=wkill: recovered from generation 1 \(failure, in place\) in "
                         r"([0-9.]+) s: stop ([0-9.]+) s, rendezvous ([0-9.]+) s, ranks and NCCL "
                         r"ids ([0-9.]+) s, first step ([0-9.]+) s", self.d.log())
        self.assertEqual(len(rec), 1, self.d.log()[-3000:])
        self.assertAlmostEqual(float(rec[0][0]), sum(float(x) for x in rec[0][1:]), delta=0.005)

    def test_2_worker_sigstop_progress_timeout(self):
        self.uninterrupted()
        agents = self.two_agents("wstop", "--recovery", "inplace", "--progress-timeout", str(PT))
        pids = self.wait_workers(agents)
        self.fault_point(agents[0], agents)
        self.addCleanup(kill_quietly, pids[3], signal.SIGCONT)
        os.kill(pids[3], signal.SIGSTOP)
        self.finish_job(agents)
        self.assertFalse(pid_alive(pids[3]), "the hung worker was killed")
        self.assertRegex(agents[1].log(), rf"worker rank 3 \(local rank 1\) made no progress for "
                                          rf"{PT}\.\d s after step \d+, stopped \(SIGSTOP\): "
                                          rf"failing it")
        self.assertNotRegex(agents[0].log(), r"failing it \(--progress-timeout\)",
                            "only the stopped worker is failed for its silence")
        self.check_inplace(agents, pids, [3])

    def test_3_agent_sigkill_spare_takes_over(self):
        self.uninterrupted()
        a, b = self.two_agents("akill", "--recovery", "inplace", nnodes="2:3")
        pids = self.wait_workers([a, b])
        mark = self.d.mark()
        spare = self.job_agent("akill", "--nnodes", "2:3", "--recovery", "inplace", name="c")
        self.d.wait_log(r"job=akill gen=\d+ node=\S+ joined .*waits for the next generation",
                        since=mark, timeout=15 * SLOW)
        self.assertEqual(spare.started(), [], "a spare starts no worker")
        self.fault_point(a, [a, b, spare])
        self.assertNotIn("done", [o.get("event") for o in a.rank0()], "the fault comes mid-run")
        os.kill(b.pid, signal.SIGKILL)
        self.assertEqual(self.wait_pids_gone([pids[2], pids[3]], 5.0 * SLOW), [],
                         "the SIGKILLed agent's workers die with it")
        self.finish_job([a, spare])
        self.assertEqual(b.p.wait(timeout=5), -signal.SIGKILL)
        self.check_inplace([a, b, spare], pids, [2, 3], replaced_by=[spare])

    def wait_reformed(self, a0, n, agents, timeout=30):
        """rank 0's first n "reformed" events, once it printed them."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            ev = [o for o in a0.rank0() if o.get("event") == "reformed"]
            if len(ev) >= n:
                return ev[:n]
            self.check_running(agents)
            if time.monotonic() > deadline:
                raise AssertionError(f"no re-forming #{n} within {timeout * SLOW} s" +
                                     self.dump(agents))
            time.sleep(0.01)

    def check_shrunk_and_grown(self, a, b, c, pids):
        """After a job whose node b was lost and node c joined: a's workers (ranks 0 and 1, pids)
        ran to the end, c started ranks 2 and 3, nothing was read from a checkpoint, and rank 0
        re-formed twice (world 2, then 4), the joining node getting a survivor's state.
        Returns rank 0's objects and the agents' logs."""
        dump = self.dump([a, b, c])
        exits = a.exits()
        for r in (0, 1):
            self.assertEqual(exits.get(pids[r]), 0, f"survivor rank {r} ran to the end" + dump)
        self.assertEqual(sorted(r for r, _ in a.started()), [0, 1], "no worker restarted" + dump)
        self.assertEqual(sorted(r for r, _ in c.started()), [2, 3], dump)
        objs = a.rank0()
        self.assertEqual([o for o in objs if o.get("event") == "resumed"], [],
                         "no checkpoint is read" + dump)
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertEqual([o["world"] for o in reformed], [2, 4], "shrink, then grow" + dump)
        self.assertIn(reformed[1]["source"], (0, 1), "the joining node got a survivor's state")
        return objs, dump

    def test_5_lost_node_shrinks_a_join_grows(self):
        want = self.uninterrupted()
        a, b = self.two_agents("shrink", "--recovery", "inplace", "--scale-up", "now",
                               nnodes="1:2")
        pids = self.wait_workers([a, b])
        self.fault_point(a, [a, b])
        os.kill(b.pid, signal.SIGKILL)
        shrunk = self.wait_reformed(a, 1, [a])[0]
        self.assertEqual(shrunk["world"], 2, "the world shrinks to the node left")
        self.assertIn(shrunk["source"], (0, 1))
        c = self.job_agent("shrink", "--nnodes", "1:2", "--recovery", "inplace", "--scale-up",
                           "now", name="c")
        self.finish_job([a, c])
        objs, dump = self.check_shrunk_and_grown(a, b, c, pids)
        done = [o for o in objs if o.get("event") == "done"]
        self.assertEqual(len(done), 1, f"{objs}{dump}")
        self.assertEqual((done[0]["step"], done[0]["steps"], done[0]["world"]),
                         (want["step"], want["steps"], 4))
        self.assertAlmostEqual(done[0]["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]),
                               msg="the same global batch and sample order at any world size")

    def test_6_lost_worker_leaves_a_child_behind(self):
        # One worker per node, each a shell that runs the trainer as its child (as a wrapper
        # script does). SIGKILLing the shell leaves the trainer in its process group holding its
        # output open: that agent has no worker running when the next ROUND comes, and its group
        # is still draining. It must start the rank again (killing what was left) in that one
        # generation, not fail "cannot start the workers" generation after generation.
        wrap = ["/bin/sh", "-c", '"$@" & echo "TRAINER=$!"; wait $!', "sh", *train_cmd(self.ckpt)]
        agents = [self.job_agent("wrap", "--nnodes", "2", "--node-rank", str(i), "--recovery",
                                 "inplace", name=f"w{i}", nproc="1", worker=wrap) for i in (0, 1)]
        pids = self.wait_workers(agents, n=2)
        self.wait_step(agents[0], HIT, agents)
        os.kill(pids[1], signal.SIGKILL)  # the shell; its trainer lives on in the group
        self.finish_job(agents)
        dump = self.dump(agents)
        for a in agents:
            self.assertNotIn("cannot start the workers", a.log(), dump)
        formed = re.findall(r"job=wrap gen=\d+ generation (\d+) formed", self.d.log())
        self.assertEqual(formed, ["1", "2"], "one re-forming for one lost worker" + dump)
        self.assertEqual(agents[0].exits().get(pids[0]), 0, "the survivor ran to the end" + dump)
        self.assertEqual(sorted(r for r, _ in agents[1].started()), [1, 1], dump)
        done = [o for o in agents[0].rank0() if o.get("event") == "done"]
        self.assertEqual([o["step"] for o in done], [STEPS], dump)

    def test_7_dropped_member_keeps_no_worker(self):
        # (Found by the in-place soak, seed 31337.) A member's agent stalls past the
        # heartbeat timeout; the job re-forms in place with the spare in its place. When the
        # stalled agent comes back, rdzvd tells it its generation is over and it rejoins as a
        # new member: its old workers must stop (they belong to no generation the job runs), not
        # wait as "survivors" to be reused, stale, when the node is placed again. The job runs
        # long (it is not the point here), so the old workers cannot end with it.
        hb = ["--heartbeat-timeout", "2"]
        worker = [("100000" if x == str(STEPS) else x) for x in train_cmd(self.ckpt)]
        a, b = [self.job_agent("drop", "--nnodes", "2:3", "--node-rank", str(i), "--recovery",
                               "inplace", *hb, name="ab"[i], worker=worker) for i in (0, 1)]
        pids = self.wait_workers([a, b])
        mark = self.d.mark()
        c = self.job_agent("drop", "--nnodes", "2:3", "--recovery", "inplace", *hb, name="c",
                           worker=worker)
        self.d.wait_log(r"job=drop gen=\d+ node=\S+ joined .*waits for the next generation",
                        since=mark, timeout=15 * SLOW)
        self.wait_step(a, 5, [a, b, c])
        self.addCleanup(kill_quietly, b.pid, signal.SIGCONT)
        os.kill(b.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 20 * SLOW
        while sorted(r for r, _ in c.started()) != [2, 3]:
            self.check_running([a, c])
            self.assertLess(time.monotonic(), deadline, "the spare took the stalled node's place"
                            + self.dump([a, b, c]))
            time.sleep(0.02)
        mark = self.d.mark()
        os.kill(b.pid, signal.SIGCONT)
        self.d.wait_log(r"job=drop gen=\d+ node=\S+ reconnected from generation 1 .*told to stop "
                        r"its workers", since=mark, timeout=15 * SLOW)
        gone = self.wait_pids_gone([pids[2], pids[3]], 5.0 * SLOW)
        dump = self.dump([a, b, c])
        self.assertEqual(gone, [], "the dropped node's old workers are stopped" + dump)
        self.check_running([a, b, c])
        self.assertTrue(all(pid_alive(pids[r]) for r in (0, 1)), "the job goes on" + dump)
        # READY goes out once the stopped workers' output has drained, just after their exit.
        deadline = time.monotonic() + 10 * SLOW
        ready = r"workers of generation 1 stopped; ready for the next round"
        while not re.search(ready, b.log()) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertRegex(b.log(), ready, self.dump([a, b, c]))
        self.assertNotRegex(b.log(), r"workers of generation 1 keep running", dump)
        self.assertEqual(sorted(r for r, _ in b.started()), [2, 3],
                         "the dropped node, a spare now, started nothing" + dump)

    def hit_three_times(self, run_id, *args):
        """A job of 2 x 2 rdzv-train workers (500 steps, a checkpoint every 100) whose rank 3 is
        SIGKILLed three times, 70 steps past a checkpoint (once rank 0 reported steps 170, 270
        and 370); it ends. Its agents, and the wall time the test saw from the first agent's
        start to the last one's exit."""
        cmd = train_cmd(self.ckpt)
        cmd[cmd.index("--steps") + 1] = "500"
        cmd[cmd.index("--ckpt-every") + 1] = "100"
        t0 = time.monotonic()
        agents = [self.job_agent(run_id, "--nnodes", "2", "--node-rank", str(i), *args,
                                 name="ab"[i], worker=cmd) for i in (0, 1)]
        self.wait_workers(agents)
        for k, step in enumerate((170, 270, 370)):
            deadline = time.monotonic() + 30 * SLOW
            while len([p for r, p in agents[1].started() if r == 3]) <= k:  # started again
                self.check_running(agents)
                self.assertLess(time.monotonic(), deadline, self.dump(agents))
                time.sleep(0.01)
            self.wait_step(agents[0], step, agents)
            pid = [p for r, p in agents[1].started() if r == 3][-1]
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30 * SLOW
            while pid not in agents[1].exits():
                self.check_running(agents)
                self.assertLess(time.monotonic(), deadline, self.dump(agents))
                time.sleep(0.01)
        self.finish_job(agents)
        return agents, time.monotonic() - t0

    def check_cost(self, agents, measured_s, redo):
        """Every agent's last lines say what failures cost the job, the same
        figures on each: 3 recoveries, each failure detected at once (a kill is seen in ms), the
        parts adding up to the wall time (within the printed tenths), the wall time the test
        measured (within a second), and time redoing steps only after restarts from a
        checkpoint."""
        dump = self.dump(agents)
        lines = []
        for a in agents:
            tail = a.log().strip().splitlines()[-3:]
            found = [m for m in map(COST_RE.search, tail) if m]
            self.assertEqual(len(found), 1, "the cost among the last lines" + dump)
            lines.append(found[0].groups())
        self.assertEqual(len(set(lines)), 1, "the same figures on every agent" + dump)
        print(f"# cost: {found[0].group(0)} (the test measured {measured_s:.1f} s)", flush=True)
        wall, startup, trained, redone, n, lost, detect, *phases = lines[0]
        wall, startup, trained, lost, detect = map(float, (wall, startup, trained, lost, detect))
        phases = [float(x) for x in phases]
        self.assertEqual(int(n), 3, dump)
        self.assertAlmostEqual(startup + trained + lost, wall, delta=0.15, msg=dump)
        self.assertAlmostEqual(detect + sum(phases), lost, delta=0.25, msg=dump)
        self.assertAlmostEqual(wall, measured_s, delta=1.0, msg=dump)
        self.assertLess(detect, 1.0, dump)
        if redo:  # a restarted worker starts a process and loads a checkpoint before its step
            self.assertGreater(phases[3], 0, "the next generation's first step took time" + dump)
        else:  # in place the workers run on: the three first steps can sum under 0.05 s
            self.assertGreaterEqual(phases[3], 0, dump)
        if redo:
            self.assertIsNotNone(redone, "a restart from a checkpoint redid steps" + dump)
            # 70 steps past a checkpoint, three times (rdzvd sees the steps the workers had
            # reached when they failed: their agents send them then)
            self.assertGreater(float(redone), 0.3, dump)
        else:
            self.assertIsNone(redone, "in place, no step is done twice" + dump)
        return wall, lost

    def test_8_what_failures_cost_a_restarted_job(self):
        agents, measured = self.hit_three_times("cost-restart", "--recovery", "restart")
        self.check_cost(agents, measured, redo=True)

    def test_9_what_failures_cost_a_job_in_place(self):
        agents, measured = self.hit_three_times("cost-inplace", "--recovery", "inplace")
        self.check_cost(agents, measured, redo=False)

    def test_4_hang_without_progress_timeout_stays_stuck(self):
        agents = self.two_agents("hang", "--recovery", "inplace")
        pids = self.wait_workers(agents)
        self.fault_point(agents[0], agents)
        self.addCleanup(kill_quietly, pids[3], signal.SIGCONT)
        os.kill(pids[3], signal.SIGSTOP)
        time.sleep(1.0)  # a step in flight may still be reported
        steps, started = agents[0].steps(), sum(len(a.started()) for a in agents)
        self.assertLess(steps[-1], STEPS, "the job had not finished when the worker stopped")
        time.sleep(HANG_BOUND)
        self.check_running(agents)
        self.assertEqual(agents[0].steps(), steps,
                         f"no progress in {HANG_BOUND} s after a worker stopped")
        self.assertEqual(sum(len(a.started()) for a in agents), started, "no worker started")
        self.assertTrue(all(pid_alive(pid) for pid in pids.values()), "no worker killed")
        for a in agents:
            self.assertNotRegex(a.log(), r"made no progress|failing it")
        # Still stuck: the test ends it. The agents' workers die with them.
        for a in agents:
            os.kill(a.pid, signal.SIGKILL)
        kill_quietly(pids[3], signal.SIGCONT)
        for a in agents:
            self.assertEqual(a.p.wait(timeout=5), -signal.SIGKILL)
        self.assertEqual(self.wait_pids_gone(list(pids.values()), 5.0 * SLOW), [])


if __name__ == "__main__":
    main()
