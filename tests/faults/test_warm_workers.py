# SPDX-License-Identifier: Apache-2.0
"""Warm restarts (rdzv-agent --warm-workers): 2 agents x 2 workers of the plain
gloo DDP script (plain_ddp.py: no rdzv import) against a real rdzvd, Debian's torch 1.13, under
--recovery restart. Each agent keeps a standby interpreter per local rank (python/rdzv/standby.py,
found from the source tree as the tests find rdzv.torch); a worker SIGKILLed at step 3: every
worker of the next generation is the standby that waited for its rank (its pid is the standby's,
it is in the workers' cgroup), the job ends with every step and the restart count, and no
standby is left once the agents exit. A command that is not a Python script rdzv-agent starts
(after --) gets the documented warning and runs cold."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import test_inplace_faults as ipf
from faulttest import AGENT, FAST, FaultTestCase, main, pid_alive, rdzvtest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "plain_ddp.py")
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
PYTHON = "/usr/bin/python3"
STEPS = 30
STANDBY_RE = re.compile(r"--warm-workers: standby of local rank (\d+) started \(pid (\d+)\)")
WARM_RE = re.compile(r"started worker rank \d+ \(local rank (\d+), pid (\d+)\)( in its warm "
                     r"standby)?")
CGROUP_RE = re.compile(r"workers run in cgroup (\S+) ")


# What the script sees of its start, then an uncaught exception.
PROBE = """import json, os, sys
import rdzv
m = sys.modules["__main__"]
print(json.dumps({"argv": sys.argv, "file": __file__, "name": __name__, "spec": repr(__spec__),
                  "loader": type(__loader__).__name__, "main": m is sys.modules[__name__],
                  "path0": sys.path[0], "cwd": os.getcwd(), "env": sorted(os.environ),
                  "fds": sorted(int(f) for f in os.listdir("/proc/self/fd") if int(f) < 5),
                  "progress": rdzv.progress_fd(), "rank": os.environ["RANK"]}), flush=True)
def fail():
    raise RuntimeError("probe")
fail()
"""


# A worker that waits until killed, and exits 0 once restarted; it says how it runs.
LONG_THEN_SHORT = """import os, sys, time
n = os.environ["TORCHELASTIC_RESTART_COUNT"]
print("restart", n, "unbuffered", "-u" in sys.orig_argv, "optimize", sys.flags.optimize,
      flush=True)
if n == "0":
    time.sleep(120)
"""


def waiting_in_recvmsg(pid):
    """Whether pid (a standby) waits on its socket (/proc/PID/syscall, x86_64 recvmsg)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == "47"
    except (OSError, IndexError):
        return False


def have_torch():
    return subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True,
                          timeout=120).returncode == 0


class WarmWorkers(FaultTestCase):
    def setUp(self):
        super().setUp()
        if not os.access(PYTHON, os.X_OK) or not have_torch():
            self.skipTest("needs Debian's python3-torch")
        self.start_daemon()

    def agent(self, name, *args, cmd, cwd=None, env=None):
        env = dict(ipf.agent_env(), PYTHON_EXEC=PYTHON, PYTHONPATH=os.path.abspath(PYTHON_DIR),
                   **(env or {}))
        if os.environ.get("RDZV_PYTHON_HOOKS_DIR"):  # the Python hooks of the source tree
            env["RDZV_PYTHON_HOOKS_DIR"] = os.environ["RDZV_PYTHON_HOOKS_DIR"]
        out, err = (os.path.join(self.dir, f"{name}.{s}") for s in ("out", "err"))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen([AGENT, "--endpoint", self.ep, *FAST, *args, *cmd], env=env,
                                 stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, cwd=cwd,
                                 start_new_session=True)
        rdzvtest.track(p, group=True)
        self.addCleanup(self._reap, p)
        return ipf.Agent(p, out, err)

    def dump(self, agents):
        return "".join(f"\n--- agent {i} ---\n{a.log()[-6000:]}" for i, a in enumerate(agents))

    def wait_for(self, pred, what, agents, timeout=90):
        deadline = time.monotonic() + timeout * ipf.SLOW
        while not pred():
            if time.monotonic() > deadline or any(a.p.poll() is not None for a in agents):
                self.fail(f"{what}: not seen" + self.dump(agents))
            time.sleep(0.05)

    def test_1_a_killed_worker_restarts_in_the_standbys(self):
        agents = [self.agent("ab"[i], "--rdzv-id", "warm", "--nproc", "2", "--nnodes", "2",
                             "--node-rank", str(i), "--max-restarts", "1", "--recovery",
                             "restart", "--restart-backoff", "0", "--warm-workers",
                             cmd=[SCRIPT, str(STEPS)]) for i in (0, 1)]
        # the standbys started after generation 1's workers: 2 per agent with those of the start
        self.wait_for(lambda: all(len(STANDBY_RE.findall(a.log())) >= 4 for a in agents),
                      "the standbys of generation 2", agents)
        self.wait_for(lambda: 3 in agents[0].steps(), "step 3", agents)
        standby = [{int(lr): int(pid) for lr, pid in STANDBY_RE.findall(a.log())[2:4]}
                   for a in agents]
        gen1 = [WARM_RE.findall(a.log())[:2] for a in agents]
        victim = int(gen1[1][1][1])
        os.kill(victim, signal.SIGKILL)
        self.wait_for(lambda: all(len(WARM_RE.findall(a.log())) >= 4 for a in agents),
                      "generation 2's workers", agents)
        dump = self.dump(agents)
        for a, sb in zip(agents, standby):
            gen2 = WARM_RE.findall(a.log())[2:4]
            self.assertEqual({int(lr): int(pid) for lr, pid, _ in gen2}, sb,
                             "generation 2's workers are the standbys" + dump)
            self.assertTrue(all(w for _, _, w in gen2), dump)
            m = CGROUP_RE.search(a.log())
            for _, pid, _ in gen2:
                if m and pid_alive(int(pid)):
                    with open(f"/proc/{pid}/cgroup") as f:
                        self.assertIn(m.group(1), f.read(), "in the workers' cgroup" + dump)
        for a in agents:
            self.assertEqual(a.p.wait(timeout=120 * ipf.SLOW), 0, "the job exits 0" + dump)
        dump = self.dump(agents)
        for a in agents:  # the Python hooks report the steps of the workers in standbys too
            cost = re.findall(r"wall [0-9.]+ s: .*", a.log())
            self.assertTrue(cost, dump)
            self.assertNotIn("?", cost[-1], "steps seen after the warm restart" + dump)
        steps = agents[0].steps()
        self.assertEqual(steps[steps.index(1, 1):], list(range(1, STEPS + 1)),
                         "generation 2 ran every step" + dump)
        done = [o for o in agents[0].rank0() if o.get("event") == "done"]
        self.assertEqual([(d["step"], d["world"], d["restart"]) for d in done],
                         [(STEPS, 4, 1)], dump)
        # every standby (generation 3's, unused, among them) is gone with its agent
        pids = [int(p) for a in agents for _, p in STANDBY_RE.findall(a.log())]
        self.assertEqual(len(pids), 12, dump)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual([p for p in pids if pid_alive(p)], [], "no standby left" + dump)

    def test_3_a_worker_in_its_standby_sees_what_a_fresh_one_sees(self):
        """The same probe script, once cold and once in its standby (the first generation's,
        started with the agent): sys.argv, __main__, sys.path[0], the working directory, the
        environment's names, the descriptors, the exit status, and rdzv's progress channel
        (import rdzv after the takeover finds it) are the same; its traceback shows only the
        script's frames."""
        probe = os.path.join(self.dir, "sub", "probe.py")
        os.mkdir(os.path.dirname(probe))
        with open(probe, "w") as f:
            f.write(PROBE)
        seen = {}
        for mode in ("cold", "warm"):
            a = self.agent(mode, "--rdzv-id", mode, "--nnodes", "1", "--nproc", "1",
                           *(["--warm-workers"] if mode == "warm" else []),
                           cmd=["sub/probe.py", "x", "y"], cwd=self.dir)
            a.p.wait(timeout=60 * ipf.SLOW)
            out = [ln[len("[rank0]: "):] for ln in a._read(a.out).splitlines()]
            self.assertTrue(out, a.log())
            seen[mode] = (json.loads(out[0]), a.log())
        (cold, cold_log), (warm, warm_log) = seen["cold"], seen["warm"]
        self.assertIn("in its warm standby", warm_log)
        self.assertEqual(warm, cold, warm_log)
        self.assertEqual(cold["progress"], 3, cold_log)
        for log in (cold_log, warm_log):
            self.assertIn("exited with status 1", log)
            tb = [ln for ln in log.splitlines() if ln.startswith("[rank0]: ")]
            self.assertEqual(tb[:2], ["[rank0]: Traceback (most recent call last):",
                                      '[rank0]:   File "%s", line 11, in <module>' % probe], log)

    def test_2_a_command_that_is_not_a_python_script_starts_cold(self):
        for name, cmd, said in (
                ("c", ["--", PYTHON, "-c", "print('cold')"],
                 "--warm-workers: %s cannot wait in a warm standby: -c runs a command, not a "
                 "script; the workers start cold" % PYTHON),
                ("sh", ["--", "/bin/sh", "-c", "echo cold"],
                 "--warm-workers: the workers are not a Python script or module (a command "
                 "that is not python, rdzv-train): they start cold; give the script itself")):
            a = self.agent(name, "--rdzv-id", "cold" + name, "--nnodes", "1", "--nproc", "1",
                           "--warm-workers", cmd=cmd)
            self.assertEqual(a.p.wait(timeout=60 * ipf.SLOW), 0, a.log())
            log = a.log()
            self.assertIn(said, log)
            self.assertNotIn("standby of local rank", log)
            self.assertIn("[rank0]: cold", a._read(a.out))

    def test_4_every_python_form_after_the_dashes_restarts_warm(self):
        """The README's own form, `-- python3 script.py` (issue 72, case 2), and `-u`, `-m
        MODULE` and a virtual environment's python3: a worker SIGKILLed once the next standby
        waits restarts in that standby (its pid, "in its warm standby"), with its interpreter's
        options."""
        tmp = self.dir
        with open(os.path.join(tmp, "warmmod.py"), "w") as f:
            f.write(LONG_THEN_SHORT)
        script = os.path.join(tmp, "warmmod.py")
        bindir = os.path.join(tmp, "bin")  # "python3" from PATH is Debian's, with its torch
        os.mkdir(bindir)
        os.symlink(PYTHON, os.path.join(bindir, "python3"))
        venv = os.path.join(tmp, "venv")
        subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                       check=True, capture_output=True, timeout=120)
        path = dict(PATH=bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"))
        for name, cmd in (("plain", ["python3", script]), ("u", [PYTHON, "-u", script]),
                          ("m", ["python3", "-m", "warmmod"]),
                          ("venv", [os.path.join(venv, "bin", "python3"), "-O", script])):
            a = self.agent(name, "--rdzv-id", "form-" + name, "--nnodes", "1", "--nproc", "1",
                           "--max-restarts", "1", "--recovery", "restart", "--restart-backoff",
                           "0", "--warm-workers", cmd=["--", *cmd], cwd=tmp, env=path)
            self.wait_for(lambda: len(STANDBY_RE.findall(a.log())) >= 2 and
                          len(WARM_RE.findall(a.log())) >= 1, f"{name}: a worker and a standby",
                          [a])
            nxt = int(STANDBY_RE.findall(a.log())[1][1])
            self.wait_for(lambda: waiting_in_recvmsg(nxt), f"{name}: the standby waits", [a])
            os.kill(int(WARM_RE.findall(a.log())[0][1]), signal.SIGKILL)
            self.assertEqual(a.p.wait(timeout=60 * ipf.SLOW), 0, a.log())
            log = a.log()
            self.assertNotIn("start cold", log)
            gen2 = WARM_RE.findall(log)[1]
            self.assertEqual((int(gen2[1]), gen2[2]), (nxt, " in its warm standby"), log)
            out = a._read(a.out)
            self.assertIn("restart 1 unbuffered %s optimize %d" % (name == "u", name == "venv"),
                          out, log)


if __name__ == "__main__":
    sys.exit(main())
