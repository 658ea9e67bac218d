# SPDX-License-Identifier: Apache-2.0
"""A new user's first hour, scripted: torchrun's launch lines with torchrun
replaced by rdzv-agent, a worker killed, and the usual mistakes (another port, another run id,
a script bug on two nodes, Ctrl-C, a plain script under --recovery inplace, a --master_port
with nothing there, two agents of one job on one machine). Each scene asserts the line the user
sees and that it comes within its bound; they run side by side (each mostly waits on a clock).
Real rdzv-agents, the rdzvd they host, real Python workers (no torch: the messages are the
agent's), real signals."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import traceback

from agenttest import AGENT, AgentTestCase, finish, main, start
from replicatest import free_port_pair

PY = "/usr/bin/python3"

# The user's script: says who it is; then, by its argument, ends (hello), raises at once on
# every rank (bug), dies as it starts where FH_BAD is set and waits elsewhere (badnode), waits to
# be killed in generation 1 (wait), or fails rank 1 half a second in while rank 0 waits, in
# generation 1 (fail1). Generation 2 and later end at once (but badnode's).
SCRIPT = r'''
import os, sys, time
gen = int(os.environ.get("RDZV_GENERATION", "1"))
rank = int(os.environ["RANK"])
mode = sys.argv[1] if len(sys.argv) > 1 else "hello"
print("rank %d of %s in generation %d" % (rank, os.environ["WORLD_SIZE"], gen), flush=True)
if mode == "bug":
    raise SystemExit("train.py: KeyError: 'lr'")
if mode == "badnode":  # this node's GPU is broken: its workers die as they start
    if os.environ.get("FH_BAD"):
        time.sleep(0.3)
        raise SystemExit("CUDA error: unspecified launch failure")
    time.sleep(120)
if gen > 1 or mode == "hello":
    sys.exit(0)
with open(os.path.join(os.environ["FH_OUT"], "pid.%d" % rank), "w") as f:
    f.write(str(os.getpid()))
if mode == "fail1" and rank == 1:
    time.sleep(0.5)
    sys.exit(1)
time.sleep(120)
'''


def read(path):
    """The file's text, "" while it does not exist."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Run:
    """One rdzv-agent line as the user types it (torchrun's flags), its stderr read as it
    comes: wait_for(pattern, within) is when the user sees a line."""

    def __init__(self, case, args, out, env=None):
        self.t0 = time.monotonic()
        self.p = start([AGENT, *args], env={"FH_OUT": out, "PYTHON_EXEC": PY, **(env or {})})
        case.addCleanup(self.kill)
        self.err, self.cv = "", threading.Condition()
        self.out = ""
        threading.Thread(target=self.pump, args=("err", self.p.stderr), daemon=True).start()
        threading.Thread(target=self.pump, args=("out", self.p.stdout), daemon=True).start()

    def pump(self, name, f):
        for line in iter(f.readline, b""):
            with self.cv:
                setattr(self, name, getattr(self, name) + line.decode(errors="replace"))
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait_for(self, pattern, within):
        """The first match of pattern in stderr, seen within `within` s of the start (else
        AssertionError naming what was said); returns (match, seconds since the start)."""
        deadline = self.t0 + within
        with self.cv:
            while True:
                m = re.search(pattern, self.err)
                if m:
                    return m, time.monotonic() - self.t0
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no line matching %r within %.0f s; the agent said:\n%s"
                                         % (pattern, within, self.err[-4000:]))
                self.cv.wait(min(left, 0.5))

    def ends(self, within, rc=None):
        try:
            got = self.p.wait(timeout=max(0.1, self.t0 + within - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError("still running %.0f s after its start; it said:\n%s"
                                 % (within, self.err[-4000:]))
        time.sleep(0.1)  # the pumps' last lines
        if rc is not None and got != rc:
            raise AssertionError("exit %d, not %d; it said:\n%s" % (got, rc, self.err[-4000:]))
        return got

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


class FirstHour(AgentTestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="rdzv-first-hour-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.script = os.path.join(self.dir, "train.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def run_line(self, *args, sub=None, env=None):
        out = os.path.join(self.dir, sub or "x")
        os.makedirs(out, exist_ok=True)
        return Run(self, list(args), out, env)

    def c10d(self, port, run_id, nnodes=1, nproc=1):
        return ["--nnodes", str(nnodes), "--nproc_per_node", str(nproc), "--rdzv_backend",
                "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_id", run_id]

    # ---- the scenes: each raises AssertionError with what the user saw ----

    def scene_standalone(self):
        r = self.run_line("--standalone", "--nproc_per_node", "2", self.script)
        r.ends(20, rc=0)
        r.wait_for(r"job \S+ succeeded", 20)
        r.wait_for(r"job \S+: wall \d+\.\d s: start-up", 20)
        assert sorted(re.findall(r"rank (\d) of 2 in generation 1", r.out)) == ["0", "1"], r.out

    def scene_c10d_line_frees_its_port(self):
        # The rdzvd the agent hosted frees the port as its job ends: a torchrun started then
        # binds it.
        port = free_port()
        r = self.run_line(*self.c10d(port, "fh-c10d", nproc=2), self.script)
        r.ends(20, rc=0)
        t0 = time.monotonic()
        while True:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore's server
            try:
                s.bind(("127.0.0.1", port))
                s.close()
                break
            except OSError:
                s.close()
                if time.monotonic() - t0 > 1:
                    raise AssertionError("port %d still taken 1 s after the job" % port)
                time.sleep(0.05)

    def scene_static_two_nodes_on_one_machine(self):
        # torchrun's static line for two nodes, tried on one machine: each agent is told that
        # another agent of its job runs under its host name, with the --host to give.
        port = free_port()
        runs = [self.run_line("--nnodes", "2", "--node_rank", str(i), "--nproc_per_node", "1",
                              "--master_addr", "127.0.0.1", "--master_port", str(port),
                              self.script, sub="static%d" % i) for i in range(2)]
        for r in runs:
            r.ends(30, rc=0)
            r.wait_for(r"another agent of job \S+ runs on this host under the same name, (\S+) "
                       r"\(node id [^)]+\)[^\n]*give each agent its own --host \(--host \1-0", 30)

    def scene_one_node_of_an_elastic_job_names_no_replica(self):
        # A job of one node names no replica ("hosting rdzvd as the first of 3 replicas")
        # (--nnodes 1:3 plans 3 replicas, started as the job's hosts join: none came). Its
        # rdzvd takes port + 1 too (the Raft link): a pair free below the ephemeral ports.
        port = free_port_pair()
        r = self.run_line("--nnodes", "1:3", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                          "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_id", "fh-elastic",
                          "--last-call", "0.2", self.script, sub="elastic")
        r.ends(20, rc=0)
        r.wait_for(r"hosting rdzvd at 127\.0\.0\.1:%d" % port, 1)
        assert "replica" not in r.err, r.err

    def scene_nproc_past_the_node_is_said(self):
        # `--nproc` past what the node has is said. Past the CPUs the agent may run
        # on (taskset: one), or past the GPUs visible (CUDA_VISIBLE_DEVICES): one warning line,
        # and the job runs; at the node's count, none.
        def line(nproc, cvd, *pre):
            p = start([*pre, AGENT, "--standalone", "--nproc_per_node", str(nproc), "--",
                       "/bin/true"], env={"CUDA_VISIBLE_DEVICES": cvd})
            rc, _, err = finish(p, timeout=30)
            assert rc == 0, err
            return [x for x in err.splitlines() if "more workers than" in x]

        cpu = line(2, "", "taskset", "-c", "0")
        assert cpu and re.search(r"\[warn\]: --nproc_per_node 2 starts more workers than the 1 "
                                 r"CPU this agent may run on: [^\n]*give --nproc_per_node 1 or "
                                 r"fewer unless that is meant$", cpu[0]), cpu
        gpu = line(3, "0,1")
        assert gpu and re.search(r"--nproc_per_node 3 starts more workers than this node's 2 "
                                 r"GPUs: [^\n]*give --nproc_per_node 2 \(one a GPU\)", gpu[0]), gpu
        assert line(1, "", "taskset", "-c", "0") == [] and line(2, "0,1") == []

    def scene_worker_killed(self):
        port = free_port()
        r = self.run_line(*self.c10d(port, "fh-kill", nproc=2), "--max_restarts", "1",
                          self.script, "wait", sub="kill")
        pid_file = os.path.join(self.dir, "kill", "pid.1")
        deadline = time.monotonic() + 20
        while not read(pid_file):
            if time.monotonic() > deadline:
                raise AssertionError("worker rank 1 never started:\n" + r.err)
            time.sleep(0.05)
        killed = time.monotonic()
        os.kill(int(read(pid_file)), signal.SIGKILL)
        _, at = r.wait_for(r"restarting: root cause: worker rank 1 \(local rank 1\) on node rank 0 "
                           r"\(\S+\) was killed by signal 9", 60)
        assert r.t0 + at - killed < 3, "the restart said %.1f s after the kill" % (
            r.t0 + at - killed)
        r.ends(killed - r.t0 + 15, rc=0)
        r.wait_for(r"1 recover", 1)

    def scene_script_bug_on_two_nodes(self):
        # Before: the faster node's start-up failure stopped the other's workers before they
        # failed alike; it was judged a bad node, put aside, and the job waited 600 s.
        port = free_port()
        runs = [self.run_line(*self.c10d(port, "fh-bug", nnodes=2), "--host", h,
                              "--max_restarts", "2", self.script, "bug", sub="bug-" + h)
                for h in ("node-a", "node-b")]
        for r in runs:
            r.ends(30)
            r.wait_for(r"job fh-bug failed \(exit code 1\): root cause: worker rank \d "
                       r"\(local rank 0\) on node rank \d \(node-[ab]\) exited with code 1[^\n]*"
                       r"restart budget exhausted \(2 of 2", 1)
            # Said as pending ("put aside once its generation stopped, unless every node
            # failed alike"), never done.
            assert not re.search(r"is put aside by job|this node is put aside", r.err), r.err
            assert r.p.returncode == 1, r.err
            assert "train.py: KeyError: 'lr'" in r.err, r.err

    def scene_bad_node_put_aside_the_wait_says_so(self):
        # A node whose workers die as they start is put aside at its second failure; with no
        # spare the job waits for a node, and the agent left says so, not "another endpoint?".
        port = free_port()
        runs = [self.run_line(*self.c10d(port, "fh-badnode", nnodes=2), "--host", h,
                              "--max_restarts", "3", self.script, "badnode", sub="badnode-" + h,
                              env={"FH_BAD": "1"} if h == "gpu-bad" else None)
                for h in ("gpu-bad", "gpu-good")]
        bad, good = runs
        bad.ends(30, rc=69)
        bad.wait_for(r"put aside by job fh-badnode[^\n]*its workers failed at start-up 2 times",
                     1)
        _, at = good.wait_for(r"still waiting for job fh-badnode's nodes: 1 of --nnodes 2 "
                              r"joined \(\d+ s left before the join timeout\)\. The job ran "
                              r"generation 2 and lost a node since \(lost, or put aside: "
                              r"rdzvctl status says which\)", 30)
        assert "Are the others started" not in good.err, good.err
        sent = time.monotonic()
        good.p.send_signal(signal.SIGINT)
        good.ends(sent - good.t0 + 3, rc=130)

    def scene_waits_speak(self):
        # Another port (a typo) and another run id: each agent says within 10 s what it waits
        # for and what to check; Ctrl-C then ends each at once.
        p1, p2 = free_port(), free_port()
        runs = [(self.run_line(*self.c10d(p, "fh-typo", nnodes=2), self.script,
                               sub="typo%d" % p), "fh-typo", p) for p in (p1, p2)]
        p3 = free_port()
        runs += [(self.run_line(*self.c10d(p3, i, nnodes=2), "--host", i, self.script, sub=i),
                  i, p3) for i in ("fh-id-a", "fh-id-b")]
        for r, run_id, port in runs:
            r.wait_for(r"still waiting for job %s's nodes: 1 of --nnodes 2 joined \(\d+ s left "
                       r"before the join timeout\)\. Are the others started, with the same "
                       r"--rdzv_id %s and --rdzv_endpoint 127\.0\.0\.1:%d\?"
                       % (run_id, run_id, port), 15)
        for r, _, _ in runs:
            sent = time.monotonic()
            r.p.send_signal(signal.SIGINT)
            r.ends(sent - r.t0 + 3, rc=130)
            r.wait_for(r"received SIGINT from outside", sent - r.t0 + 3)

    def scene_ctrl_c_while_training(self):
        port = free_port()
        r = self.run_line(*self.c10d(port, "fh-ctrlc", nproc=2), self.script, "wait",
                          sub="ctrlc")
        pids = [os.path.join(self.dir, "ctrlc", "pid.%d" % i) for i in range(2)]
        deadline = time.monotonic() + 20
        while not all(read(p) for p in pids):
            if time.monotonic() > deadline:
                raise AssertionError("workers never started:\n" + r.err)
            time.sleep(0.05)
        sent = time.monotonic()
        r.p.send_signal(signal.SIGINT)
        r.ends(sent - r.t0 + 3, rc=130)
        for p in pids:
            pid = int(read(p))
            try:
                os.kill(pid, 0)
                raise AssertionError("worker %d outlived its agent's Ctrl-C" % pid)
            except ProcessLookupError:
                pass

    def scene_plain_script_in_place(self):
        port = free_port()
        r = self.run_line(*self.c10d(port, "fh-inplace", nproc=2), "--recovery", "inplace",
                          "--max_restarts", "1", self.script, "fail1", sub="inplace")
        r.wait_for(r"--recovery inplace: no worker here has said it follows rdzv's control "
                   r"channel[^\n]*restarts the whole generation here", 20)
        r.ends(30, rc=0)
        assert r.err.count("no worker here has said it follows") == 1, r.err

    def scene_master_port_with_nothing_there(self):
        port = free_port()
        r = self.run_line("--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "1",
                          "--master_addr", "127.0.0.1", "--master_port", str(port),
                          "--connect-timeout", "3", self.script, sub="nothere")
        r.ends(10, rc=68)  # no rdzvd answered
        r.wait_for(r"check --master_addr/--master_port", 10)
        assert "--endpoint" not in r.err, r.err

    def test_the_first_hour(self):
        scenes = [getattr(self, n) for n in dir(self) if n.startswith("scene_")]
        failed = {}

        def play(scene):
            try:
                scene()
            except BaseException:  # noqa: B036 -- every scene's failure is reported below
                failed[scene.__name__] = traceback.format_exc()

        threads = [threading.Thread(target=play, args=(s,)) for s in scenes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failed, {}, "\n\n".join("%s:\n%s" % kv for kv in failed.items()))


if __name__ == "__main__":
    main()
