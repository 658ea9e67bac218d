# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent under real launchers: a two-node Slurm on this machine (srun, and the sbatch template
in deploy/), and Debian's OpenMPI mpirun with one agent per node."""
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from agenttest import (AGENT, ENV_WORKER, SRC, AgentTestCase, finish, main, rdzvtest, read_envs,
                       start)


SLURM_SCRIPT = os.path.join(SRC, "tests", "slurm", "local-slurm.sh")


class Slurm:
    """A local two-node Slurm for the whole test class."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rdzv-slurm-")
        try:
            r = subprocess.run(["bash", SLURM_SCRIPT, "start", self.dir], capture_output=True,
                               text=True, timeout=180)
        except subprocess.TimeoutExpired:
            self.stop()  # what it started
            raise
        if r.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise unittest.SkipTest("cannot start a local Slurm: " + (r.stderr or r.stdout)[-500:])
        self.env = {"SLURM_CONF": os.path.join(self.dir, "slurm.conf")}

    def poll_fast(self):
        """sbatch --wait polls its job after 2, 8 and 32 s unless MinJobAge is short: with 4 s,
        every 2 s (as test_doc_commands.py's Slurm; a job's record lives 4 s after its end)."""
        with open(self.env["SLURM_CONF"], "a") as f:
            f.write("MinJobAge=4\n")
        subprocess.run(["scontrol", "reconfigure"], env={**os.environ, **self.env},
                       capture_output=True, timeout=60)

    def stop(self):
        subprocess.run(["bash", SLURM_SCRIPT, "stop", self.dir], timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


class TestSlurm(AgentTestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the local Slurm needs root")
        cls.slurm = Slurm()
        cls.slurm.poll_fast()

    @classmethod
    def tearDownClass(cls):
        cls.slurm.stop()

    def test_srun_two_nodes_four_workers(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        p = start(["srun", "-N2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", AGENT,
                   "--nnodes", "2", "--nproc", "4", "--endpoint", ep, "--", *ENV_WORKER],
                  env={**self.slurm.env, "RDZV_TEST_OUT": out})
        rc, stdout, err = finish(p, timeout=90)
        self.assertEqual(rc, 0, err[-3000:])
        envs = read_envs(out)
        job_ids = {e["SLURM_JOB_ID"] for e in envs.values()}
        self.assertEqual(len(job_ids), 1)
        # The run id defaults to SLURM_JOB_ID and the node rank to SLURM_NODEID.
        self.assert_contract(envs, 2, 4, job_ids.pop(), ep,
                             group_of=lambda e: int(e["SLURM_NODEID"]))

    def sbatch(self, nodes, nproc, out):
        """deploy/rdzv.sbatch on NODES nodes with NPROC env-dumping workers each (None: the
        template's default): its job log."""
        build = os.path.dirname(os.path.dirname(AGENT))
        script = os.path.join(SRC, "deploy", "rdzv.sbatch")
        log = os.path.join(out, "job.log")
        r = subprocess.run(["sbatch", "--parsable", "--wait", "-N%d" % nodes, "-o", log,
                            f"--export=ALL,RDZV_BIN={build}/agent,RDZVD_BIN={build}/daemon," +
                            ("" if nproc is None else f"RDZV_NPROC={nproc},") +
                            f"RDZV_TEST_OUT={out},RDZV_TOKEN_DIR={out}/tokens",
                            script, "--", *ENV_WORKER],
                           env={**os.environ, **self.slurm.env}, capture_output=True, text=True,
                           timeout=120)
        with open(log) if os.path.exists(log) else open(os.devnull) as f:
            joblog = f.read()
        self.assertEqual(r.returncode, 0, r.stderr + joblog[-3000:])
        return joblog

    def test_sbatch_template_runs_a_job(self):
        out = self.outdir()
        joblog = self.sbatch(2, 2, out)
        envs = read_envs(out)
        self.assertEqual(sorted(envs), [0, 1, 2, 3], joblog[-3000:])
        self.assertEqual({e["GROUP_RANK"] for e in envs.values()}, {"0", "1"})
        self.assertEqual(len({e["RDZV_NCCL_UNIQUE_ID"] for e in envs.values()}), 1)
        # The template made a per-job token, rdzvd required it, the agents proved it, and it is
        # gone after the job.
        self.assertIn("token required", joblog)
        job_id = envs[0]["SLURM_JOB_ID"]
        token = os.path.join(out, "tokens", f"token.{job_id}")
        self.assertEqual({e["RDZV_TOKEN_FILE"] for e in envs.values()}, {token})
        self.assertFalse(os.path.exists(token), "the token outlived the job")

    def test_sbatch_template_three_replicas(self):
        """On 3 nodes the template runs rdzvd as 3 replicas on the first 3: the agents
        find the leader among them, and the workers' store is node rank 0's agent's. Without
        RDZV_NPROC, on nodes without GPUs (a CPU cluster: this machine), 1 worker per node, said
        once: the README's Slurm line runs as written there."""
        out = self.outdir()
        joblog = self.sbatch(3, None, out)
        if not glob.glob("/proc/driver/nvidia/gpus/*"):
            self.assertEqual(joblog.count("rdzv.sbatch: no GPU on "), 1, joblog[-3000:])
        m = re.search(r"rdzvd as 3 replicas on (\S+), 3 nodes, token required", joblog)
        self.assertIsNotNone(m, joblog[-3000:])
        ports = {int(ep.rsplit(":", 1)[1]) for ep in m.group(1).split(",")}
        self.assertEqual(len(ports), 3, m.group(1))
        envs = read_envs(out)
        self.assertEqual(sorted(envs), [0, 1, 2], joblog[-3000:])
        self.assertEqual({e["GROUP_RANK"] for e in envs.values()}, {"0", "1", "2"})
        stores = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()}
        self.assertEqual(len(stores), 1, stores)
        self.assertNotIn(int(stores.pop()[1]), ports | {p + 1 for p in ports},
                         "the workers' store is on a replica, not on node rank 0's agent")
        token = os.path.join(out, "tokens", "token.%s" % envs[0]["SLURM_JOB_ID"])
        self.assertFalse(os.path.exists(token), "the token outlived the job")
        # Each replica's Raft log went with the job (all three "nodes" are this machine).
        tmp = os.environ.get("TMPDIR", "/tmp")
        left = [d for d in os.listdir(tmp)
                if d.startswith("rdzvd-%s-" % envs[0]["SLURM_JOB_ID"])]
        self.assertEqual(left, [], "the replicas' directories outlived the job")

    def test_scancel_of_sbatch_job_is_cancelled_and_leaves_nothing(self):
        """scancel of a 3-node job of deploy/rdzv.sbatch (rdzvd as 3 replicas, which get the
        SIGTERM too): every node's last line says the job was cancelled, with the Slurm job id,
        and nothing of the job is left in $TMPDIR: the agents' directories, the replicas' Raft
        logs, the script's own. Before, every node said "left job N, stopped from outside" (its
        rdzvd gone, no verdict) and the replicas' /tmp/rdzvd-N-{0,1,2} stayed."""
        out = self.outdir()
        build = os.path.dirname(os.path.dirname(AGENT))
        env = {**os.environ, **self.slurm.env}
        log = os.path.join(out, "job.log")
        # The job's $TMPDIR, its own: other tests' Slurm jobs may have the same job id.
        tmp = os.path.join(out, "tmp")
        os.mkdir(tmp)
        worker = ["/bin/sh", "-c", 'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; exec sleep 300']
        r = subprocess.run(["sbatch", "--parsable", "-N3", "-o", log,
                            f"--export=ALL,RDZV_BIN={build}/agent,RDZVD_BIN={build}/daemon,"
                            f"RDZV_NPROC=1,RDZV_TEST_OUT={out},RDZV_TOKEN_DIR={out}/tokens,"
                            f"RDZV_GRACE=2,TMPDIR={tmp}",
                            os.path.join(SRC, "deploy", "rdzv.sbatch"), "--", *worker],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = r.stdout.strip().split(";")[0]
        self.addCleanup(subprocess.run, ["scancel", job], env=env, capture_output=True,
                        timeout=30)

        def joblog():
            with open(log) if os.path.exists(log) else open(os.devnull) as f:
                return f.read()
        deadline = time.monotonic() + 90
        while (len([f for f in os.listdir(out) if f.startswith("pid.")]) < 3 and
               time.monotonic() < deadline):
            time.sleep(0.2)
        self.assertEqual(len([f for f in os.listdir(out) if f.startswith("pid.")]), 3,
                         joblog()[-3000:])
        subprocess.run(["scancel", job], env=env, check=True, timeout=30)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                               capture_output=True, text=True, timeout=30)
            if q.returncode != 0 or not q.stdout.strip():
                break
            time.sleep(0.5)
        time.sleep(1)  # the job's last output written
        text = joblog()
        lines = [l for l in text.splitlines() if l.startswith("rdzv-agent: ") and
                 "exit code" in l]
        self.assertEqual(len(lines), 3, text[-3000:])
        for line in lines:
            self.assertIn("rdzv-agent: job %s cancelled (exit code 143)" % job, line,
                          text[-3000:])
            self.assertIn("Slurm job %s" % job, line, text[-3000:])
        self.assertEqual(os.listdir(tmp), [], "left in $TMPDIR after scancel: " + text[-3000:])
        self.assertEqual(os.listdir(os.path.join(out, "tokens")), [], "the token outlived it")

    def test_bad_node_drained(self):
        """--on-bad-node drain: three agents under srun, --nnodes 2 (the one that
        joins last waits as the spare); the workers of the node whose worker starts first in
        generation 1 die at start-up. After its second failure that node is put aside, its
        agent drains it in the real Slurm with the reason (sinfo shows it drained) and exits 69,
        and the job finishes on the other two."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        # The first worker to start claims its node as the bad one (mkdir is atomic).
        worker = ["/bin/sh", "-c",
                  'b="$RDZV_TEST_OUT/bad"; '
                  'if mkdir "$b.lock" 2>/dev/null; then echo "$SLURMD_NODENAME" > "$b.tmp" && '
                  'mv "$b.tmp" "$b"; fi; '
                  'while [ ! -s "$b" ]; do sleep 0.05; done; '
                  'if [ "$(cat "$b")" = "$SLURMD_NODENAME" ]; then sleep 0.5; exit 3; fi; sleep 3']
        env = {**os.environ, **self.slurm.env}
        p = start(["srun", "-N3", "--ntasks-per-node=1", "-l", AGENT, "--nnodes", "2",
                   "--nproc", "1", "--endpoint", ep, "--max-restarts", "4", "--nccl", "off",
                   "--grace", "2", "--last-call", "0.5", "--on-bad-node", "drain", "--",
                   *worker], env={**self.slurm.env, "RDZV_TEST_OUT": out})
        rc, stdout, err = finish(p, timeout=120)
        with open(os.path.join(out, "bad")) as f:
            bad = f.read().strip()
        self.addCleanup(subprocess.run, ["scontrol", "update", "NodeName=" + bad,
                                         "State=RESUME"], env=env, capture_output=True,
                        timeout=30)
        self.assertEqual(rc, 69, err[-3000:])  # srun: the highest exit status of its tasks
        self.assertIn("put aside by job", err)
        self.assertIn("--on-bad-node drain: scontrol update NodeName=%s: done" % bad, err)
        r = subprocess.run(["sinfo", "-h", "-n", bad, "-o", "%T|%E"], env=env,
                           capture_output=True, text=True, timeout=30)
        state, _, reason = r.stdout.strip().partition("|")
        self.assertIn(state, ("drained", "draining"), r.stdout + r.stderr)
        self.assertIn("rdzv: node", reason)
        self.assertIn("its workers failed 2 times", reason)
        d.wait_log(r"generation \d+ succeeded")

    def test_worker_exit_69_drains_nothing(self):
        """A worker that exits 69 (EX_UNAVAILABLE, a common code) fails the job with that code
        on every node, but rdzvd put no node aside: nothing is drained. Before, every
        agent ran scontrol update State=DRAIN on its own node."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        env = {**os.environ, **self.slurm.env}
        p = start(["srun", "-N2", "--ntasks-per-node=1", "-l", AGENT, "--nnodes", "2",
                   "--nproc", "1", "--endpoint", ep, "--max-restarts", "0", "--nccl", "off",
                   "--grace", "2", "--on-bad-node", "drain", "--", "/bin/sh", "-c", "exit 69"],
                  env=self.slurm.env)
        rc, _, err = finish(p, timeout=120)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("exited with code 69", err)
        self.assertNotIn("--on-bad-node drain", err)
        r = subprocess.run(["sinfo", "-h", "-o", "%n|%T"], env=env, capture_output=True,
                           text=True, timeout=30)
        for line in r.stdout.split():
            self.assertNotIn("drain", line.split("|")[1], r.stdout)

    def cancelled_job(self, srun_args, stop, why):
        """Two agents under srun (srun_args added), their workers sleeping; stop(job id) ends the
        job from outside. Every worker stops, no orphan is left, and the job reads as cancelled,
        not failed, saying why (why: what Slurm gave): the outcome in rdzvctl status (and
        --json), each agent's last line and exit code 143 (128 + SIGTERM, as torchrun), no
        restart charged."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = ["/bin/sh", "-c", 'echo "$SLURM_JOB_ID" > "$RDZV_TEST_OUT/job"; '
                  'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; exec sleep 300']
        p = start(["srun", "-N2", "--ntasks-per-node=1", "-l", *srun_args, AGENT, "--nnodes",
                   "2", "--nproc", "1", "--endpoint", ep, "--max-restarts", "3", "--nccl", "off",
                   "--grace", "2", "--", *worker], env={**self.slurm.env, "RDZV_TEST_OUT": out})
        def pids():
            found = []
            for f in os.listdir(out):
                if f.startswith("pid."):
                    with open(os.path.join(out, f)) as fh:
                        found += [int(x) for x in fh.read().split()]
            return found

        deadline = time.monotonic() + 60
        while len(pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = pids()
        self.assertEqual(len(pids), 2, os.listdir(out))
        with open(os.path.join(out, "job")) as f:
            job = f.read().strip()
        stop(job)
        rc, _, err = finish(p, timeout=180)
        self.assertEqual(err.count("rdzv-agent: job %s cancelled (exit code 143)" % job), 2,
                         err[-3000:])
        # What the agents said after the job was cancelled (srun's own lines may say "failed",
        # e.g. a step message that timed out on a loaded machine).
        after = err.split("cancelled (exit code 143)")[-1]
        self.assertNotIn("failed", "\n".join(l for l in after.splitlines() if "rdzv-agent" in l),
                         after[-3000:])
        for pid in pids:
            self.assertFalse(os.path.exists("/proc/%d" % pid), "worker %d outlived its job" % pid)
        st = subprocess.run([os.environ.get("RDZVCTL", "rdzvctl"), "-e", ep, "status", "--json"],
                            capture_output=True, text=True, timeout=10)
        j = [x for x in json.loads(st.stdout)["jobs"] if x["run_id"] == job][0]
        self.assertEqual((j["outcome"]["type"], j["outcome"]["exit_code"], j["restart_count"]),
                         ("cancelled", 143, 0), j)
        self.assertIn("received SIGTERM from outside (Slurm job %s: %s)" % (job, why),
                      j["outcome"]["summary"], err[-3000:])
        st = subprocess.run([os.environ.get("RDZVCTL", "rdzvctl"), "-e", ep, "status", "--ended"],
                            capture_output=True, text=True, timeout=10)
        self.assertIn("outcome: cancelled, exit code 143", st.stdout)

    def test_scancel_is_cancelled_not_failed(self):
        """scancel of a running job: cancelled, "scancel" (slurmctld's reason for the
        job is None while it completes). Before, the outcome was "failed (exit code 1): root
        cause: the agent of node rank 1 disconnected"."""
        self.cancelled_job([], lambda job: subprocess.run(
            ["scancel", job], env={**os.environ, **self.slurm.env}, check=True, timeout=30),
            "scancel")


class TestMpirun(AgentTestCase):
    def test_mpirun_one_agent_per_node(self):
        if not shutil.which("mpirun"):
            self.skipTest("mpirun not installed")
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        env = {"RDZV_TEST_OUT": out, "OMPI_ALLOW_RUN_AS_ROOT": "1",
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_plm_rsh_agent": "",
               "OMPI_MCA_btl": "self", "OMPI_MCA_oob_tcp_if_include": "lo"}
        p = start(["mpirun", "--oversubscribe", "-np", "2", "-x", "RDZV_TEST_OUT", AGENT,
                   "--nnodes", "2", "--nproc", "4", "--endpoint", ep, "--rdzv-id", "mpi-1",
                   "--", *ENV_WORKER], env=env)
        rc, _, err = finish(p, timeout=90)
        self.assertEqual(rc, 0, err[-3000:])
        self.assert_contract(read_envs(out), 2, 4, "mpi-1", ep,
                             group_of=lambda e: int(e["OMPI_COMM_WORLD_RANK"]))


class TestSchedulerEndsTheJob(AgentTestCase):
    """No PBS server here: its job's environment (PBS_JOBID) on two agents of an elastic job
    (--nnodes 1:2), which could go on with one node."""

    def test_pbs_job_signalled_is_cancelled_on_every_node(self):
        """PBS signals a job's processes only to end the job (qdel, its walltime): the first
        agent signalled cancels the job, naming the PBS job, and the other agent, not yet
        signalled, says the same and exits 143. Before, the first said "left job", and the other
        restarted its workers alone."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = ["/bin/sh", "-c", 'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; exec sleep 300']
        ps = [start([AGENT, "--nnodes", "1:2", "--nproc", "1", "--endpoint", ep, "--rdzv-id",
                     "pbs-1", "--host", "n%d" % i, "--nccl", "off", "--grace", "2", "--",
                     *worker], env={"PBS_JOBID": "4242.pbs", "RDZV_TEST_OUT": out})
              for i in range(2)]
        deadline = time.monotonic() + 60
        while (len([f for f in os.listdir(out) if f.startswith("pid.")]) < 2 and
               time.monotonic() < deadline):
            time.sleep(0.1)
        self.assertEqual(len([f for f in os.listdir(out) if f.startswith("pid.")]), 2)
        ps[0].send_signal(15)
        for i, p in enumerate(ps):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 143, err[-3000:])
            self.assertIn("rdzv-agent: job pbs-1 cancelled (exit code 143): cancelled: the agent "
                          "of node n0 received SIGTERM from outside (PBS job 4242.pbs)", err,
                          err[-3000:])


class TestPBSTemplate(AgentTestCase):
    """No PBS server is packaged for Debian: run deploy/rdzv.pbs with the environment PBS gives a
    job (PBS_JOBID, PBS_NODEFILE, PBS_O_WORKDIR) on a one-node allocation, through real mpirun."""

    def test_pbs_template_runs_a_job(self):
        if not shutil.which("mpirun"):
            self.skipTest("mpirun not installed")
        out = self.outdir()
        nodefile = os.path.join(out, "nodefile")
        with open(nodefile, "w") as f:
            f.write("localhost\n")
        build = os.path.dirname(os.path.dirname(AGENT))
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts",
                              "env-worker.sh")
        env = {"PBS_JOBID": "4242.pbs", "PBS_NODEFILE": nodefile, "PBS_O_WORKDIR": out,
               "RDZV_BIN": f"{build}/agent", "RDZVD_BIN": f"{build}/daemon", "RDZV_NPROC": "2",
               "RDZV_CMD": worker, "RDZV_TEST_OUT": out, "RDZV_TOKEN_DIR": f"{out}/tokens",
               "OMPI_ALLOW_RUN_AS_ROOT": "1",
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self",
               "OMPI_MCA_oob_tcp_if_include": "lo", "OMPI_MCA_plm_rsh_agent": ""}
        p = start(["bash", os.path.join(SRC, "deploy", "rdzv.pbs")], env=env)
        rc, stdout, err = finish(p, timeout=90)
        self.assertEqual(rc, 0, stdout[-2000:] + err[-3000:])
        envs = read_envs(out)
        self.assertEqual(sorted(envs), [0, 1])
        self.assertEqual({e["TORCHELASTIC_RUN_ID"] for e in envs.values()}, {"4242.pbs"})
        self.assertEqual({e["GROUP_RANK"] for e in envs.values()}, {"0"})
        self.assertIn("token required", stdout)
        self.assertFalse(os.path.exists(os.path.join(out, "tokens", "token.4242.pbs")))


if __name__ == "__main__":
    main()
