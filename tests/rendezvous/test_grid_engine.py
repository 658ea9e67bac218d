# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent under Grid Engine (issue 49). What it takes of a job's environment: its run id is
JOB_ID (JOB_ID.SGE_TASK_ID in an array job), its node count NHOSTS, its node rank its host's line
of the parallel environment's PE_HOSTFILE (a preference, as SLURM_NODEID is, a host on two queues
one node); JOB_ID alone (with SGE_ROOT, as in any login shell) is no Grid Engine job (read
through --print-launch, as the agent resolves them). And on a real Grid Engine
(tests/sge/local-sge.sh: Debian's Son of Grid Engine, qmaster and one execd on this machine):
deploy/rdzv.sge submitted with qsub runs a job; a worker killed mid-run restarts it; a node whose
health check fails is put aside and, with --on-bad-node drain, its queue instance disabled (qmod
-d); qdel ends the job with no process left behind, and the next job removes the secret it
left."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from agenttest import AGENT, AgentTestCase, main

SRC = os.environ.get("RDZV_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
LOCAL_SGE = os.path.join(SRC, "tests", "sge", "local-sge.sh")
TEMPLATE = os.path.join(SRC, "deploy", "rdzv.sge")
SGE_ENV = {"SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "default"}

HOST = socket.gethostname().split(".")[0]


def launch(env, *args):
    """rdzv-agent --print-launch under env (no other scheduler's variables): (rc, JSON or None,
    stderr)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM", "PBS_", "OMPI_", "SGE_", "PE_")) and
         k not in ("JOB_ID", "NHOSTS", "NSLOTS")}
    e.update(env)
    r = subprocess.run([AGENT, "--print-launch", "--endpoint", "h:1", *args, "--", "true"],
                       env=e, capture_output=True, text=True, timeout=30)
    return r.returncode, json.loads(r.stdout) if r.returncode == 0 else None, r.stderr


class GridEngineEnv(AgentTestCase):

    def hostfile(self, *hosts):
        f = tempfile.NamedTemporaryFile("w", prefix="pe_hostfile.", delete=False)
        self.addCleanup(os.unlink, f.name)
        for h in hosts:
            f.write("%s 4 all.q@%s UNDEFINED\n" % (h, h))
        f.close()
        return f.name

    def test_job_id_node_rank_and_nnodes(self):
        pe = self.hostfile("gpu-a.example.org", HOST.upper() + ".example.org", "gpu-c")
        env = {"JOB_ID": "4242", "SGE_TASK_ID": "undefined", "SGE_O_WORKDIR": "/home/u",
               "NHOSTS": "3", "PE_HOSTFILE": pe}
        rc, got, err = launch(env)
        self.assertEqual(rc, 0, err)
        self.assertEqual((got["run_id"], got["node_rank"], got["node_rank_hint"]),
                         ("4242", 1, True))
        self.assertEqual((got["nnodes_min"], got["nnodes_max"]), (3, 3))
        rc, got, err = launch(dict(env, SGE_TASK_ID="7"))
        self.assertEqual(got["run_id"], "4242.7", err)
        # What the user gives wins.
        rc, got, err = launch(env, "--rdzv-id", "mine", "--node-rank", "0", "--nnodes", "1:4")
        self.assertEqual((got["run_id"], got["node_rank"], got["node_rank_hint"]),
                         ("mine", 0, False), err)
        self.assertEqual((got["nnodes_min"], got["nnodes_max"]), (1, 4))

    def test_a_host_not_in_the_hostfile_joins_in_arrival_order(self):
        pe = self.hostfile("gpu-a", "gpu-b")
        rc, got, err = launch({"JOB_ID": "9", "PE_HOSTFILE": pe, "NHOSTS": "2"})
        self.assertEqual(rc, 0, err)
        self.assertEqual((got["run_id"], got.get("node_rank")), ("9", None))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("Grid Engine's PE_HOSTFILE %s: no line for this host, " % pe, err)
        self.assertIn("node ranks go by the order of arrival", err)
        # A hostfile that is not one: said, and the same.
        with open(pe, "w") as f:
            f.write("gpu-a four all.q@gpu-a\n")
        rc, got, err = launch({"JOB_ID": "9", "PE_HOSTFILE": pe})
        self.assertEqual((rc, got.get("node_rank")), (0, None), err)
        self.assertIn("Bad message", err)

    def test_a_host_on_two_queues_is_one_node(self):
        # A host gives slots from two queues: two lines, one node.
        pe = self.hostfile("gpu-a", "gpu-a", HOST, "gpu-c")
        with open(pe) as f:
            lines = f.read().replace("all.q@gpu-a", "gpu.q@gpu-a", 1)
        with open(pe, "w") as f:
            f.write(lines)
        rc, got, err = launch({"JOB_ID": "7", "SGE_JOB_SPOOL_DIR": "/var/spool/x",
                               "PE_HOSTFILE": pe})
        self.assertEqual(rc, 0, err)
        self.assertEqual(got["node_rank"], 1, err)

    def test_job_id_alone_is_no_grid_engine_job(self):
        # JOB_ID and SGE_ROOT are in every login shell of a Grid Engine cluster: no job.
        rc, got, err = launch({"JOB_ID": "4242", "NHOSTS": "3",
                               "SGE_ROOT": "/var/lib/gridengine"})
        self.assertEqual(rc, 2, err)
        self.assertIn("no job id: pass --rdzv-id ID", err)
        self.assertIn("Grid Engine", err)


class RealGridEngine(AgentTestCase):
    """Jobs through a real qmaster and execd. One Grid Engine per machine: this test runs in the
    unsanitized build only (tests/meson.build)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0:
            raise unittest.SkipTest("a local Grid Engine needs root (.ci/run runs as root)")
        cls.sgedir = tempfile.mkdtemp(prefix="rdzv-sge-")
        r = subprocess.run(["bash", LOCAL_SGE, "start", cls.sgedir], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError("local-sge.sh start failed:\n" + r.stdout + r.stderr)
        cls.host = socket.gethostname()

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["qmod", "-e", "all.q@" + cls.host], env=dict(os.environ, **SGE_ENV),
                       capture_output=True, timeout=30)
        subprocess.run(["bash", LOCAL_SGE, "stop", cls.sgedir], capture_output=True, timeout=60)
        shutil.rmtree(cls.sgedir, True)
        super().tearDownClass()

    def sge(self, *cmd, **kw):
        return subprocess.run(list(cmd), env=dict(os.environ, **SGE_ENV), capture_output=True,
                              text=True, **kw)

    def submit(self, out, *args, env=None, sync=True, nhosts=1):
        """qsub deploy/rdzv.sge (-pe rdzv NHOSTS) with the build's binaries; its output in
        OUT/job.out. sync: wait for the job (qsub -sync y), returning (exit status, output);
        else (job id, None)."""
        v = {"RDZV_BIN": os.path.dirname(AGENT), "RDZV_TOKEN_DIR": os.path.join(out, "tok"),
             "RDZV_TEST_OUT": out, **(env or {})}
        cmd = ["qsub", "-terse", "-cwd", "-o", os.path.join(out, "job.out"), "-j", "y", "-pe",
               "rdzv", str(nhosts), "-v", ",".join("%s=%s" % kv for kv in v.items())]
        if sync:
            cmd += ["-sync", "y"]
        r = self.sge(*cmd, TEMPLATE, "--", *args, cwd=out, timeout=180)
        if not sync:
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout.strip(), None
        with open(os.path.join(out, "job.out")) as f:
            return r.returncode, f.read()

    def test_template_runs_a_job(self):
        out = self.outdir()
        rc, log = self.submit(out, "/bin/sh", "-c",
                              'echo "$RANK $WORLD_SIZE $GROUP_RANK $TORCHELASTIC_RUN_ID" '
                              '> "$RDZV_TEST_OUT/rank.$RANK"', env={"RDZV_NPROC": "2"})
        self.assertEqual(rc, 0, log)
        jobid = log.split("token.")[1].split(")")[0]
        self.assertRegex(log, r"rdzv\.sge: rdzvd at \S+:\d+ \(hosted by the agent there\), 1 "
                              r"hosts")
        self.assertRegex(log, r"job %s succeeded" % jobid)
        for rank in (0, 1):
            with open(os.path.join(out, "rank.%d" % rank)) as f:
                self.assertEqual(f.read().split(), [str(rank), "2", "0", jobid])
        self.assertFalse(os.path.exists(os.path.join(out, "tok", "token." + jobid)),
                         "the job's token outlived it")

    def test_worker_killed_mid_run_restarts_the_job(self):
        out = self.outdir()
        rc, log = self.submit(out, "/bin/sh", "-c",
                              'if [ "$RDZV_GENERATION" = 1 ] && [ "$RANK" = 1 ]; then '
                              'echo "step 1" >&"$RDZV_PROGRESS_FD"; sleep 0.5; kill -9 $$; fi; '
                              'echo "$RDZV_GENERATION" >> "$RDZV_TEST_OUT/gen.$RANK"',
                              env={"RDZV_NPROC": "2", "RDZV_MAX_RESTARTS": "1"})
        self.assertEqual(rc, 0, log)
        self.assertRegex(log, r"restarting: root cause: worker rank 1 \(local rank 1\) on node "
                              r"rank 0 \(\S+\) was killed by signal 9")
        with open(os.path.join(out, "gen.1")) as f:
            self.assertEqual(f.read().split(), ["2"])

    def test_bad_node_is_put_aside_and_its_queue_disabled(self):
        out = self.outdir()
        self.addCleanup(self.sge, "qmod", "-e", "all.q@" + self.host, timeout=30)
        # Its health check fails (a GPU lost, say): the node is put aside and, asked, drained.
        check = os.path.join(out, "check.sh")
        with open(check, "w") as f:
            f.write("#!/bin/sh\necho GPU lost\nexit 1\n")
        os.chmod(check, 0o755)
        rc, log = self.submit(out, "/bin/sh", "-c", "exit 0",
                              env={"RDZV_HEALTH_CHECK": check, "RDZV_ON_BAD_NODE": "drain"})
        self.assertEqual(rc, 69, log)  # rdzv-agent's status for a node put aside
        self.assertIn("GPU lost", log)
        self.assertRegex(log, r"--on-bad-node drain: disabling Grid Engine queue instance "
                              r"all\.q@\S+ \(rdzv: ")
        q = self.sge("qstat", "-f", "-q", "all.q", timeout=30)
        line = [ln for ln in q.stdout.splitlines() if ln.startswith("all.q@")][0]
        self.assertEqual(line.split()[-1], "d", q.stdout)  # disabled by qmod -d

    def test_qdel_ends_the_job_with_nothing_left(self):
        out = self.outdir()
        jobid, _ = self.submit(out, "/bin/sh", "-c",
                               'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; exec sleep 300',
                               env={"RDZV_NPROC": "2"}, sync=False)
        pids = [os.path.join(out, "pid.%d" % r) for r in (0, 1)]
        deadline = time.monotonic() + 60
        while not all(os.path.exists(p) and os.path.getsize(p) for p in pids):
            self.assertLess(time.monotonic(), deadline, "the job's workers never started")
            time.sleep(0.1)
        workers = []
        for p in pids:
            with open(p) as f:
                workers.append(int(f.read()))
        r = self.sge("qdel", jobid, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        deadline = time.monotonic() + 60
        while self.sge("qstat", "-j", jobid, timeout=30).returncode == 0:
            self.assertLess(time.monotonic(), deadline, "job %s still there" % jobid)
            time.sleep(0.2)
        deadline = time.monotonic() + 10
        for pid in workers:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                self.assertLess(time.monotonic(), deadline, "worker %d outlived qdel" % pid)
                time.sleep(0.1)
        while True:  # the agent, the rdzvd it hosted: Grid Engine's to end
            left = subprocess.run(["pgrep", "-f", "(rdzv-agent|rdzvd) .*%s" % out],
                                  capture_output=True, text=True).stdout.split()
            if not left:
                break
            self.assertLess(time.monotonic(), deadline,
                            "processes of job %s left after qdel: %s" % (jobid, left))
            time.sleep(0.1)
        # qdel SIGKILLs the job script: its secret stays until the next job's start removes it.
        token = os.path.join(out, "tok", "token." + jobid)
        self.assertTrue(os.path.exists(token))
        rc, log = self.submit(out, "/bin/true")
        self.assertEqual(rc, 0, log)
        self.assertFalse(os.path.exists(token), "job %s's secret left after the next job" % jobid)


if __name__ == "__main__":
    main()
