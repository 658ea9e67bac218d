# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent under Grid Engine. What it takes of a job's environment: its run id is
JOB_ID (JOB_ID.SGE_TASK_ID in an array job), its node count NHOSTS (mpirun's process count under
mpirun), its node rank its host's line of the parallel environment's PE_HOSTFILE (a preference,
as SLURM_NODEID is, a host on two queues one node); JOB_ID alone (with SGE_ROOT, as in any login
shell) is no Grid Engine job (read through --print-launch, as the agent resolves them). And on a
real Grid Engine of three hosts (tests/sge/local-sge.sh: Debian's Son of Grid Engine, a qmaster
and an execd a host, each host a network namespace with its own name): deploy/rdzv.sge submitted
with qsub runs a gloo DDP script on two hosts, and rdzvd as three replicas on three; a worker
killed mid-run restarts the job; a host whose health check fails is put aside and its queue
instance, its only, disabled (qmod -d), every one of them when the host gives slots from two;
qdel ends the job with no process left on any host, and the next job removes the secret it left;
an ABCI-style mpirun line starts the agents."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from agenttest import AGENT, AgentTestCase, agent_cmd, main
import rdzvtest
from rdzvtest import RDZVD

SRC = os.environ.get("RDZV_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
LOCAL_SGE = os.path.join(SRC, "tests", "sge", "local-sge.sh")
TEMPLATE = os.path.join(SRC, "deploy", "rdzv.sge")
DDP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "tr_ddp.py")
PYTHON = "/usr/bin/python3"  # Debian's, with its torch

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

    def test_under_mpirun_the_agents_count_the_nodes(self):
        # mpirun's task on another host of a Grid Engine job: NHOSTS 1 (its own), no hostfile of
        # its own; mpirun's process count (one agent a node) is the node count.
        env = {"JOB_ID": "31", "SGE_O_WORKDIR": "/home/u", "NHOSTS": "1", "NSLOTS": "1",
               "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2"}
        rc, got, err = launch(env)
        self.assertEqual(rc, 0, err)
        self.assertEqual((got["run_id"], got["node_rank"], got["nnodes_min"], got["nnodes_max"]),
                         ("31", 2, 3, 3))
        # A count that is none is passed over: the next one.
        rc, got, err = launch(dict(env, NHOSTS="4", OMPI_COMM_WORLD_SIZE="0"))
        self.assertEqual((rc, got["nnodes_min"], got["nnodes_max"]), (0, 4, 4), err)
        # --standalone runs one node whatever the launcher counts (mpirun -N 1 torchrun
        # --standalone: a job a node); a count the user gives is refused.
        for e in ({"OMPI_COMM_WORLD_SIZE": "2"}, {"SLURM_NNODES": "3"}):
            r = subprocess.run([AGENT, "--print-launch", "--standalone", "--", "true"],
                               env=dict(os.environ, **e), capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = json.loads(r.stdout)
            self.assertEqual((got["nnodes_min"], got["nnodes_max"], got["standalone"]),
                             (1, 1, True))
        r = subprocess.run([AGENT, "--print-launch", "--standalone", "--nnodes", "2", "--",
                            "true"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--standalone runs one node", r.stderr)

    def test_job_id_alone_is_no_grid_engine_job(self):
        # JOB_ID and SGE_ROOT are in every login shell of a Grid Engine cluster: no job.
        rc, got, err = launch({"JOB_ID": "4242", "NHOSTS": "3",
                               "SGE_ROOT": "/var/lib/gridengine"})
        self.assertEqual(rc, 2, err)
        self.assertIn("no job id: pass --rdzv-id ID", err)
        self.assertIn("Grid Engine", err)


class RealGridEngine(AgentTestCase):
    """Jobs through a real qmaster and three exec hosts (network namespaces ge1..ge3, each with
    its own name and address: tests/sge/local-sge.sh). One Grid Engine per machine: this test runs
    in the unsanitized build only (tests/meson.build)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0 or not shutil.which("ip"):
            raise unittest.SkipTest("a local Grid Engine's hosts need root and iproute2 (.ci/run "
                                    "runs as root)")
        cls.sgedir = tempfile.mkdtemp(prefix="rdzv-sge-")
        # also when meson times the test out (tearDownClass does not run then)
        rdzvtest.on_exit(lambda: subprocess.run(["bash", LOCAL_SGE, "stop", cls.sgedir],
                                                capture_output=True, timeout=60))
        r = subprocess.run(["bash", LOCAL_SGE, "start", cls.sgedir], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("local-sge.sh start failed:\n" + r.stdout + r.stderr)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["bash", LOCAL_SGE, "stop", cls.sgedir], capture_output=True, timeout=60)
        shutil.rmtree(cls.sgedir, True)
        super().tearDownClass()

    def sge(self, *cmd, host="ge1", **kw):
        """A command on one of the Grid Engine's hosts (the clients there: the hosts' names
        resolve there only)."""
        return subprocess.run([os.path.join(self.sgedir, "on"), host, *cmd], capture_output=True,
                              text=True, **kw)

    def qsub(self, *cmd, cwd):
        """qsub CMD...; a job that outlives 120 s is deleted (with any other: the next tests
        need the hosts) and the test fails."""
        try:
            return self.sge(*cmd, cwd=cwd, timeout=120)
        except subprocess.TimeoutExpired:
            self.sge("qdel", "-f", "-u", "*", timeout=30)
            self.fail("qsub %s: no end within 120 s" % " ".join(cmd[1:]))

    def queue_states(self):
        """{host: its queue instance's state ('' when open)}."""
        q = self.sge("qstat", "-f", "-q", "all.q", timeout=30)
        self.assertEqual(q.returncode, 0, q.stderr)
        return {ln.split()[0].split("@")[1]: (ln.split()[5] if len(ln.split()) > 5 else "")
                for ln in q.stdout.splitlines() if ln.startswith("all.q@")}

    def submit(self, out, *args, env=None, sync=True, nhosts=2):
        """qsub deploy/rdzv.sge (-pe rdzv NHOSTS) with the build's binaries; its output in
        OUT/job.out. sync: wait for the job (qsub -sync y), returning (exit status, output);
        else (job id, None)."""
        v = {"RDZV_BIN": os.path.dirname(AGENT), "RDZV_TOKEN_DIR": os.path.join(out, "tok"),
             "RDZV_TEST_OUT": out, **(env or {})}
        cmd = ["qsub", "-terse", "-cwd", "-o", os.path.join(out, "job.out"), "-j", "y", "-pe",
               "rdzv", str(nhosts), "-v", ",".join("%s=%s" % kv for kv in v.items())]
        if sync:
            cmd += ["-sync", "y"]
        r = self.qsub(*cmd, TEMPLATE, "--", *args, cwd=out)
        if not sync:
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout.strip(), None
        with open(os.path.join(out, "job.out")) as f:
            return r.returncode, f.read()

    def node_hosts(self, log, nnodes):
        """{node rank: host} from the agents' 'generation 1: node rank R of N' lines."""
        got = dict((int(r), h) for h, r in re.findall(
            r"gen=1 node=(\S+) generation 1: node rank (\d+) of %d," % nnodes, log))
        self.assertEqual(sorted(got), list(range(nnodes)), log)
        return got

    def need_torch(self):
        if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
            self.skipTest("needs Debian's torch (python3-torch) for %s" % PYTHON)

    def test_template_runs_a_ddp_job_on_two_hosts(self):
        self.need_torch()
        out = self.outdir()
        rc, log = self.submit(out, PYTHON, DDP, out, env={"RDZV_NPROC": "2"})
        self.assertEqual(rc, 0, log)
        jobid = log.split("token.")[1].split(")")[0]
        self.assertRegex(log, r"rdzv\.sge: rdzvd at ge\d:\d+ \(hosted by the agent there\), 2 "
                              r"hosts, ")
        hosts = self.node_hosts(log, 2)
        # PyTorch's store clients from the job's two hosts (geN is 10.243.5.N), not the third.
        allow = re.search(r"TCPStore clients from (\S+)\n", log).group(1).split(",")
        self.assertEqual(allow[:2], ["127.0.0.0/8", "::1"], log)
        self.assertEqual(sorted(allow[2:]), sorted("10.243.5.%s/32" % h[2:]
                                                   for h in hosts.values()), log)
        self.assertNotEqual(hosts[0], hosts[1], log)
        self.assertRegex(log, r"rdzvd at %s:" % hosts[0])  # the first host of the allocation
        self.assertRegex(log, r"job %s succeeded" % jobid)
        params = set()
        for rank in range(4):
            with open(os.path.join(out, "ddp.%d.json" % rank)) as f:
                got = json.load(f)
            self.assertEqual((got["rank"], got["local_rank"], got["world"]), (rank, rank % 2, 4))
            params.add(got["params"])
        self.assertEqual(len(params), 1, "DDP replicas differ: %s" % params)
        self.assertFalse(os.path.exists(os.path.join(out, "tok", "token." + jobid)),
                         "the job's token outlived it")

    def test_three_hosts_run_rdzvd_as_three_replicas(self):
        out = self.outdir()
        # The others start as their hosts join, while the job runs: the workers wait (30 s at
        # most) until an agent says that three run (the agents' lines go to job.out as said).
        rc, log = self.submit(out, "/bin/sh", "-c",
                              'echo "$RANK $GROUP_RANK $(hostname)" > "$RDZV_TEST_OUT/rank.$RANK";'
                              ' i=0; until grep -q "rdzvd runs 3 replicas so far" '
                              '"$RDZV_TEST_OUT/job.out" || [ $i = 300 ]; do sleep 0.1; '
                              'i=$((i + 1)); done',
                              nhosts=3)
        self.assertEqual(rc, 0, log)
        hosts = self.node_hosts(log, 3)
        self.assertEqual(sorted(hosts.values()), ["ge1", "ge2", "ge3"], log)
        self.assertIn("rdzvd runs 3 replicas so far", log)
        for rank in range(3):
            with open(os.path.join(out, "rank.%d" % rank)) as f:
                self.assertEqual(f.read().split(), [str(rank), str(rank), hosts[rank]])

    def test_worker_killed_mid_run_restarts_the_job(self):
        out = self.outdir()
        rc, log = self.submit(out, "/bin/sh", "-c",
                              'if [ "$RDZV_GENERATION" = 1 ] && [ "$RANK" = 1 ]; then '
                              'echo "step 1" >&"$RDZV_PROGRESS_FD"; sleep 0.5; kill -9 $$; fi; '
                              'echo "$RDZV_GENERATION" >> "$RDZV_TEST_OUT/gen.$RANK"',
                              env={"RDZV_MAX_RESTARTS": "1"})
        self.assertEqual(rc, 0, log)
        hosts = self.node_hosts(log, 2)
        self.assertRegex(log, r"restarting: root cause: worker rank 1 \(local rank 0\) on node "
                              r"rank 1 \(%s\) was killed by signal 9" % hosts[1])
        for rank in (0, 1):
            with open(os.path.join(out, "gen.%d" % rank)) as f:
                self.assertEqual(f.read().split(), ["2"] if rank else ["1", "2"])

    def test_bad_node_is_put_aside_and_its_queue_disabled(self):
        out = self.outdir()
        # The second host's health check fails (a GPU lost, say): that node is put aside and,
        # asked, drained; the other waits for a replacement, none comes, and the job ends.
        check = os.path.join(out, "check.sh")
        with open(check, "w") as f:
            f.write('#!/bin/sh\n[ "$(hostname)" = "$(awk \'NR == 1 { print $1 }\' '
                    '"$PE_HOSTFILE")" ] && exit 0\necho GPU lost on $(hostname)\nexit 1\n')
        os.chmod(check, 0o755)
        for h in ("ge1", "ge2", "ge3"):  # whichever the job disables, for the next tests
            self.addCleanup(self.sge, "qmod", "-e", "all.q@" + h, timeout=30)
        rc, log = self.submit(out, "/bin/sh", "-c", "exit 0",
                              env={"RDZV_HEALTH_CHECK": check, "RDZV_ON_BAD_NODE": "drain",
                                   "RDZV_JOIN_TIMEOUT": "5"})
        bad = re.search(r"GPU lost on (ge\d)", log)
        self.assertTrue(bad, log)
        bad = bad.group(1)
        self.assertNotEqual(rc, 0, log)
        self.assertRegex(log, r"node=%s --on-bad-node drain: disabling Grid Engine queue "
                              r"instance all\.q@%s \(rdzv: " % (bad, bad))
        states = self.queue_states()
        self.assertEqual(states[bad], "d", states)  # disabled by qmod -d: that host only
        self.assertEqual([s for h, s in states.items() if h != bad], ["", ""], states)

    def test_a_host_on_two_queues_is_disabled_in_both(self):
        # A host that gives the job slots from two queues has two lines in PE_HOSTFILE: a drain
        # disables both queue instances, or the second keeps scheduling the bad host. The
        # qmaster's second queue b.q is real; the hostfile is written as the scheduler writes
        # one for such an allocation (which queue a slot comes from is the scheduler's choice).
        out = self.outdir()
        queue = os.path.join(out, "b.q")
        with open(queue, "w") as f:
            f.write(re.sub(r"(?m)^qname( +)all\.q$", r"qname\1b.q",
                           self.sge("qconf", "-sq", "all.q", timeout=30).stdout))
        r = self.sge("qconf", "-Aq", queue, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.addCleanup(self.sge, "qconf", "-dq", "b.q", timeout=30)
        for q in ("all.q@ge2", "b.q@ge2"):
            self.addCleanup(self.sge, "qmod", "-e", q, timeout=30)
        pe = os.path.join(out, "pe_hostfile")
        with open(pe, "w") as f:
            f.write("ge1 1 all.q@ge1 UNDEFINED\nge2 1 all.q@ge2 UNDEFINED\n"
                    "ge2 1 b.q@ge2 UNDEFINED\n")
        # Its health check fails before it joins: put aside here, no rdzvd needed.
        r = self.sge("env", "JOB_ID=9", "PE_HOSTFILE=" + pe, "NHOSTS=2",
                     *agent_cmd("127.0.0.1:1", "--nproc", "1", "--health-check",
                                "echo GPU lost; exit 1", "--on-bad-node", "drain", "--nccl",
                                "off", worker=["true"]), host="ge2", timeout=60)
        self.assertEqual(r.returncode, 69, r.stderr[-3000:])
        self.assertIn("--on-bad-node drain: disabling Grid Engine queue instances "
                      "all.q@ge2,b.q@ge2 (rdzv: ", r.stderr)
        states = {}
        for q in ("all.q", "b.q"):
            st = self.sge("qstat", "-f", "-q", q, timeout=30)
            self.assertEqual(st.returncode, 0, st.stderr)
            states.update({ln.split()[0]: (ln.split()[5] if len(ln.split()) > 5 else "")
                           for ln in st.stdout.splitlines() if ln.startswith(q + "@")})
        self.assertEqual((states["all.q@ge2"], states["b.q@ge2"]), ("d", "d"), states)
        self.assertEqual(states["all.q@ge1"], "", states)

    def test_an_abci_style_mpirun_line_runs_the_agents(self):
        # ABCI's job scripts: mpirun over the allocation's hosts (OpenMPI's Grid Engine support
        # starts its daemons with qrsh -inherit), MASTER_ADDR the first host; rdzv-agent in place
        # of the Python launcher, one a host, as the running guide says.
        if not shutil.which("mpirun"):
            self.skipTest("needs OpenMPI's mpirun (openmpi-bin)")
        self.need_torch()
        out = self.outdir()
        script = os.path.join(out, "abci.sh")
        with open(script, "w") as f:
            f.write("""#!/bin/bash
#$ -S /bin/bash
set -eu
SGE_JOB_HOSTLIST=$TMP/hostlist # ABCI's: the hosts, one a line
awk '{ print $1 }' "$PE_HOSTFILE" >"$SGE_JOB_HOSTLIST"
export MASTER_ADDR=$HOSTNAME
mpirun --allow-run-as-root -np "$NHOSTS" -N 1 -x MASTER_ADDR -x PATH \\
  -hostfile "$SGE_JOB_HOSTLIST" \\
  "$RDZV_BIN/rdzv-agent" --nproc 2 --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:29500" \\
  -- "$@"
""")
        path = "%s:/usr/bin:/bin" % os.path.dirname(RDZVD)
        r = self.qsub("qsub", "-terse", "-sync", "y", "-cwd", "-o", os.path.join(out, "job.out"),
                      "-j", "y", "-pe", "rdzv", "2", "-v",
                      "RDZV_BIN=%s,PATH=%s" % (os.path.dirname(AGENT), path), script, PYTHON,
                      DDP, out, cwd=out)
        with open(os.path.join(out, "job.out")) as f:
            log = f.read()
        self.assertEqual(r.returncode, 0, log)
        jobid = r.stdout.split()[0]
        hosts = self.node_hosts(log, 2)
        self.assertNotEqual(hosts[0], hosts[1], log)
        self.assertRegex(log, r"hosting rdzvd at 10\.243\.5\.\d:29500")
        self.assertIn("job=%s gen=1 node=%s job %s succeeded" % (jobid, hosts[1], jobid), log)
        for rank in range(4):
            with open(os.path.join(out, "ddp.%d.json" % rank)) as f:
                self.assertEqual(json.load(f)["world"], 4)

    def test_qdel_ends_the_job_with_nothing_left(self):
        out = self.outdir()
        jobid, _ = self.submit(out, "/bin/sh", "-c",
                               'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; exec sleep 300',
                               env={"RDZV_NPROC": "2"}, sync=False)
        pids = [os.path.join(out, "pid.%d" % r) for r in range(4)]
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
        while True:  # the agents, the rdzvd one hosted: Grid Engine's to end, on both hosts
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
        rc, log = self.submit(out, "/bin/true", nhosts=1)
        self.assertEqual(rc, 0, log)
        self.assertFalse(os.path.exists(token), "job %s's secret left after the next job" % jobid)


if __name__ == "__main__":
    main()
