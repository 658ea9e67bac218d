# SPDX-License-Identifier: Apache-2.0
"""The node that is merely slow: real rdzv-agents against a real rdzvd, each worker reporting
its steps and their compute time on RDZV_PROGRESS_FD ("step N compute_ms M", as rdzv-train and
rdzv.torch write them) and taking that long per step. One node's workers take 3x as long: rdzvd
scores every node against the job's median and calls that one a straggler once it stayed at or
above --straggler-factor for --straggler-window (rdzvctl status, the timeline, /metrics), and
with --on-straggler aside puts it aside when a spare waits (the spare takes its place, the
recovery's cause is "straggler") or when the smaller elastic job is faster, never below MIN.
Honest noise flags nobody: every node slowing together, a slow step every tenth (a
checkpoint), the first steps of a generation."""
import subprocess
import time
import urllib.request

from agenttest import RDZVCTL, AgentTestCase, agent_cmd, finish, job_status, main, start

# Steps of RDZV_TEST_MS ms each for RDZV_TEST_SECONDS (after RDZV_TEST_SHIFT seconds,
# RDZV_TEST_MS2 ms: every node slowing together, counted in microseconds from the worker's
# start: bash's $SECONDS moves at whole wall-clock seconds, so workers started a few ms apart
# on either side of one shifted up to 1 s apart, and the first was called a straggler); with
# RDZV_TEST_SPIKE, every tenth step 20x as long (a checkpoint).
WORKER = ["bash", "-c", r'''
ms=${RDZV_TEST_MS:-20}; i=0; t0=${EPOCHREALTIME/./}
while [ "$SECONDS" -lt "${RDZV_TEST_SECONDS:-8}" ]; do
  i=$((i + 1))
  [ -n "$RDZV_TEST_SHIFT" ] &&
    [ $((${EPOCHREALTIME/./} - t0)) -ge $((RDZV_TEST_SHIFT * 1000000)) ] && ms=$RDZV_TEST_MS2
  t=$ms; [ -n "$RDZV_TEST_SPIKE" ] && [ $((i % 10)) = 0 ] && t=$((ms * 20))
  sleep "$((t / 1000)).$(printf %03d $((t % 1000)))"
  echo "step $i compute_ms $t" >&"$RDZV_PROGRESS_FD"
done''']


class Straggler(AgentTestCase):
    def setUp(self):
        super().setUp()
        self.d, self.mport = self.daemon_with_metrics()
        self.ep = f"127.0.0.1:{self.d.port}"

    def agent(self, run_id, host, *extra, nnodes="2", env=None):
        p = start(agent_cmd(self.ep, "--nnodes", nnodes, "--nproc", "2", "--rdzv-id", run_id,
                            "--host", host, "--nccl", "off", "--last-call", "0.3",
                            "--heartbeat-timeout", "2", "--straggler-window", "2", "--grace", "1",
                            *extra, worker=WORKER), env=env)
        self.addCleanup(p.kill)
        return p

    def status(self, run_id):
        return job_status(self.ep, run_id)

    def scored(self, run_id, n):
        """The job once n of its nodes are scored (fails after 30 s)."""
        deadline = time.monotonic() + 30
        while True:
            job = self.status(run_id)
            nodes = [x for x in (job or {}).get("nodes", []) if x.get("straggler_score", 0) > 0]
            if len(nodes) >= n or time.monotonic() > deadline:
                self.assertEqual(len(nodes), n, job)
                return job
            time.sleep(0.2)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=5) as r:
            return r.read().decode()

    def test_report_names_the_slow_node(self):
        fast = self.agent("rep", "fast")
        slow = self.agent("rep", "slow", env={"RDZV_TEST_MS": "60"})
        self.d.wait_log(r"job=rep .*node=slow \(node id [^)]*\) is a straggler: node rank \d's "
                        r"slowest rank computes 60 ms a step, 3\.00x the job's median of 20 ms",
                        timeout=30)
        job = self.scored("rep", 2)
        nodes = {n["host"]: n for n in job["nodes"]}
        self.assertTrue(nodes["slow"]["straggler"], nodes)
        self.assertAlmostEqual(nodes["slow"]["straggler_score"], 3.0, places=2)
        self.assertFalse(nodes["fast"]["straggler"], nodes)
        self.assertAlmostEqual(nodes["fast"]["straggler_score"], 1.0, places=2)
        marks = [m for m in job["timeline"]["marks"] if m["kind"] == "straggler"]
        self.assertEqual(len(marks), 1, job["timeline"]["marks"])
        self.assertIn("node slow is a straggler", marks[0]["text"])
        text = subprocess.run([RDZVCTL, "-e", self.ep, "status"], capture_output=True,
                              text=True, timeout=10).stdout
        self.assertRegex(text, r"(?m)^  slow .* 3\.00x!$")
        self.assertRegex(text, r"(?m)^  fast .* 1\.00x$")
        m = self.metrics()
        self.assertRegex(m, r'(?m)^rdzvd_node_straggler\{job="rep",host="slow",'
                            r'node_rank="\d"\} 1$')
        self.assertRegex(m, r'(?m)^rdzvd_node_straggler_score\{job="rep",'
                            r'host="fast",node_rank="\d"\} 1\.000$')
        # report: nothing else happens; the job runs to its end on both nodes.
        for p in (fast, slow):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(self.status("rep")["generation"], 1)

    def test_aside_with_a_spare(self):
        fast = self.agent("spare", "fast", "--on-straggler", "aside")
        slow = self.agent("spare", "slow", "--on-straggler", "aside", env={"RDZV_TEST_MS": "60"})
        self.d.wait_log(r"job=spare gen=1 generation 1 formed")
        spare = self.agent("spare", "spare", "--on-straggler", "aside")
        rc, _, err = finish(slow, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertRegex(err, r"put aside by job spare: a straggler: node rank \d's slowest rank "
                              r"computes 60 ms a step")
        errs = []
        for p in (fast, spare):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-2000:])
            errs.append(err)
        # The other node hears why its workers restart, in words.
        self.assertRegex(errs[0], r"root cause: the agent of node rank \d \(slow\) is a straggler: "
                                  r"node rank \d's slowest rank computes 60 ms a step")
        job = self.status("spare")
        self.assert_straggler_replaced(job, "slow")
        self.assertRegex(self.metrics(),
                         r'(?m)^rdzvd_nodes_put_aside_total\{reason="straggler"\} 1$')

    def test_aside_never_below_min(self):
        fast = self.agent("min", "fast", "--on-straggler", "aside")
        slow = self.agent("min", "slow", "--on-straggler", "aside", env={"RDZV_TEST_MS": "60"})
        self.d.wait_log(r"job=min .*node=slow, a straggler, is not put aside \(--on-straggler "
                        r"aside\) while no spare is waiting and the job has only its --nnodes "
                        r"MIN of 2 nodes", timeout=30)
        for p in (fast, slow):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-2000:])

    def test_aside_when_the_smaller_job_is_faster(self):
        ags = [self.agent("elastic", h, "--on-straggler", "aside", nnodes="2:3",
                          env={"RDZV_TEST_MS": "60" if h == "slow" else "20"})
               for h in ("a", "b", "slow")]
        rc, _, err = finish(ags[2], timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        for p in ags[:2]:
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-2000:])
        job = self.status("elastic")
        self.assertEqual(job["outcome"]["type"], "succeeded", job)
        self.assertEqual(job["world_size"], 4, "the job went on with the two others")

    def test_honest_noise_flags_nobody(self):
        env = {"RDZV_TEST_SHIFT": "4", "RDZV_TEST_MS2": "60", "RDZV_TEST_SECONDS": "9"}
        ags = [self.agent("noise", h, "--straggler-window", "1", nnodes="3",
                          env=dict(env, RDZV_TEST_SPIKE="1") if h == "c" else env)
               for h in ("a", "b", "c")]
        # Every node is scored while it trains (so that "no straggler" is a real check).
        self.scored("noise", 3)
        for p in ags:
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-2000:])
        self.assertNotRegex(self.d.log(), r"is a straggler")
        job = self.status("noise")
        self.assertEqual([m for m in job["timeline"]["marks"] if m["kind"] == "straggler"], [])


if __name__ == "__main__":
    main()
