# SPDX-License-Identifier: Apache-2.0
"""The leader of a replicated rdzvd dies mid-job (3 replicas on loopback,
SIGKILL the leader mid-job, rdzv-train, gloo, 2 agents x 2 workers). The agents are given the
three replicas as --endpoint; they find the leader, and when it is SIGKILLed they find the next one
and re-register their generation there. The job completes: every agent exits 0, no worker is
started again (4 starts in all, each exits 0), the trainer reaches its last step, and the new
leader rebuilt the same generation with the same restart count (never backwards).

A worker that dies while the leader is stopped (SIGSTOP) is reported to the stopped leader, which
never reads it: the agent reports it again once it resumed the generation on the next leader, and
the job restarts there.

With every replica stopped (what an agent on the minority side of a partition sees: no leader
anywhere), the agents stop their workers after --heartbeat-timeout rather than train a copy that
may diverge; once a leader answers again they report it, and the job goes on in a new generation."""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

from faulttest import AGENT, BUILD, TRAIN_LAYERS, main
from rdzvtest import Client, s, wait_until
from replicatest import Cluster

TRAIN = os.environ.get("RDZV_TRAIN") or os.path.join(BUILD, "train", "rdzv-train")
STEPS = 400
KILL_AT = 80  # rank 0 reported this step: the leader is SIGKILLed
TOKEN = "replica-job-token-0123456789abcdef"
STARTED_RE = re.compile(r"started worker rank (\d+) \(local rank \d+, pid (\d+)\)")
STEP_RE = re.compile(rb'"step":\s*(\d+)')


class ReplicaFaults(unittest.TestCase):

    def setUp(self):
        self.cl = Cluster(token=TOKEN)
        self.addCleanup(self.cl.close)
        self.tmp = tempfile.mkdtemp(prefix="rdzv-replica-job-")
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "w") as f:
            f.write(TOKEN)
        os.chmod(self.token, 0o600)
        self.agents = []
        self.addCleanup(self.kill_agents)

    def kill_agents(self):
        for p, _, _ in self.agents:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def agent(self, i, extra=(), cmd=None):
        out, err = (os.path.join(self.tmp, "agent%d.%s" % (i, x)) for x in ("out", "err"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RDZV_", "PET_", "TORCHELASTIC_", "MASTER_", "SLURM_",
                                    "PBS_", "OMPI_"))
               and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                     "use_sigaltstack=0"]))
        with open(out, "wb") as o, open(err, "wb") as e:
            p = subprocess.Popen(
                [AGENT, "--endpoint", self.cl.peers, "--rdzv-id", "replicated", "--nnodes", "2",
                 "--nproc", "2", "--token-file", self.token, "--heartbeat-timeout", "5",
                 "--connect-timeout", "30", "--nccl", "off", "--log-level", "info", *extra, "--",
                 *(cmd or [TRAIN, "--backend", "gloo", "--samples", "256", "--batch-size", "32",
                           "--layers", TRAIN_LAYERS, "--log-every", "10", "--steps", str(STEPS),
                           "--timeout", "30"])],
                env=env, stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True)
        self.agents.append((p, out, err))
        return p

    @staticmethod
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    def last_step(self):
        return max((int(m) for _, out, _ in self.agents
                    for m in STEP_RE.findall(self.read(out))), default=0)

    def started_pids(self):
        """The pids of the workers the agents said they started, in their logs' order."""
        return [pid for _, _, e in self.agents
                for _, pid in STARTED_RE.findall(self.read(e).decode(errors="replace"))]

    def leader_of_job(self):
        for r in self.cl.r:
            if r.alive() and "job=replicated gen=1 generation 1 formed" in r.text():
                return r
        return None

    def test_leader_sigkill_mid_job(self):
        self.cl.leader()  # a leader serves before the agents come
        for i in range(2):
            self.agent(i)
        deadline = time.monotonic() + 60
        while self.last_step() < KILL_AT:
            self.assertLess(time.monotonic(), deadline, "the job did not reach step %d: %s" % (
                KILL_AT, [self.read(e)[-1500:] for _, _, e in self.agents]))
            for p, _, e in self.agents:
                self.assertIsNone(p.poll(), self.read(e)[-2000:])
            time.sleep(0.05)
        lead = self.leader_of_job()
        self.assertIsNotNone(lead, "no replica formed the job")
        step_at_kill = self.last_step()
        lead.kill()
        for p, _, e in self.agents:
            rc = p.wait(timeout=120)
            self.assertEqual(rc, 0, self.read(e)[-3000:].decode(errors="replace"))
        errs = [self.read(e).decode(errors="replace") for _, _, e in self.agents]
        starts = [m for t in errs for m in STARTED_RE.findall(t)]
        self.assertEqual(sorted(int(r) for r, _ in starts), [0, 1, 2, 3],
                         "workers started again:\n" + "\n".join(errs))
        for t in errs:
            self.assertIn("reconnected to rdzvd: generation 1 goes on", t)
        self.assertGreater(self.last_step(), step_at_kill)
        self.assertGreaterEqual(self.last_step(), STEPS - 10)
        new = [r for r in self.cl.r if r is not lead and
               "job=replicated gen=1 generation 1 rebuilt; its workers never stopped" in r.text()]
        self.assertEqual(len(new), 1, "\n".join(r.text()[-3000:] for r in self.cl.r
                                                 if r is not lead))
        self.assertIn("restart 0 of", lead.text())  # generation 1 formed with restart 0 ...
        self.assertNotIn("restarting generation", new[0].text())  # ... and none charged since

    def test_store_outlives_the_leader(self):
        """The generation's store is node rank 0's agent's, not the leader's: workers
        that use it (PyTorch's TCPStore client) before and after the leader's SIGKILL find every
        key, and nothing restarts."""
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("PyTorch is not installed for /usr/bin/python3")
        self.cl.leader()
        flag = os.path.join(self.tmp, "leader-killed")
        worker = ["/usr/bin/python3", os.path.join(HERE, "scripts", "store_across_failover.py"),
                  flag]
        for i in range(2):
            self.agent(i, ("--node-rank", str(i)), worker)
        deadline = time.monotonic() + 90
        while sum(self.read(o).count(b"before the kill") for _, o, _ in self.agents) < 4:
            self.assertLess(time.monotonic(), deadline, "workers never used the store: %s" % (
                [self.read(e)[-1500:] for _, _, e in self.agents]))
            for p, _, e in self.agents:
                self.assertIsNone(p.poll(), self.read(e)[-2000:])
            time.sleep(0.05)
        lead = self.leader_of_job()
        self.assertIsNotNone(lead, "no replica formed the job")
        self.assertIn("store on node rank 0's agent", lead.text())
        host = re.search(r"hosting generation 1's store on ([\d.]+):(\d+)",
                         self.read(self.agents[0][2]).decode(errors="replace"))
        self.assertIsNotNone(host, self.read(self.agents[0][2])[-2000:])
        outs = b"".join(self.read(o) for _, o, _ in self.agents).decode(errors="replace")
        self.assertEqual(outs.count("store %s:%s" % host.groups()), 4, outs)
        lead.kill()
        with open(flag, "w"):
            pass
        for p, _, e in self.agents:
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.fail("the job did not end after the failover: %s\n%s" % (
                    self.read(e)[-2000:].decode(errors="replace"),
                    "\n".join(r.text()[-3000:] for r in self.cl.r if r is not lead)))
            self.assertEqual(rc, 0, self.read(e)[-3000:].decode(errors="replace"))
        outs = b"".join(self.read(o) for _, o, _ in self.agents).decode(errors="replace")
        self.assertEqual(sorted(re.findall(r"rank (\d) STORE OK", outs)), ["0", "1", "2", "3"],
                         outs)
        errs = [self.read(e).decode(errors="replace") for _, _, e in self.agents]
        starts = [m for t in errs for m in STARTED_RE.findall(t)]
        self.assertEqual(len(starts), 4, "workers started again:\n" + "\n".join(errs))

    def test_agent_store_under_allow_store_from(self):
        """The store node rank 0's agent hosts takes TCPStore clients only from rdzvd's
        --allow-store-from (sent with NCCL_REQUEST): here 127.0.0.1 and not 127.0.0.2."""
        self.cl.close()
        self.cl = Cluster(token=TOKEN, extra=["--allow-store-from", "127.0.0.1/32"])
        self.addCleanup(self.cl.close)
        self.cl.leader()
        for i in range(2):
            self.agent(i, ("--node-rank", str(i)), ["/bin/sh", "-c", "sleep 60"])
        deadline = time.monotonic() + 60
        m = None
        while not m:
            self.assertLess(time.monotonic(), deadline, self.read(self.agents[0][2])[-2000:])
            m = re.search(rb"hosting generation 1's store on 127\.0\.0\.1:(\d+) \(TCPStore "
                          rb"clients from 127\.0\.0\.1/32\)", self.read(self.agents[0][2]))
            time.sleep(0.05)
        port = int(m.group(1))
        ok = Client(port)
        ok.set("k", "v")
        self.assertEqual(ok.get("k"), b"v")
        ok.close()
        c = Client(port, source="127.0.0.2")
        try:
            c.req("GET", s("k"))
            self.assertEqual(c.assert_closed(), b"")  # closed, nothing answered
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before the request was even written
        finally:
            c.close()
        err = self.agents[0][2]
        wait_until(lambda: b"not in --allow-store-from 127.0.0.1/32" in self.read(err),
                   lambda: self.read(err)[-2000:], timeout=10)

    def test_failure_reported_to_a_stopped_leader_reaches_the_next(self):
        """A worker dies while the leader is stopped (SIGSTOP): its agent's WORKER_EXIT sits in
        the stopped leader's socket, never read. The agents find the next leader and resume the
        generation there; the one whose worker died reports it again (the job would wait on a
        dead worker), and the job restarts and completes on the next leader."""
        self.cl.leader()
        worker = ["/bin/sh", "-c",
                  'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; else sleep 1; fi']
        for i in range(2):
            self.agent(i, ("--heartbeat-timeout", "2", "--max-restarts", "3"), worker)
        wait_until(lambda: len(self.started_pids()) >= 4,
                   lambda: "workers never started: %s" % (
                       [self.read(e)[-1500:] for _, _, e in self.agents]), timeout=60)
        pids = self.started_pids()
        lead = self.leader_of_job()
        self.assertIsNotNone(lead, "no replica formed the job")
        os.kill(lead.proc.pid, signal.SIGSTOP)
        self.addCleanup(lead.kill)
        self.addCleanup(os.kill, lead.proc.pid, signal.SIGCONT)
        os.kill(int(pids[0]), signal.SIGKILL)
        for p, _, e in self.agents:
            rc = p.wait(timeout=120)
            self.assertEqual(rc, 0, self.read(e)[-3000:].decode(errors="replace"))
        new = [r for r in self.cl.r if r is not lead and
               "job=replicated gen=2 generation 2 formed" in r.text()]
        self.assertEqual(len(new), 1, "\n".join(r.text()[-3000:] for r in self.cl.r
                                                 if r is not lead))
        # The report came from the agent, not from the stopped leader's log.
        self.assertRegex(new[0].text(), r"job=replicated gen=1 restarting generation 1 \(restart "
                                        r"1 of 3\): root cause: worker rank \d+ \(local rank "
                                        r"\d+\) on node rank \d+ \(\S+\) was killed by signal 9")
        self.assertNotIn("restarting generation", lead.text())

    def test_no_leader_stops_the_workers(self):
        self.cl.leader()
        worker = ["/bin/sh", "-c", "sleep 10"]
        for i in range(2):
            self.agent(i, ("--heartbeat-timeout", "2", "--max-restarts", "3"), worker)
        deadline = time.monotonic() + 60
        while sum(len(STARTED_RE.findall(self.read(e).decode(errors="replace")))
                  for _, _, e in self.agents) < 4:
            self.assertLess(time.monotonic(), deadline, "workers never started: %s" % (
                [self.read(e)[-1500:] for _, _, e in self.agents]))
            time.sleep(0.05)
        for r in self.cl.r:
            os.kill(r.proc.pid, signal.SIGSTOP)
            self.addCleanup(os.kill, r.proc.pid, signal.SIGCONT)
        # Silence for --heartbeat-timeout (2 s): the connection is lost; no leader for another
        # 2 s: the workers stop.
        wait_until(lambda: all(b"no rdzvd leader reachable" in self.read(e)
                               for _, _, e in self.agents),
                   lambda: "the workers kept running: %s" % (
                       [self.read(e)[-2000:] for _, _, e in self.agents]), timeout=20)
        for r in self.cl.r:
            os.kill(r.proc.pid, signal.SIGCONT)
        for p, _, e in self.agents:
            rc = p.wait(timeout=120)
            self.assertEqual(rc, 0, self.read(e)[-3000:].decode(errors="replace"))
        errs = [self.read(e).decode(errors="replace") for _, _, e in self.agents]
        for t in errs:
            self.assertIn("no rdzvd leader reachable for 2.0 s", t)
            self.assertRegex(t, r"worker rank \d+ \(local rank \d+, pid \d+\) was killed by "
                                r"signal 15")
        starts = sorted(int(r) for t in errs for r, _ in STARTED_RE.findall(t))
        self.assertEqual(starts, [0, 0, 1, 1, 2, 2, 3, 3],
                         "not one new generation:\n" + "\n".join(errs))
        led = [r for r in self.cl.r if "job=replicated gen=2 generation 2 formed" in r.text()]
        self.assertTrue(led, "\n".join(r.text()[-3000:] for r in self.cl.r))

    def test_every_replica_sigkilled_the_agents_give_up(self):
        """Every replica SIGKILLed mid-job (issue 72, case 1): each agent stops its workers, tries
        the replicas for --connect-timeout (5 s here), and exits within it + 10 s with one line
        that says no rdzvd answered, what each endpoint met, and exit status 68."""
        self.cl.leader()
        for i in range(2):
            self.agent(i, ("--connect-timeout", "5"), ["/bin/sh", "-c", "sleep 120"])
        wait_until(lambda: len(self.started_pids()) >= 4,
                   lambda: "workers never started: %s" % (
                       [self.read(e)[-1500:] for _, _, e in self.agents]), timeout=60)
        for r in self.cl.r:
            r.kill()
        t0 = time.monotonic()
        for p, _, e in self.agents:
            try:
                rc = p.wait(timeout=max(1.0, t0 + 5 + 10 - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail("an agent still runs 15 s after every replica died:\n%s" % (
                    self.read(e)[-3000:].decode(errors="replace")))
            err = self.read(e).decode(errors="replace")
            self.assertEqual(rc, 68, err[-3000:])
            eps = ", ".join("%s (connection refused)" % ep for ep in self.cl.peers.split(","))
            self.assertIn("no rdzvd at %s answered for 5 s (--connect-timeout): all replicas "
                          "down? check --endpoint" % eps, err.strip().splitlines()[-1], err)
            self.assertNotIn("sent nothing", err)


if __name__ == "__main__":
    main()
