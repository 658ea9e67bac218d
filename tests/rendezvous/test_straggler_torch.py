# SPDX-License-Identifier: Apache-2.0
"""The straggler verdicts with PyTorch workers: real rdzv-agents against a real rdzvd, each
worker a DDP script through rdzv.torch (gloo, CPU; scripts/straggler_ddp.py) whose compute time
rdzv.torch's communication hook measures. One worker a node: a node's slowest of several ranks
is rendezvous-straggler's (shell workers), and each PyTorch start costs this test seconds.
Every rank's forward takes 20 ms a step, the slow node's 80 ms (an environment variable only
its agent has); DDP makes the fast rank wait for the slow one, and that wait must not count.
--on-straggler report: the slow node is named (the log, rdzvctl status) and the job goes on,
nobody put aside. aside, with a spare: the slow node is put aside, the spare takes its node
rank in the next generation, whose steps it reports; and the same with the script unmodified
(no rdzv import), timed by rdzv-agent's Python hooks. Run with Debian's torch and again under
torch 2.6 (...-torch2.6). Skipped without torch."""
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import time

import rdzvtest
from agenttest import (RDZVCTL, AgentTestCase, agent_cmd, finish, job_status, main, start,
                       wait_output)

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "straggler_ddp.py")
FAST_MS, SLOW_MS = 20, 80
START_S = 120  # to start four PyTorch workers and take their first steps, on a loaded machine
# The workers' lines (scripts/straggler_ddp.py), as their agent prints them.
TORCH_LINE = r"^\[rank\d+\]: torch (\S+)$"
STEP_LINE = r"^\[rank\d+\]: generation {gen} step {step}$"
VERDICT = (r"job={run} .*node=slow \(node id [^)]*\) is a straggler: node rank (\d)'s slowest "
           r"rank computes (\d+) ms a step, ([\d.]+)x the job's median of (\d+) ms")


def release(version):
    """A torch version's release numbers ("1.13.0" of "1.13.0a0+gitunknown")."""
    return re.match(r"[\d.]*\d", version)[0]


class StragglerTorch(AgentTestCase):
    def setUp(self):
        super().setUp()
        # Not imported here: it takes seconds, the workers' own start is what the test waits on.
        if importlib.util.find_spec("torch") is None:
            self.skipTest(f"PyTorch is not installed for {PYTHON}")
        self.torch_release = release(importlib.metadata.version("torch"))
        self.d = self.daemon()
        self.ep = f"127.0.0.1:{self.d.port}"
        self.stop = os.path.join(self.outdir(), "stop")

    def agent(self, run_id, host, *extra, ms=FAST_MS, plain=False):
        p = start(agent_cmd(self.ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", run_id,
                            "--host", host, "--nccl", "off", "--last-call", "0.3",
                            "--heartbeat-timeout", "2", "--straggler-window", "3", "--grace", "1",
                            *extra, worker=[PYTHON, SCRIPT]),
                  env={"RDZV_TEST_MS": str(ms), "RDZV_TEST_STOP": self.stop,
                       "RDZV_TEST_PLAIN": "1" if plain else "0"})
        self.addCleanup(p.kill)
        return p

    def verdict(self, run_id):
        """The slow node's verdict in rdzvd's log: (its node rank, its compute ms, the median)."""
        line = self.d.wait_log(VERDICT.format(run=run_id), timeout=START_S)
        m = re.search(VERDICT.format(run=run_id), line)
        rank, mine, score, median = int(m[1]), int(m[2]), float(m[3]), int(m[4])
        # The slow forward is counted; the fast ranks' wait on it is not.
        self.assertGreaterEqual(mine, SLOW_MS, line)
        self.assertGreaterEqual(median, FAST_MS, line)
        self.assertLess(median, SLOW_MS * 0.75, line)
        self.assertGreaterEqual(score, 1.3, line)
        return rank

    def steps(self, job, host):
        return [r["step"] for r in job["ranks"] if r["host"] == host]

    def wait_status(self, run_id, ready, timeout=30):
        """The job's status once ready(job) holds (fails after timeout s)."""
        deadline = time.monotonic() + timeout
        while True:
            job = job_status(self.ep, run_id)
            if ready(job) or time.monotonic() > deadline:
                return job
            time.sleep(0.1)

    def end(self, *agents):
        """Let the workers stop (after the same step), and every agent exit 0 within 60 s; else
        kill those left and fail with what each agent printed (its workers' lines, its log)."""
        with open(self.stop, "w"):
            pass
        deadline = time.monotonic() + 60
        said = []
        for p in agents:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                how = f"exit {p.returncode}"
            except subprocess.TimeoutExpired:
                rdzvtest.kill_proc(p, group=True)
                out, err = p.communicate()
                how = "did not exit within 60 s"
            said.append(f"--- agent {p.args[p.args.index('--host') + 1]}: {how}\n" +
                        (getattr(p, "seen", b"") + out).decode(errors="replace")[-3000:] +
                        err.decode(errors="replace")[-4000:])
        if any(p.returncode != 0 for p in agents):
            self.fail("not every agent exited 0 after the stop:\n" + "\n".join(said))

    def test_report_names_the_slow_node_and_the_job_goes_on(self):
        fast = self.agent("rep", "fast", "--on-straggler", "report")
        slow = self.agent("rep", "slow", "--on-straggler", "report", ms=SLOW_MS)
        self.assertEqual(release(wait_output(fast, TORCH_LINE, START_S)[1]), self.torch_release,
                         "the workers run the test's torch")
        slow_rank = self.verdict("rep")
        job = job_status(self.ep, "rep")
        nodes = {n["host"]: n for n in job["nodes"]}
        self.assertEqual(nodes["slow"]["node_rank"], slow_rank)
        self.assertTrue(nodes["slow"]["straggler"], nodes)
        self.assertGreaterEqual(nodes["slow"]["straggler_score"], 1.3, nodes)
        self.assertFalse(nodes["fast"]["straggler"], nodes)
        self.assertEqual(job.get("put_aside"), None)
        marks = [m["text"] for m in job["timeline"]["marks"] if m["kind"] == "straggler"]
        self.assertEqual(len(marks), 1, marks)
        self.assertIn("node slow is a straggler", marks[0])
        text = self.ctl("status")
        self.assertRegex(text, r"(?m)^  slow .*x!$")
        self.assertNotRegex(text, r"(?m)^  fast .*x!$")
        # The job goes on, in its first generation: both nodes train ten more steps.
        then = max(self.steps(job, "slow") + self.steps(job, "fast"))
        for p in (fast, slow):
            wait_output(p, STEP_LINE.format(gen=1, step=then + 10), 60)
        self.end(fast, slow)
        job = job_status(self.ep, "rep")
        self.assertEqual(job["outcome"]["type"], "succeeded", job)
        self.assertEqual(job["generation"], 1, "report only: no new generation")
        self.assertEqual(job.get("put_aside"), None)
        self.assertEqual(job["timeline"]["recoveries"]["list"], [])
        self.assertIsNone(self.d.find_log(r"put aside"), self.d.log())

    def test_aside_the_spare_takes_the_slow_node_rank(self):
        self.aside("aside")

    def test_aside_an_unmodified_script(self):
        """The same with the script as a user runs it, no rdzv import (RDZV_TEST_PLAIN): its
        steps and their compute time come from rdzv-agent's Python hooks, which time its DDP
        model with rdzv.torch's timer."""
        self.aside("plain", plain=True)

    def aside(self, run, plain=False):
        """aside, with a spare: the slow node is put aside, the spare takes its node rank in the
        next generation, whose steps it reports."""
        fast = self.agent(run, "fast", "--on-straggler", "aside", plain=plain)
        slow = self.agent(run, "slow", "--on-straggler", "aside", ms=SLOW_MS, plain=plain)
        self.d.wait_log(r"job=%s gen=1 generation 1 formed" % run, timeout=START_S)
        spare = self.agent(run, "spare", "--on-straggler", "aside", plain=plain)
        slow_rank = self.verdict(run)
        rc, _, err = finish(slow, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertRegex(err, r"put aside by job %s: a straggler: node rank %d's slowest rank "
                              r"computes \d+ ms a step" % (run, slow_rank))
        # The next generation: the spare's workers train in the slow node's place, beside fast's.
        for p in (spare, fast):
            self.assertEqual(release(wait_output(p, TORCH_LINE, START_S)[1]), self.torch_release)
            wait_output(p, STEP_LINE.format(gen=2, step=10), 60)
        # rdzvd hears of those steps with the spare's next heartbeats.
        job = self.wait_status(run, lambda j: j["generation"] == 2 and min(
            self.steps(j, "spare") or [0]) >= 10)
        self.assertEqual(job["generation"], 2)
        nodes = {n["host"]: n for n in job["nodes"]}
        self.assertNotIn("slow", nodes)
        self.assertEqual(nodes["spare"]["node_rank"], slow_rank, nodes)
        self.assertEqual(nodes["fast"]["node_rank"], 1 - slow_rank, nodes)
        spare_ranks = [r for r in job["ranks"] if r["host"] == "spare"]
        self.assertEqual([r["rank"] for r in spare_ranks], [slow_rank], job["ranks"])
        self.assertTrue(all(r["step"] >= 10 for r in spare_ranks), spare_ranks)
        self.assertFalse(any(n.get("straggler") for n in job["nodes"]), job["nodes"])
        self.end(fast, spare)
        job = job_status(self.ep, run)
        self.assert_straggler_replaced(job, "slow")

    def ctl(self, *args):
        p = subprocess.run([RDZVCTL, "-e", self.ep, *args], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout


if __name__ == "__main__":
    main()
