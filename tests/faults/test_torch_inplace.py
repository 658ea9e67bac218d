# SPDX-License-Identifier: Apache-2.0
"""Recovery in place for a PyTorch script:
examples/autoencoder.py (DDP, gloo, rdzv.torch, checkpoints every 20 steps) under 2 agents x 2
workers against a real rdzvd, Debian's torch 1.13. Faults once rank 0 reported step 40 (of 100):
  (a) a worker SIGKILLed; (b) a worker SIGSTOPped with --progress-timeout 2 (the agent fails it
  and says it was stopped); (c) an agent SIGKILLed with a spare waiting (--nnodes 2:3): the
  spare's two new workers receive the state; (d) a node lost with no spare (--nnodes 1:2): the
  world shrinks to 2, then a node that joins (--scale-up now) grows it back to 4.
In each: the workers not hit are the same processes to the end, only the missing ones are started,
they receive the state from a survivor (rank 0's "reformed" event; no "resumed": no checkpoint is
read), every agent not killed exits 0, and the step count and final loss equal an uninterrupted
run's (REL; in (d) the global batch and the sample order do not depend on the world size, so the
losses differ only by the order of floating-point sums). The same script, unchanged, under
--recovery restart (it resumes from the step-40 checkpoint and ends with the same loss) and under
torchrun 1.13. A plain DDP script (no rdzv.torch) under --recovery inplace restarts its
generation."""
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import test_inplace_faults as ipf
from faulttest import AGENT, FAST, FaultTestCase, free_port, kill_quietly, main, pid_alive, \
    rdzvtest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "examples", "autoencoder.py")
PYTHON = "/usr/bin/python3"
STEPS = 100
HIT = 40
REL = 1e-4
EXIT_S = 20  # from rank 0's done event to every worker's exit


@functools.lru_cache(maxsize=None)  # one import per run (2-3 s), not one per case
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
    wait_reformed = ipf.TestInplace.wait_reformed
    check_shrunk_and_grown = ipf.TestInplace.check_shrunk_and_grown

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

    def agent(self, run_id, i, *args, nnodes="2", name=None, env=None, wrap=(), worker=None):
        """Agent i (node rank i; None: a spare or a joining node, no --node-rank) of a job;
        env is added to its environment, wrap goes before the worker's command (worker, default
        the autoencoder's)."""
        rank = ["--node-rank", str(i)] if isinstance(i, int) else []
        name = name or f"{run_id}{i}"
        # Each agent is a node of its own host (--host NAME), as on a cluster.
        cmd = [AGENT, "--endpoint", self.ep, "--rdzv-id", run_id, *FAST, "--nproc", "2",
               "--nnodes", nnodes, *rank, "--max-restarts", "3", "--host", name, *args, "--",
               *wrap, *(worker or self.worker())]
        out, err = (os.path.join(self.dir, f"{name}.{s}") for s in ("out", "err"))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(cmd, env=dict(ipf.agent_env(), **(env or {})),
                                 stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                 start_new_session=True)
        rdzvtest.track(p, group=True)
        self.addCleanup(self._reap, p)
        a = ipf.Agent(p, out, err)
        self.agents.append(a)
        return a

    def finish_job(self, agents, timeout=60):
        """Every agent exits 0 within timeout; a worker still running EXIT_S after rank 0's
        done event fails the test at once, named with where its threads are (it hangs on its
        way out: the job would never end)."""
        deadline = time.monotonic() + timeout * ipf.SLOW
        done_at = None
        while any(a.p.poll() is None for a in agents):
            now = time.monotonic()
            if done_at is None and any(o.get("event") == "done" for a in agents
                                       for o in a.rank0()):
                done_at = now
            if done_at is not None and now - done_at > EXIT_S * ipf.SLOW:
                for a in agents:
                    exits = a.exits()
                    for rank, pid in a.started():
                        if pid not in exits and pid_alive(pid):
                            raise AssertionError(
                                f"worker rank {rank} (pid {pid}) still runs {now - done_at:.0f}"
                                f" s after rank 0's done event: it hangs on its way out; its "
                                f"threads {rdzvtest.native_stacks(pid)}" + self.dump(agents))
            if now > deadline:
                raise AssertionError(f"the agents did not finish within {timeout * ipf.SLOW} s"
                                     + self.dump(agents))
            time.sleep(0.05)
        for a in agents:
            self.assertEqual(a.p.returncode, 0, "the job exits 0" + self.dump(agents))

    def two(self, run_id, *args, nnodes="2"):
        return [self.agent(run_id, i, *args, nnodes=nnodes) for i in (0, 1)]

    def done(self, a):
        d = [o for o in a.rank0() if o.get("event") == "done"]
        self.assertEqual(len(d), 1, a.rank0())
        return d[0]

    def uninterrupted(self):
        """The reference: the same script and options, uninterrupted, as one process (env://,
        world 1; test_6 runs it so): the global batch and the sample order do not depend on the
        world size (test_4), so a 2 x 2 job's final loss is its own up to the order of
        floating-point sums (bit-equal, as measured with torch 1.13 and 2.6)."""
        if TorchInplace.reference is None:
            env = dict(ipf.agent_env(), RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(free_port()))
            p = subprocess.run(self.worker(), env=env, capture_output=True, text=True,
                               timeout=120 * ipf.SLOW)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            d = [json.loads(ln) for ln in p.stdout.splitlines() if '"event": "done"' in ln]
            self.assertEqual(len(d), 1, p.stdout[-3000:])
            d = d[0]
            self.assertEqual((d["step"], d["steps"], d["world"]), (STEPS, STEPS, 1))
            TorchInplace.reference = d
            shutil.rmtree(self.ckpt)
            os.mkdir(self.ckpt)
        return TorchInplace.reference

    def check_inplace(self, agents, pids, hit, replaced_by=None):
        """The survivors (the ranks of pids not in hit) ran to the end, only the hit ranks were
        started again (by replaced_by, default their own agent) and exited 0, the state came
        from a survivor, no checkpoint was read, the result is the uninterrupted run's."""
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
        # A stopped Python worker that dumps its stacks (rdzv.torch) is named with its frame.
        self.assertRegex(agents[1].log(), r"worker rank 3 \(local rank 1\) made no progress for "
                                          r"2\.\d s after step \d+, in \S+ \(\S+:\d+\), "
                                          r"stopped \(SIGSTOP\)")
        self.check_inplace(agents, pids, [3])

    def test_3_agent_sigkill_spare_takes_over(self):
        self.uninterrupted()
        a, b = self.two("akill", "--recovery", "inplace", nnodes="2:3")
        pids = self.wait_workers([a, b])
        mark = self.d.mark()
        spare = self.agent("akill", None, "--recovery", "inplace", nnodes="2:3")
        self.d.wait_log(r"job=akill gen=\d+ node=\S+ joined .*waits for the next generation",
                        since=mark, timeout=30)
        self.assertEqual(spare.started(), [], "a spare starts no worker")
        self.wait_step(a, HIT, [a, b, spare], timeout=60)
        self.assertNotIn("done", [o.get("event") for o in a.rank0()], "the fault comes mid-run")
        os.kill(b.pid, signal.SIGKILL)
        self.assertEqual(self.wait_pids_gone([pids[2], pids[3]], 10.0), [],
                         "the SIGKILLed agent's workers die with it")
        self.finish_job([a, spare], timeout=120)
        self.assertEqual(b.p.wait(timeout=5), -signal.SIGKILL)
        self.check_inplace([a, b, spare], pids, [2, 3], replaced_by=[spare])

    def test_4_lost_node_shrinks_a_join_grows(self):
        want = self.uninterrupted()
        a, b = self.two("shrink", "--recovery", "inplace", "--scale-up", "now", nnodes="1:2")
        pids = self.wait_workers([a, b])
        self.wait_step(a, HIT, [a, b], timeout=60)
        os.kill(b.pid, signal.SIGKILL)
        shrunk = self.wait_reformed(a, 1, [a], timeout=60)[0]
        self.assertEqual(shrunk["world"], 2, "the world shrinks to the node left")
        self.assertIn(shrunk["source"], (0, 1))
        # The join comes while the world of 2 trains (not after its last step).
        self.assertNotIn("done", [o.get("event") for o in a.rank0()])
        c = self.agent("shrink", None, "--recovery", "inplace", "--scale-up", "now",
                       nnodes="1:2")
        self.finish_job([a, c], timeout=120)
        objs, dump = self.check_shrunk_and_grown(a, b, c, pids)
        self.assertEqual(sorted(c.exits().values()), [0, 0], "the joined workers exit 0" + dump)
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertGreaterEqual(reformed[1]["step"], reformed[0]["step"])
        d = self.done(a)
        self.assertEqual((d["step"], d["world"]), (want["step"], 4))
        self.assertIn(d["steps"], (STEPS - 1, STEPS),
                      "rank 0 trained every step at most once, all but one itself" + dump)
        self.assertAlmostEqual(d["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]),
                               msg="the same global batch and sample order at any world size" +
                               dump)

    def test_7_the_job_moved_on_before_the_survivors_joined(self):
        """A bad node put aside, with this script: the bad node's workers die 0.3 s after they
        start, long before the good node's have imported torch, so the job moves on twice (the
        second time with the spare) while those are still starting. None of them has said yet
        that it follows the control channel (rdzv.torch's Job says it once made), so each
        failure restarts the good node's workers with the generation (rdzv.torch's own wait for
        the newest generation is test_8's). The spare's run with them, the bad node's agent exits
        69, and the result is
        the uninterrupted run's (nobody held a state: a fresh start)."""
        want = self.uninterrupted()
        wrap = ["/bin/sh", "-c", 'if [ -n "$RDZV_TEST_BAD" ]; then sleep 0.3; exit 3; fi; '
                                 'exec "$@"', "worker"]
        mark = self.d.mark()
        bad = self.agent("moved", None, "--recovery", "inplace", name="bad", wrap=wrap,
                         env={"RDZV_TEST_BAD": "1"})
        self.d.wait_log(r"job=moved .*joined", since=mark, timeout=30)
        good = self.agent("moved", None, "--recovery", "inplace", name="good", wrap=wrap)
        self.d.wait_log(r"job=moved gen=1 generation 1 formed", since=mark, timeout=30)
        spare = self.agent("moved", None, "--recovery", "inplace", name="spare", wrap=wrap)
        self.d.wait_log(r"job=moved gen=\d+ node=\S+ put aside", since=mark, timeout=30)
        self.assertEqual(bad.p.wait(timeout=30 * ipf.SLOW), 69, self.dump([bad, good, spare]))
        self.finish_job([good, spare], timeout=120)
        dump = self.dump([bad, good, spare])
        self.assertEqual(len(good.started()), 6,
                         "the good node's workers started in each of the 3 generations" + dump)
        self.assertEqual(good.log().count("has said it follows rdzv's control channel"), 1, dump)
        self.assertEqual(sorted(v for v in good.exits().values() if v == 0), [0, 0], dump)
        self.assertEqual(len(spare.started()), 2, dump)
        # Two failures put it aside: each of its two ranks started at most twice (in place, the
        # second failure may be the other rank's first).
        self.assertIn(len(bad.started()), (3, 4), dump)
        first = self.d.find_log(r"job=moved gen=3 generation 3 formed")
        self.assertIsNotNone(first, "generation 3 formed (the spare's)" + dump)
        self.assertEqual([o for o in good.rank0() + spare.rank0()
                          if o.get("event") in ("resumed", "reformed")], [], dump)
        d = self.done(good if good.rank0() else spare)
        self.assertEqual((d["step"], d["steps"], d["world"]), (STEPS, STEPS, 4), dump)
        self.assertAlmostEqual(d["final_loss"], want["final_loss"],
                               delta=REL * abs(want["final_loss"]), msg=dump)

    def test_8_a_gone_store_is_not_waited_on(self):
        """The control channel names generation 2, whose store is gone (its generation failed
        while this rank imported torch: nobody listens on its port), and a second later
        generation 3: the rank joins 3 at once. Before, torch's client tried 2's port for its
        whole 60 s timeout (test_7 took 70 s now and then, with the good node's ranks)."""
        gone = free_port()
        r, w = os.pipe()
        self.addCleanup(os.close, w)

        def line(gen, port):
            return json.dumps({"op": "generation", "generation": gen, "rank": 0,
                               "world_size": 1, "master_addr": "127.0.0.1", "master_port": port,
                               "restart_count": gen - 1, "local_rank": 0}).encode() + b"\n"
        os.write(w, line(2, gone))
        code = ("import sys; sys.path.insert(0, %r); "
                "import rdzv.torch as rt, torch.distributed as dist; "
                "print('imported', flush=True); job = rt.init('gloo'); "
                "print('joined', job.generation, dist.get_world_size(), flush=True); "
                "dist.destroy_process_group()" % os.path.join(HERE, "..", "..", "python"))
        env = dict(ipf.agent_env(), RDZV_CONTROL_FD=str(r), RDZV_GENERATION="1", RANK="0",
                   WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(gone), TORCHELASTIC_USE_AGENT_STORE="True")
        p = subprocess.Popen([PYTHON, "-c", code], env=env, pass_fds=(r,),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rdzvtest.track(p)
        os.close(r)
        # torch imported: it reads generation 2 at once and tries its port; 3 comes after.
        self.assertEqual(p.stdout.readline(), b"imported\n", p.stderr.read().decode()[-2000:]
                         if p.poll() is not None else "")
        time.sleep(1)
        os.write(w, line(3, self.d.port))  # rdzvd's own port serves TCPStore: the new store
        try:
            out, err = p.communicate(timeout=30 * ipf.SLOW)
        except subprocess.TimeoutExpired:
            kill_quietly(p.pid)
            out, err = p.communicate()
            self.fail("the rank waited on generation 2's store: %s" % err.decode()[-2000:])
        self.assertEqual(p.returncode, 0, err.decode()[-2000:])
        self.assertEqual(out.decode().split(), ["joined", "3", "1"], err.decode()[-2000:])
        self.assertNotIn("timed out", err.decode())

    def test_9_a_plain_ddp_script_restarts_its_generation(self):
        """--recovery inplace with a DDP script that does not use rdzv.torch. A
        worker SIGKILLed at step 5: its survivors cannot re-form (they never said "control" on
        the progress channel), so both agents restart the whole generation, as --recovery
        restart does, and each says why, once; the job ends. Before, the survivors were kept:
        one crashed on its lost peer, the next generation mixed an old worker with new ones,
        and nothing was printed until the gloo timeout."""
        plain = [PYTHON, os.path.join(HERE, "plain_ddp.py"), "30"]
        agents = [self.agent("plain", i, "--recovery", "inplace", worker=plain) for i in (0, 1)]
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], 5, agents, timeout=60)
        os.kill(pids[3], signal.SIGKILL)
        self.finish_job(agents, timeout=60)
        dump = self.dump(agents)
        for a in agents:
            log = a.log()
            self.assertEqual(log.count("has said it follows rdzv's control channel"), 1, dump)
            self.assertNotIn("keep running (--recovery inplace)", log, dump)
            self.assertNotIn("re-forming in place", log, dump)
        started = [s for a in agents for s in a.started()]
        self.assertEqual(sorted(r for r, _ in started), [0, 0, 1, 1, 2, 2, 3, 3],
                         "every rank started again" + dump)
        self.assertNotIn(pids[0], [pid for r, pid in started[1:] if r == 0], dump)
        d = self.done(agents[0])
        self.assertEqual((d["step"], d["world"], d["restart"]), (30, 4, 1), dump)

    def test_10_in_place_through_the_store_fronts(self):
        """--recovery inplace with --store-front: each generation has a front
        of its own, and the control channel names it to the survivors, as it names the store
        without one. A worker SIGKILLed at step 40: the survivors re-form through the new
        generation's fronts, with the checks of test_1. Before, the two were refused together."""
        self.uninterrupted()
        agents = self.two("wkfront", "--recovery", "inplace", "--store-front")
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], HIT, agents, timeout=60)
        os.kill(pids[3], signal.SIGKILL)
        self.finish_job(agents, timeout=120)
        self.check_inplace(agents, pids, [3])
        dump = self.dump(agents)
        for a in agents:
            log = a.log()
            self.assertRegex(log, r"gen=1 .*store front for generation 1 on 127\.0\.0\.1:", dump)
            self.assertRegex(log, r"gen=2 .*store front for generation 2 on 127\.0\.0\.1:", dump)
            self.assertIn("in place: ", log, dump)
            # generation 2's front's counts (the last): each of its 2 workers, survivor or
            # replacement, made 2 store connections or more there (rdzv.torch's look at the
            # store, then its TCPStore): a survivor that went to the store directly leaves it
            # under 4
            served = re.findall(r"gen=(\d+) .*store front: (\d+) worker connections", log)
            self.assertEqual([g for g, _ in served], ["1", "2"], dump)
            self.assertGreaterEqual(int(served[-1][1]), 4, dump)

    def test_5_the_same_script_restarts_from_its_checkpoint(self):
        want = self.uninterrupted()
        agents = self.two("restart", "--recovery", "restart")
        pids = self.wait_workers(agents)
        self.wait_step(agents[0], HIT, agents, timeout=60)
        # Rank 0 prints its step, then saves the checkpoint: the kill waits for the file, or a
        # loaded machine's restart may stop rank 0 before it is whole.
        ckpt = os.path.join(self.ckpt, "ckpt-%08d.pt" % HIT)
        deadline = time.monotonic() + 30
        while not os.path.exists(ckpt):
            self.assertLess(time.monotonic(), deadline, "no checkpoint of step %d" % HIT)
            time.sleep(0.01)
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

    def test_6_the_same_script_under_torchrun(self):
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
                            "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
                            "--monitor_interval", "0.5", SCRIPT,
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
