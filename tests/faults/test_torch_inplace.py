# SPDX-License-Identifier: Apache-2.0
"""Recovery in place for a PyTorch script (issue 19, proof (a), (b) and the unchanged script):
examples/autoencoder.py (DDP, gloo, rdzv.torch, checkpoints every 20 steps) under 2 agents x 2
workers against a real rdzvd, Debian's torch 1.13. Faults once rank 0 reported step 60:
  (a) a worker SIGKILLed; (b) a worker SIGSTOPped with --progress-timeout 2 (the agent fails it
  and says it was stopped).
In each: the workers not hit are the same processes to the end, only the hit one is started
again, it receives the state from a survivor (rank 0's "reformed" event; no "resumed": no
checkpoint is read), every agent exits 0, and the step count and final loss equal an
uninterrupted run's (REL). The same script, unchanged, under --recovery restart (it resumes from
the step-60 checkpoint and ends with the same loss) and under torchrun 1.13."""
import os
import shutil
import signal
import subprocess
import sys

import test_inplace_faults as ipf
from faulttest import AGENT, FAST, FaultTestCase, free_port, kill_quietly, main, rdzvtest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "examples", "autoencoder.py")
PYTHON = "/usr/bin/python3"
STEPS = 200
HIT = 60
REL = 1e-4


def have_torch():
    return subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True,
                          timeout=120).returncode == 0


class TorchInplace(FaultTestCase):
    reference = None

    # The harness of test_inplace_faults.py (rdzv-train's), with this script as the worker.
    check_running = ipf.TestInplace.check_running
    dump = ipf.TestInplace.dump
    wait_workers = ipf.TestInplace.wait_workers
    wait_step = ipf.TestInplace.wait_step
    finish_job = ipf.TestInplace.finish_job

    def setUp(self):
        super().setUp()
        if not os.access(PYTHON, os.X_OK) or not have_torch():
            self.skipTest("needs Debian's python3-torch")
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.mkdir(self.ckpt)
        self.start_daemon()

    def worker(self):
        return [PYTHON, SCRIPT, "--steps", str(STEPS), "--lr", "2e-4", "--ckpt-dir", self.ckpt,
                "--ckpt-every", "20", "--log-every", "1"]

    def agent(self, run_id, i, *args):
        cmd = [AGENT, "--endpoint", self.ep, "--rdzv-id", run_id, *FAST, "--nproc", "2",
               "--nnodes", "2", "--node-rank", str(i), "--max-restarts", "3", *args, "--",
               *self.worker()]
        out, err = (os.path.join(self.dir, f"{run_id}{i}.{s}") for s in ("out", "err"))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(cmd, env=ipf.agent_env(), stdin=subprocess.DEVNULL, stdout=fo,
                                 stderr=fe, start_new_session=True)
        rdzvtest.track(p, group=True)
        self.addCleanup(self._reap, p)
        a = ipf.Agent(p, out, err)
        self.agents.append(a)
        return a

    def two(self, run_id, *args):
        return [self.agent(run_id, i, *args) for i in (0, 1)]

    def done(self, a):
        d = [o for o in a.rank0() if o.get("event") == "done"]
        self.assertEqual(len(d), 1, a.rank0())
        return d[0]

    def uninterrupted(self):
        if TorchInplace.reference is None:
            agents = self.two("ref", "--recovery", "inplace")
            self.finish_job(agents)
            d = self.done(agents[0])
            self.assertEqual((d["step"], d["steps"], d["world"]), (STEPS, STEPS, 4))
            TorchInplace.reference = d
            shutil.rmtree(self.ckpt)
            os.mkdir(self.ckpt)
        return TorchInplace.reference

    def check_inplace(self, agents, pids, hit):
        want = TorchInplace.reference
        dump = self.dump(agents)
        exits = {}
        for a in agents:
            exits.update(a.exits())
        for r in (r for r in pids if r not in hit):
            self.assertEqual(exits.get(pids[r]), 0, f"survivor rank {r} ran to the end" + dump)
        started = [s for a in agents for s in a.started()]
        self.assertEqual(sorted(r for r, pid in started if pids.get(r) != pid), sorted(hit),
                         "only the missing workers are started" + dump)
        objs = agents[0].rank0()
        self.assertEqual([o for o in objs if o.get("event") == "resumed"], [],
                         "no checkpoint is read" + dump)
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertEqual(len(reformed), 1, f"{reformed}{dump}")
        self.assertEqual(reformed[0]["world"], 4)
        self.assertGreaterEqual(reformed[0]["step"], HIT)
        self.assertNotIn(reformed[0]["source"], hit, "a survivor sent the state")
        d = self.done(agents[0])
        self.assertEqual((d["step"], d["world"]), (want["step"], 4))
        # A rank may finish the all-reduce of the step in flight while a peer waits on the lost
        # one: the agreement then gives rank 0 that newer state, and it trains one step less.
        self.assertIn(d["steps"], (STEPS - 1, STEPS),
                      "rank 0 trained every step at most once, all but one itself" + dump)
        self.assertAlmostEqual(d["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]),
                               msg="the final loss equals the uninterrupted run's" + dump)

    def test_1_worker_sigkill(self):
        self.uninterrupted()
        agents = self.two("wkill", "--recovery", "inplace")
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], HIT, agents, timeout=60)
        os.kill(pids[3], signal.SIGKILL)
        self.finish_job(agents, timeout=120)
        self.assertEqual(agents[1].exits().get(pids[3]), -signal.SIGKILL)
        self.check_inplace(agents, pids, [3])

    def test_2_worker_sigstop_progress_timeout(self):
        self.uninterrupted()
        agents = self.two("wstop", "--recovery", "inplace", "--progress-timeout", "2")
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], HIT, agents, timeout=60)
        self.addCleanup(kill_quietly, pids[3], signal.SIGCONT)
        os.kill(pids[3], signal.SIGSTOP)
        self.finish_job(agents, timeout=120)
        self.assertRegex(agents[1].log(), r"worker rank 3 \(local rank 1\) made no progress for "
                                          r"2\.\d s after step \d+, stopped \(SIGSTOP\)")
        self.check_inplace(agents, pids, [3])

    def test_3_the_same_script_restarts_from_its_checkpoint(self):
        want = self.uninterrupted()
        agents = self.two("restart", "--recovery", "restart")
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], HIT, agents, timeout=60)
        os.kill(pids[3], signal.SIGKILL)
        self.finish_job(agents, timeout=120)
        objs = agents[0].rank0()
        resumed = [o for o in objs if o.get("event") == "resumed"]
        self.assertEqual(len(resumed), 1, objs)
        self.assertGreaterEqual(resumed[0]["step"], HIT)
        d = self.done(agents[0])
        self.assertEqual((d["step"], d["world"]), (STEPS, 4))
        self.assertAlmostEqual(d["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]))

    def test_4_the_same_script_under_torchrun(self):
        torchrun = shutil.which("torchrun")
        if not torchrun:
            self.skipTest("no torchrun")
        env = {k: v for k, v in ipf.agent_env().items() if k != "ASAN_OPTIONS"}
        # --redirects/--tee: Debian's torchrun 1.13 fails on its defaults under Python 3.11
        # (test_torchrun.py does the same)
        # (not --standalone: that is always localhost:29400, which another rdzvd may hold)
        p = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--nnodes", "1",
                            "--rdzv_backend", "c10d", "--rdzv_endpoint",
                            "127.0.0.1:%d" % free_port(), "--rdzv_id", "torchrun-example",
                            "--nproc_per_node", "2", "--redirects", "1", "--tee", "1", SCRIPT,
                            "--steps", "30"],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertRegex(p.stdout, r'"event": "done", "step": 30, "steps": 30, "world": 2')
        # and alone: one process, no launcher (env:// from the environment)
        env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()))
        p = subprocess.run([PYTHON, SCRIPT, "--steps", "10"], capture_output=True, text=True,
                           timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertRegex(p.stdout, r'"event": "done", "step": 10, "steps": 10, "world": 1')


if __name__ == "__main__":
    sys.exit(main())
