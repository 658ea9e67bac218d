# SPDX-License-Identifier: Apache-2.0
"""A partition between hosts (issue 18, item 6 and its proof (b)). Three "hosts" are network
namespaces this test makes (veth pairs on a bridge in a namespace of its own, addresses that exist
only inside them; needs root, as CI runs). Each host runs one rdzvd replica and one rdzv-agent of a
3-node job (--nnodes 2:3). The host whose replica leads is cut off from the other two:
  - its replica steps down and forms nothing, its agent reaches no leader and stops its worker
    after --heartbeat-timeout rather than train a copy that may diverge;
  - the majority elects a leader, which rebuilds the job from its replicated record and goes on
    without the lost node (generation 2, 2 nodes);
  - healed, the cut-off host rejoins and the job ends 0 everywhere, with one history: each
    generation number was formed by one replica only, in order."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from faulttest import AGENT, main  # noqa: E402
from rdzvtest import RDZVD, die_with_parent, on_exit, track  # noqa: E402

NET = "10.241.7."
PORT = 29400
FORMED_RE = re.compile(r"job=part gen=(\d+) generation (\d+) formed")
# Generation 1's workers outlive the partition; those of later generations end the job.
WORKER = ["/bin/sh", "-c", 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; '
          'else sleep 4; fi']


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Partition(unittest.TestCase):

    def setUp(self):
        if os.geteuid() != 0 or not shutil.which("ip"):
            self.skipTest("needs root and iproute2 (ip netns): network namespaces as hosts")
        tag = "rp%d" % (os.getpid() % 100000)
        self.sw = tag + "-sw"
        self.hosts = ["%s-h%d" % (tag, i) for i in range(3)]
        self.tmp = tempfile.mkdtemp(prefix="rdzv-partition-")
        if not os.environ.get("RDZV_KEEP"):  # RDZV_KEEP=1: keep the logs to read
            self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(self.delete_namespaces)
        on_exit(self.delete_namespaces)  # also when meson times the test out
        ip("netns", "add", self.sw)
        ip("-n", self.sw, "link", "add", "br0", "type", "bridge")
        ip("-n", self.sw, "link", "set", "br0", "up")
        for i, h in enumerate(self.hosts):
            ip("netns", "add", h)
            ip("link", "add", "p%dh" % i, "netns", h, "type", "veth", "peer", "name", "p%ds" % i,
               "netns", self.sw)
            ip("-n", h, "addr", "add", "%s%d/24" % (NET, i + 1), "dev", "p%dh" % i)
            ip("-n", h, "link", "set", "p%dh" % i, "up")
            ip("-n", h, "link", "set", "lo", "up")
            ip("-n", self.sw, "link", "set", "p%ds" % i, "master", "br0")
            ip("-n", self.sw, "link", "set", "p%ds" % i, "up")
        self.peers = ",".join("%s%d:%d" % (NET, i + 1, PORT) for i in range(3))
        self.procs = []
        self.addCleanup(self.kill_all)

    def delete_namespaces(self):
        for ns in self.hosts + [self.sw]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)

    def kill_all(self):
        for p, _ in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def spawn(self, host, name, argv):
        log = os.path.join(self.tmp, name + ".log")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RDZV", "PET_", "TORCHELASTIC_", "MASTER_", "SLURM_", "PBS_",
                                    "OMPI_"))}
        env["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                     "use_sigaltstack=0"]))
        with open(log, "wb") as f:
            p = track(subprocess.Popen(["ip", "netns", "exec", host, *argv], env=env,
                                       stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                       start_new_session=True, preexec_fn=die_with_parent()),
                      group=True)
        self.procs.append((p, log))
        return p, log

    @staticmethod
    def text(log):
        with open(log, errors="replace") as f:
            return f.read()

    def wait_for(self, what, cond, timeout=60):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                self.fail("%s did not happen within %d s; logs:\n%s" % (what, timeout, "\n".join(
                    "--- %s\n%s" % (os.path.basename(l), self.text(l)[-2500:])
                    for _, l in self.procs)))
            time.sleep(0.1)

    def test_partition_of_the_leaders_host(self):
        replicas = [self.spawn(h, "replica%d" % i,
                               [RDZVD, "--peers", self.peers, "--replica-id", str(i + 1),
                                "--port", str(PORT), "--bind", "%s%d" % (NET, i + 1),
                                "--state-dir", os.path.join(self.tmp, "state%d" % i), "-l",
                                "info"])
                    for i, h in enumerate(self.hosts)]
        agents = [self.spawn(h, "agent%d" % i,
                             [AGENT, "--endpoint", self.peers, "--rdzv-id", "part", "--nnodes",
                              "2:3", "--nproc", "1", "--host", "h%d" % i, "--heartbeat-timeout",
                              "2", "--connect-timeout", "120", "--last-call", "0.5",
                              "--max-restarts", "5", "--nccl", "off", "--log-level", "info",
                              "--", *WORKER])
                  for i, h in enumerate(self.hosts)]
        self.wait_for("generation 1 on 3 nodes", lambda: any(
            "job=part gen=1 generation 1 formed" in self.text(l) for _, l in replicas) and all(
            "started worker rank" in self.text(l) for _, l in agents))
        cut = next(i for i, (_, l) in enumerate(replicas)
                   if "job=part gen=1 generation 1 formed" in self.text(l))
        self.assertIn("3 nodes", next(line for line in self.text(replicas[cut][1]).splitlines()
                                      if "generation 1 formed" in line))
        ip("-n", self.sw, "link", "set", "p%ds" % cut, "down")
        others = [i for i in range(3) if i != cut]
        # The minority: its replica steps down, its agent stops its worker.
        self.wait_for("the cut-off agent stopping its worker", lambda: "no rdzvd leader reachable"
                      in self.text(agents[cut][1]), timeout=30)
        self.wait_for("the cut-off replica stepping down", lambda: "is no longer the leader"
                      in self.text(replicas[cut][1]), timeout=30)
        self.assertRegex(self.text(agents[cut][1]), r"was killed by signal 15")
        # The majority goes on without it.
        self.wait_for("generation 2 on the majority", lambda: any(
            "job=part gen=2 generation 2 formed" in self.text(replicas[i][1]) for i in others),
            timeout=40)
        # The minority formed nothing and charged no restart.
        self.assertNotIn("generation 2 formed", self.text(replicas[cut][1]))
        self.assertNotIn("restarting generation", self.text(replicas[cut][1]))
        ip("-n", self.sw, "link", "set", "p%ds" % cut, "up")
        for i, (p, log) in enumerate(agents):
            try:
                rc = p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.fail("agent %d did not end:\n%s" % (i, self.text(log)[-3000:]))
            self.assertEqual(rc, 0, self.text(log)[-3000:])
        # One history: each generation was formed once, by one replica, in order.
        formed = sorted((int(g), i) for i, (_, l) in enumerate(replicas)
                        for g, _ in FORMED_RE.findall(self.text(l)))
        gens = [g for g, _ in formed]
        self.assertEqual(gens, sorted(set(gens)), "a generation formed twice: %s" % formed)
        self.assertEqual(gens, list(range(1, len(gens) + 1)), formed)
        for _, l in replicas:
            for what in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                self.assertNotIn(what, self.text(l))


if __name__ == "__main__":
    main()
