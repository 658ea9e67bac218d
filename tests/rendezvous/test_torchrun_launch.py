# SPDX-License-Identifier: Apache-2.0
"""torchrun's launch lines, by hand with two agents on loopback and no rdzvd started by hand:
torchrun's c10d line (an agent hosts rdzvd), the static line (node rank 0 hosts), the
torch.distributed.launch line (--pass-local-rank), running unmodified PyTorch scripts with
Debian's torch 1.13; and the hosting agent SIGKILLed mid-job with the job finishing."""
import glob
import json
import os
import signal
import socket
import subprocess
import time

from agenttest import AGENT, AgentTestCase, main, start

import rdzvtest

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
DDP = os.path.join(SCRIPTS, "tr_ddp.py")
LAUNCH = os.path.join(SCRIPTS, "tr_launch.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(path):
    with open(path) as f:
        return f.read()


def have_torch():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True)
    return r.returncode == 0


def watchers(port):
    """Pids of the hosted `rdzvd --port PORT --exit-when-idle ...` processes on port (an agent
    starts them, in a session of their own, and they end by themselves)."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--exit-when-idle" in argv and b"--port" in argv[:-1] and \
                argv[argv.index(b"--port") + 1] == str(port).encode():
            pids.append(int(d[6:]))
    return pids


class TestLaunchLines(AgentTestCase):
    def setUp(self):
        if not have_torch():
            self.skipTest(f"PyTorch is not installed for {PYTHON}")
        self.tmp = self.outdir()
        self.addCleanup(self.kill_watchers)
        self.ports = []

    def kill_watchers(self):
        for port in self.ports:
            for pid in watchers(port):
                try:  # the hosted rdzvd leads a session and process group of its own
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                except OSError:
                    pass

    def assert_hosts_end(self, ports, within=20):
        deadline = time.monotonic() + within
        while any(watchers(p) for p in ports) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual([watchers(p) for p in ports], [[] for p in ports],
                         "the hosted rdzvd ends by itself after the job")

    def port(self):
        p = free_port()
        self.ports.append(p)
        return p

    def agent(self, i, *args, env=None):
        """An agent whose stderr goes to a file (read while it runs): (proc, stderr path)."""
        path = os.path.join(self.tmp, f"agent{i}.{len(os.listdir(self.tmp))}.err")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PBS_", "OMPI_", "PET_", "RDZV_"))}
        e.update({"PYTHON_EXEC": PYTHON, **(env or {})})
        with open(path, "w") as err:
            p = subprocess.Popen([AGENT, *args], env=e, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True)
        rdzvtest.track(p, group=True)
        return p, path

    def wait_all(self, procs, timeout=120):
        deadline = time.monotonic() + timeout
        for p, path in procs:
            try:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rdzvtest.kill_proc(p, group=True)
                p.wait()
            with open(path) as f:
                err = f.read()
            self.assertEqual(p.returncode, 0, f"{p.args[1:]}:\n{err[-3000:]}")

    def results(self, world):
        res = []
        for r in range(world):
            with open(os.path.join(self.tmp, f"ddp.{r}.json")) as f:
                res.append(json.load(f))
        self.assertEqual([x["rank"] for x in res], list(range(world)))
        self.assertEqual({x["world"] for x in res}, {world})
        self.assertEqual(len({x["params"] for x in res}), 1, "DDP kept the replicas identical")
        return res

    def test_c10d_line_without_a_daemon(self):
        port = self.port()
        line = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_id=c10d-job", "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{port}", DDP, self.tmp]
        ps = [self.agent(i, *line) for i in (0, 1)]
        self.wait_all(ps)
        self.results(2)
        hosts = [path for _, path in ps if "hosting rdzvd" in read(path)]
        self.assertEqual(len(hosts), 1, "exactly one agent hosted rdzvd")
        self.assert_hosts_end([port])

    def test_static_line(self):
        port = self.port()
        ps = [self.agent(r, "--nproc_per_node=1", "--nnodes=2", f"--node_rank={r}",
                         "--master_addr=127.0.0.1", f"--master_port={port}", DDP, self.tmp)
              for r in (1, 0)]
        self.wait_all(ps)
        self.results(2)
        self.assertIn("hosting rdzvd", read(ps[1][1]), "node rank 0 hosts")
        self.assertNotIn("hosting rdzvd", read(ps[0][1]))

    def test_static_has_the_job_wide_budget_and_one_root_cause(self):
        # Rank 3 fails in the first attempt: with --max-restarts=1 every node restarts once and
        # the job succeeds; with 0, both nodes fail with the same root cause and its exit code.
        worker = ["--no-python", "/bin/sh", "-c",
                  f'echo "$TORCHELASTIC_RESTART_COUNT" > {self.tmp}/restart.$RANK; '
                  '[ "$RANK$TORCHELASTIC_RESTART_COUNT" != 30 ] || exit 7']
        for budget, rc in ((1, 0), (0, 7)):
            port = self.port()
            ps = [self.agent(r, "--nproc_per_node=2", "--nnodes=2", f"--node_rank={r}",
                             f"--max_restarts={budget}", "--master_addr=127.0.0.1",
                             f"--master_port={port}", *worker)
                  for r in (0, 1)]
            for p, path in ps:
                p.wait(timeout=60)
                self.assertEqual(p.returncode, rc, read(path)[-2000:])
            if rc == 0:
                self.assertEqual({read(f"{self.tmp}/restart.{r}").strip() for r in range(4)},
                                 {"1"}, "one job-wide restart, the same count everywhere")
            else:
                causes = {line.split("root cause: ", 1)[1].split(" at ")[0]
                          for _, path in ps for line in read(path).splitlines()
                          if "failed (exit code 7): root cause" in line}
                self.assertEqual(causes, {"worker rank 3 (local rank 1) on node rank 1 (%s) "
                                          "exited with code 7" % socket.gethostname()})

    def test_launch_line_passes_local_rank(self):
        port = self.port()
        for flag, spelled in (("--pass-local-rank", "dash"),
                              ("--pass-local-rank=underscore", "underscore")):
            ps = [self.agent(r, flag, "--nproc_per_node=2", "--nnodes=2", f"--node_rank={r}",
                             "--master_addr=127.0.0.1", f"--master_port={port}", LAUNCH,
                             self.tmp, f"--flag={spelled}")
                  for r in (0, 1)]
            self.wait_all(ps)
            got = []
            for r in range(4):
                with open(os.path.join(self.tmp, f"launch.{r}")) as f:
                    got.append(f.read().split())
            self.assertEqual(got, [[str(r % 2), spelled] for r in range(4)])
            port = self.port()  # the finished job's rdzvd lingers a few seconds
        # Jobs this short (well under a second) must end their hosted rdzvd too.
        self.assert_hosts_end(self.ports[:2])

    def test_one_node_line(self):
        self.wait_all([self.agent(0, "--standalone", "--nproc_per_node=2", DDP, self.tmp)])
        self.results(2)

    def test_is_host_0_and_read_timeout_from_rdzv_conf(self):
        port = self.port()
        t0 = time.monotonic()
        p, path = self.agent(0, "--nnodes=1", "--rdzv_backend=c10d", "--rdzv_id=nohost",
                             f"--rdzv_endpoint=127.0.0.1:{port}",
                             "--rdzv_conf=is_host=0,read_timeout=1", DDP, self.tmp)
        p.wait(timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(time.monotonic() - t0, 15, "read_timeout=1 is the connect timeout")
        self.assertNotIn("hosting rdzvd", read(path), "is_host=0: this agent never hosts")
        self.assertEqual(watchers(port), [])

    def test_hosted_rdzvd_with_a_relative_token_file_keeps_no_directory_busy(self):
        port = self.port()
        with open(os.path.join(self.tmp, "token"), "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(os.path.join(self.tmp, "token"), 0o600)
        stop = os.path.join(self.tmp, "stop")
        line = ["--nnodes=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                "--rdzv_id=tok", "--token-file=token", "--no-python", "/bin/sh", "-c",
                f"while [ ! -e {stop} ]; do sleep 0.1; done"]
        cwd = os.getcwd()
        os.chdir(self.tmp)
        try:
            p, path = self.agent(0, *line)
        finally:
            os.chdir(cwd)
        deadline = time.monotonic() + 30
        while not watchers(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = watchers(port)
        self.assertEqual(len(pids), 1, read(path))
        self.assertEqual(os.readlink(f"/proc/{pids[0]}/cwd"), "/")
        with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
            self.assertIn(os.path.join(self.tmp, "token").encode(), f.read().split(b"\0"))
        open(stop, "w").close()
        self.wait_all([(p, path)])

    def test_hosting_agent_sigkilled_job_goes_on(self):
        port = self.port()
        line = ["--nnodes=1:2", "--nproc_per_node=1", "--rdzv_id=kill-job", "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{port}", "--max_restarts=1",
                "--rdzv_conf=last_call_timeout=1", DDP, self.tmp, "6"]
        ps = [self.agent(i, *line) for i in (0, 1)]
        host = None
        deadline = time.monotonic() + 60
        while host is None and time.monotonic() < deadline:
            for p, path in ps:
                with open(path) as f:
                    text = f.read()
                if "hosting rdzvd" in text and "starting 1 worker " in text:
                    host = (p, path)
            time.sleep(0.1)
        self.assertIsNotNone(host, "an agent hosts rdzvd and starts its worker")
        time.sleep(1)
        os.kill(host[0].pid, signal.SIGKILL)
        host[0].wait()
        survivor = [x for x in ps if x[0] is not host[0]]
        self.wait_all(survivor, timeout=120)
        with open(survivor[0][1]) as f:
            err = f.read()
        self.assertIn("generation 2", err, "the survivor re-formed the job on the hosted rdzvd")
        res = self.results(1)
        # Killed 1 s after its worker started, before a step: a node that did not run, charged
        # to its host, not the budget (docs/guide/failures.md); the survivor's restart is 0.
        self.assertEqual(res[0]["restart"], "0")


if __name__ == "__main__":
    main()
