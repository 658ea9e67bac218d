# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent's Python hooks (python/rdzv/hooks, rdzv._hooks): an
unmodified PyTorch script gets its steps, a hang's verdict, its error on every node and an honest
cost. Real rdzvd, real agents, Debian's python3 (torch 1.13; the -torch2.6 variant runs the
same under torch 2.6's global optimizer hooks)."""
import datetime
import json
import os
import re
import signal
import subprocess
import time
import unittest
import urllib.request

import agenttest
from agenttest import AGENT, RDZVCTL, agent_cmd, finish, job_status, start, wait_output

PLAIN_DDP = os.path.join(agenttest.SRC, "tests", "faults", "plain_ddp.py")
PY = "/usr/bin/python3"

# A plain DDP script (no rdzv import) with a stopwatch: rank 0 prints {"step": N, "t": unix time}
# after each optimizer step; each rank writes its pid to $RDZV_TEST_OUT/pid.RANK; with RAISE_AT,
# rank 0 raises at that step (line 20: the frame the error names).
STOPWATCH = r'''import json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps, pause = int(sys.argv[1]), float(sys.argv[2])
raise_at = int(os.environ.get("RAISE_AT", "0"))
dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(os.environ["RDZV_TEST_OUT"], "pid.%d" % rank), "w") as f:
    f.write(str(os.getpid()))
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, steps + 1):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step == raise_at:
        raise RuntimeError("shapes do not match: [4, 8] and [9, 1]")
    if rank == 0:
        print(json.dumps({"step": step, "t": time.time()}), flush=True)
    time.sleep(pause)
'''
# The error rank 0 dies of, as the root cause says it on every node: the script's line 20.
ERROR = r"RuntimeError: shapes do not match: \[4, 8\] and \[9, 1\] \(train\.py:20\)"
COST_RE = re.compile(r"job \S+: wall ([\d.]+) s: start-up ([\d.?]+)(?: s)? .*?, training "
                     r"([\d.?]+)(?: s)?.*?, (\d+) recover(?:y|ies) ([\d.]+) s \(\d+%: detect "
                     r"([\d.]+), stop ([\d.]+), rendezvous ([\d.]+), nccl ([\d.]+), first step "
                     r"([\d.?]+)")


def steps_of(out):
    """Rank 0's stopwatch: [(step, unix time)] from an agent's stdout."""
    return [(d["step"], d["t"]) for d in (json.loads(m) for m in
                                          re.findall(r"(?m)^\[rank0\]: (\{.*\"t\".*\})$", out))]


class PythonHooks(agenttest.AgentTestCase):
    def setUp(self):
        super().setUp()
        self.out = self.outdir()
        self.script = os.path.join(self.out, "train.py")
        with open(self.script, "w") as f:
            f.write(STOPWATCH)

    def env(self, **kw):
        return {"RDZV_TEST_OUT": self.out, **kw}

    def test_plain_script_steps_on_the_status_page(self):
        """tests/faults/plain_ddp.py as it is: each rank's steps reach rdzvd (rdzvctl status
        and the status page's /status.json), counted by the hooks from its optimizer."""
        d, mport = self.daemon_with_metrics()
        ep = f"127.0.0.1:{d.port}"
        p = start(agent_cmd(ep, "--rdzv-id", "hooks", "--nnodes", "1", "--nproc", "2",
                            "--nccl", "off", worker=[PY, PLAIN_DDP, "400"]))
        self.addCleanup(p.kill)
        deadline = time.monotonic() + 60
        ranks = {}
        while time.monotonic() < deadline and len(ranks) < 2:
            job = job_status(ep, "hooks") or {}
            ranks = {r["rank"]: r["step"] for r in job.get("ranks", []) if r["step"] >= 3}
            time.sleep(0.1)
        self.assertEqual(sorted(ranks), [0, 1], "no steps reached rdzvd: %s" % job)
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/status.json",
                                                timeout=5) as r:
            page = json.loads(r.read())
        job = next(j for j in page["jobs"] if j["run_id"] == "hooks")
        self.assertEqual(sorted(r["rank"] for r in job["ranks"] if r["step"] >= 3), [0, 1], job)
        p.send_signal(signal.SIGTERM)
        finish(p)

    def test_a_stopped_rank_is_failed_not_the_one_waiting_on_it(self):
        """Rank 1 SIGSTOPped mid-training: rank 0, blocked in the all-reduce on it, says "wait"
        (the hooks watch its frame), so rank 1 is the one failed after --progress-timeout, with
        the Python frame it was stopped in (continued for its dump: it is failed anyway)."""
        p = start([AGENT, "--standalone", "--nproc", "2", "--progress-timeout", "2", "--",
                   PY, self.script, "100000", "0.05"], env=self.env())
        wait_output(p, r'"step": 5,')
        with open(os.path.join(self.out, "pid.1")) as f:
            os.kill(int(f.read()), signal.SIGSTOP)
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 2\.\d s after step \d+, in \S+ "
                              r"\(\S+\.py:\d+\), stopped \(SIGSTOP\)")
        self.assertNotRegex(err, r"worker rank 0 \(local rank 0\) made no progress")

    def test_the_error_on_every_node(self):
        """Rank 0 of a 2-node job raises: both agents' last lines, rdzvctl status and the status
        page name the exception and the script's line, not only node 0's stderr."""
        d, mport = self.daemon_with_metrics()
        ep = f"127.0.0.1:{d.port}"
        agents = [start(agent_cmd(ep, "--rdzv-id", "raise", "--nnodes", "2", "--nproc", "1",
                                  "--nccl", "off", "--last-call", "0.2",
                                  worker=[PY, self.script, "100", "0.05"]),
                        env=self.env(RAISE_AT="3")) for _ in range(2)]
        want = (r"root cause: worker rank 0 \(local rank 0\) on node rank 0 \(\S+\) exited with "
                r"code 1: " + ERROR)
        for a in agents:
            rc, _, err = finish(a, timeout=60)
            self.assertNotEqual(rc, 0, err)
            last = [ln for ln in err.splitlines() if ln.startswith("rdzv-agent: job raise")]
            self.assertTrue(last, err)
            self.assertRegex(last[-1], want)
        ctl = subprocess.run([RDZVCTL, "-e", ep, "status", "--ended"], capture_output=True,
                             text=True, timeout=10)
        self.assertRegex(ctl.stdout, ERROR)
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/status.json",
                                                timeout=5) as r:
            self.assertRegex(r.read().decode(), ERROR)

    def test_a_native_workers_last_stderr_line_on_every_node(self):
        """A worker that is not Python (no hooks) writes its error to stderr and exits 1: the
        line is the root cause's, on both nodes."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        worker = ["/bin/sh", "-c", 'if [ "$RANK" = 0 ]; then echo "loading /data/shard-7: '
                  'checksum mismatch" >&2; exit 1; fi; sleep 30']
        agents = [start(agent_cmd(ep, "--rdzv-id", "native", "--nnodes", "2", "--nproc", "1",
                                  "--nccl", "off", "--last-call", "0.2", "--grace", "1",
                                  worker=worker)) for _ in range(2)]
        for a in agents:
            rc, _, err = finish(a, timeout=60)
            self.assertNotEqual(rc, 0, err)
            self.assertRegex(err, r"rdzv-agent: job native failed .*root cause: worker rank 0 .* "
                                  r"exited with code 1: loading /data/shard-7: checksum mismatch")

    def test_hooks_off_and_only_in_python(self):
        """The hooks are a sitecustomize first on a Python worker's PYTHONPATH: they load rdzv,
        not torch, leave the path as it was for the script and run the user's own
        sitecustomize; --python-hooks off and RDZV_PYTHON_HOOKS=0 leave them out; a shell
        worker never gets them."""
        user = os.path.join(self.out, "user")
        os.mkdir(user)
        with open(os.path.join(user, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
        probe = ("import os, sys; print('PROBE', 'rdzv' in sys.modules, 'torch' in sys.modules, "
                 "os.environ.get('PYTHONPATH'), os.environ.get('USER_SITE_RAN'), "
                 "any(p.endswith('rdzv/hooks') for p in sys.path))")

        def run(*opts, env=None, worker=(PY, "-c", probe)):
            p = start([AGENT, "--standalone", "--nproc", "1", *opts, "--", *worker],
                      env={"PYTHONPATH": user, **(env or {})})
            rc, out, err = finish(p)
            self.assertEqual(rc, 0, err)
            return out

        self.assertIn(f"PROBE True False {user} 1 False", run())
        self.assertIn(f"PROBE False False {user} 1 False", run("--python-hooks", "off"))
        self.assertIn(f"PROBE False False {user} 1 False",
                      run(env={"RDZV_PYTHON_HOOKS": "0"}))
        out = run(worker=("/bin/sh", "-c", 'echo "SHELL $PYTHONPATH"'))
        self.assertIn(f"SHELL {user}", out)

    @staticmethod
    def joined_at(err):
        """When the agent joined (its log line's time): the cost line's wall starts there, not
        at the agent's own start (which a loaded machine makes a few tenths of a second)."""
        m = re.search(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z rdzv-agent\[info\]: joining job",
                      err, re.M)
        return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()

    def assert_near(self, got, want, what, out):
        print("%s: the cost line %.2f s, the stopwatch %.2f s" % (what, got, want), flush=True)
        self.assertLessEqual(abs(got - want), 0.1 * want, "%s: the cost line says %.2f s, the "
                             "stopwatch %.2f s\n%s" % (what, got, want, out))

    def test_cost_of_a_killed_worker_matches_the_stopwatch(self):
        """The plain script under --max-restarts 3, rank 1 SIGKILLed at step 10: the cost line's
        recovery (kill to the next generation's first step) and start-up (to the first step)
        are what rank 0's stopwatch sees, within 10%, and its first step is a figure."""
        p = start([AGENT, "--standalone", "--nproc", "2", "--max-restarts", "3", "--",
                   PY, self.script, "30", "0.05"], env=self.env())
        wait_output(p, r'"step": 10,')
        with open(os.path.join(self.out, "pid.1")) as f:
            pid = int(f.read())
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        rc, out, err = finish(p, timeout=60)
        out = p.seen.decode(errors="replace") + out
        self.assertEqual(rc, 0, err)
        steps = steps_of(out)
        after = [t for s, t in steps if t > t_kill]
        m = COST_RE.search(err)
        self.assertIsNotNone(m, err)
        self.assertEqual(m.group(4), "1", err)
        self.assertNotIn("?", m.group(0), err)
        self.assert_near(float(m.group(2)), steps[0][1] - self.joined_at(err), "start-up", err)
        self.assert_near(float(m.group(5)), after[0] - t_kill, "the recovery", err)
        self.assertGreater(float(m.group(10)), 0.1, err)

    def test_cost_of_a_script_that_raised(self):
        """Rank 0 raises at step 8 (no restart): start-up to the first step, training from
        there to the failure, as the stopwatch sees them, within 10%."""
        p = start([AGENT, "--standalone", "--nproc", "2", "--", PY, self.script, "100", "0.2"],
                  env=self.env(RAISE_AT="8"))
        rc, out, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        steps = steps_of(out)
        t_raise = steps[-1][1] + 0.2  # step 7's sleep, then step 8 raised
        m = COST_RE.search(err)
        self.assertIsNotNone(m, err)
        self.assert_near(float(m.group(2)), steps[0][1] - self.joined_at(err), "start-up", err)
        self.assert_near(float(m.group(3)), t_raise - steps[0][1], "training", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
