# SPDX-License-Identifier: Apache-2.0
"""Worker faults against real agents and a real rdzvd: a worker exits non-zero, is SIGKILLed from
outside, or dies while a gloo peer is blocked in a collective -> the job restarts in a new
generation and completes; past --max-restarts every node fails with the same root cause."""
import json
import os
import re
import signal
import time

from faulttest import FaultTestCase, finish, kill_quietly, main

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


class TestWorkerFaults(FaultTestCase):
    def test_worker_exit_1_restarts_with_restart_count_1_everywhere(self):
        self.start_daemon()
        env = {"FAULT_CRASH": "1:1", "FAULT_CRASH_AFTER_MS": "300"}
        ps = [self.agent("exit1", "--nnodes", "2", "--nproc", "2", "--max-restarts", "2",
                         "--nccl", "auto", env=env) for _ in range(2)]
        self.wait_starts(2, 4, agents=ps)
        crash = self.events("crash")
        self.assertEqual(len(crash), 1, self.events())
        self.assertEqual((crash[0].gen, crash[0].rank), (1, 1))
        gen1 = self.assert_generation(1, 4, nnodes=2, restart=0)
        gen2 = self.assert_generation(2, 4, nnodes=2, restart=1)
        took = max(e.t for e in gen2) - crash[0].t
        self.assertLess(took, 5.0, "crash -> every replacement worker started")
        # Every gen-1 worker was stopped before any gen-2 worker started.
        self.assertLess(max(e.t for e in gen1), min(e.t for e in gen2))
        e1, e2 = self.env_of(1, 0), self.env_of(2, 0)
        self.assertNotEqual(e1["MASTER_PORT"], e2["MASTER_PORT"], "a new store per generation")
        if "RDZV_NCCL_UNIQUE_ID" in e1:
            self.assertNotEqual(e1["RDZV_NCCL_UNIQUE_ID"], e2["RDZV_NCCL_UNIQUE_ID"],
                                "a fresh NCCL id per generation")
            self.assertEqual({self.env_of(2, r)["RDZV_NCCL_UNIQUE_ID"] for r in range(4)},
                             {e2["RDZV_NCCL_UNIQUE_ID"]})
        self.release()
        self.finish_all(ps, 0)
        self.d.wait_log(r"job=exit1 gen=\d+ restarting generation 1 \(restart 1 of 2\): "
                        r"root cause: "
                        r"worker rank 1 \(local rank 1\) on node rank 0 .* exited with code 1")
        self.d.wait_log(r"job=exit1 gen=\d+ generation 2 succeeded")

    def test_worker_sigkilled_from_outside_restarts(self):
        self.start_daemon()
        ps = [self.agent("kill9", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1")
              for _ in range(2)]
        self.wait_starts(1, 4, agents=ps)
        victim = self.worker_pid(1, 2)
        t0 = time.time()
        os.kill(victim, signal.SIGKILL)
        gen2 = self.wait_starts(2, 4, agents=ps)
        self.assertLess(max(e.t for e in gen2) - t0, 5.0, "SIGKILL -> every replacement started")
        self.assertEqual(self.wait_pids_gone([self.worker_pid(1, r) for r in range(4)], 1), [],
                         "every worker of generation 1 is gone")
        self.assert_generation(2, 4, restart=1)
        self.release()
        errs = self.finish_all(ps, 0)
        self.assertTrue(any(re.search(r"worker rank 2 \(local rank 0, pid \d+\) was killed by "
                                      r"signal 9", e)
                            for e in errs), "the victim's agent logs the signal")
        # Every agent says the root cause, the victim's too (not only the signal).
        for e in errs:
            self.assertRegex(e, r"restarting: root cause: worker rank 2 \(local rank 0\) on node "
                                r"rank \d \(\S+\) was killed by signal 9", e[-3000:])
        self.d.wait_log(r"job=kill9 gen=\d+ restarting generation 1 \(restart 1 of 1\): "
                        r"root cause: "
                        r"worker rank 2 .* was killed by signal 9")

    def test_gloo_worker_blocked_in_allreduce_when_its_peer_dies(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("PyTorch is not installed for /usr/bin/python3")
        self.start_daemon()
        worker = ["/usr/bin/python3", os.path.join(SCRIPTS, "gloo_block.py"), self.dir]
        ps = [self.agent("gloo", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1",
                         "--node-rank", str(i), worker=worker, env={"VICTIM": "3"})
              for i in (0, 1)]
        deadline = time.monotonic() + 120
        want = ["victim.pid"] + [f"blocked.{r}" for r in (0, 1, 2)]
        while not all(os.path.exists(os.path.join(self.dir, f)) for f in want):
            self.assertLess(time.monotonic(), deadline, f"gloo workers did not get going: "
                                                        f"{os.listdir(self.dir)}")
            for p in ps:
                if p.poll() is not None:
                    self.fail(f"agent exited early:\n{finish(p)[2][-3000:]}")
            time.sleep(0.05)
        time.sleep(0.5)  # let the others enter all_reduce
        blocked = []
        for r in (0, 1, 2):
            with open(os.path.join(self.dir, f"blocked.{r}")) as f:
                blocked.append(int(f.read()))
        with open(os.path.join(self.dir, "victim.pid")) as f:
            victim = int(f.read())
        mark = self.d.mark()
        t0 = time.monotonic()
        kill_quietly(victim, signal.SIGKILL)
        self.d.wait_log(r"job=gloo gen=\d+ generation 2 formed: 2 nodes, world size 4", since=mark,
                        timeout=15)
        # The blocked workers were stopped (TERM, then KILL after --grace 2), not waited for.
        self.assertLess(time.monotonic() - t0, 8.0, "SIGKILL of a peer -> generation 2 formed")
        self.assertEqual(self.wait_pids_gone(blocked, 1), [])
        for p in ps:
            rc, _, err = finish(p, timeout=180)
            self.assertEqual(rc, 0, err[-4000:])
        res = []
        for r in range(4):
            with open(os.path.join(self.dir, f"result.{r}.json")) as f:
                res.append(json.load(f))
        self.assertEqual({(x["world"], x["restart"]) for x in res}, {(4, 1)})
        self.assertEqual(len({x["params"] for x in res}), 1, "DDP kept every replica identical")
        self.d.wait_log(r"root cause: worker rank 3 \(local rank 1\) on node rank 1 .* killed "
                        r"by signal 9", since=mark)

    def test_restart_budget_exhausted_fails_every_node_with_one_root_cause(self):
        self.start_daemon()
        env = {"FAULT_CRASH": "1:3:-1", "FAULT_CRASH_AFTER_MS": "200"}
        t0 = time.monotonic()
        ps = [self.agent("budget", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1",
                         env=env) for _ in range(2)]
        errs = self.finish_all(ps, 3, timeout=30)
        self.assertLess(time.monotonic() - t0, 15.0)
        lines = []
        for err in errs:
            found = [ln for ln in err.splitlines()
                     if ln.startswith("rdzv-agent: job budget failed")]
            self.assertEqual(len(found), 1, err[-3000:])
            lines.append(found[0])
        self.assertEqual(lines[0], lines[1], "the same root cause on every node")
        self.assertRegex(lines[0], r"^rdzv-agent: job budget failed \(exit code 3\): root cause: "
                                   r"worker rank 1 \(local rank 1\) on node rank 0 \(.*\) exited "
                                   r"with code 3 at .* \(generation 2\); restart budget exhausted "
                                   r"\(1 of 1 restarts used\)$")
        self.assertEqual(sorted({e.gen for e in self.events("start")}), [1, 2],
                         "exactly one restart")
        self.assertEqual(len(self.events("crash")), 2)


if __name__ == "__main__":
    main()
