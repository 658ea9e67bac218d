# SPDX-License-Identifier: Apache-2.0
"""A partition between hosts. Three "hosts" are network
namespaces this test makes (veth pairs on a bridge in a namespace of its own, addresses that exist
only inside them; needs root, as CI runs). Each host runs one rdzvd replica and one rdzv-agent of a
3-node job (--nnodes 2:3). The host whose replica leads is cut off from the other two:
  - its replica steps down and forms nothing, its agent reaches no leader and stops its worker
    after --heartbeat-timeout rather than train a copy that may diverge;
  - the majority elects a leader, which rebuilds the job from its replicated record and goes on
    without the lost node (generation 2, 2 nodes);
  - healed, the cut-off host rejoins and the job ends 0 everywhere, with one history: each
    generation number was formed by one replica only, in order.

And a host lost whole: the host of the leading replica and of node rank 0's
agent (so of the workers' store too) goes silent (its link down, then every process in it
SIGKILLed: no FIN reaches anyone) under rdzv-train --recovery inplace. The other replicas elect a
leader, the surviving agents find it and resume, the lost node is declared lost and a spare takes
its place: the survivors keep their worker processes (never started again), the next generation's
store is on the new node rank 0's agent, the spare's new worker receives the model from a survivor,
and the job ends 0."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from faulttest import AGENT, BUILD, TRAIN_LAYERS, main
from rdzvtest import (RDZVCTL, RDZVD, die_with_parent, netns_bridge, on_exit, track,
                      wait_until)

NET = "10.241.7."
PORT = 29400
FORMED_RE = re.compile(r"job=part gen=(\d+) generation (\d+) formed")
# Generation 1's workers outlive the partition; those of later generations end the job.
WORKER = ["/bin/sh", "-c", 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; '
          'else sleep 4; fi']
TRAIN = os.environ.get("RDZV_TRAIN") or os.path.join(BUILD, "train", "rdzv-train")
STEP_RE = re.compile(r'"step":\s*(\d+)')
STARTED_RE = re.compile(r"started worker rank \d+ \(local rank \d+, pid (\d+)\)")


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class NetnsHosts(unittest.TestCase):
    """NHOSTS "hosts": network namespaces on one bridge, host i at NET + (i + 1)."""
    NHOSTS = 3
    NET = NET

    def setUp(self):
        if os.geteuid() != 0 or not shutil.which("ip"):
            self.skipTest("needs root and iproute2 (ip netns): network namespaces as hosts")
        tag = "rp%d" % (os.getpid() % 100000)
        self.sw = tag + "-sw"
        self.hosts = ["%s-h%d" % (tag, i) for i in range(self.NHOSTS)]
        self.tmp = tempfile.mkdtemp(prefix="rdzv-partition-")
        if not os.environ.get("RDZV_KEEP"):  # RDZV_KEEP=1: keep the logs to read
            self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(self.delete_namespaces)
        on_exit(self.delete_namespaces)  # also when meson times the test out
        netns_bridge(self.sw, self.hosts, self.NET)
        self.peers = ",".join("%s%d:%d" % (self.NET, i + 1, PORT) for i in range(3))
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

    def spawn(self, host, name, argv, env_extra=None):
        log = os.path.join(self.tmp, name + ".log")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RDZV", "PET_", "TORCHELASTIC_", "MASTER_", "SLURM_", "PBS_",
                                    "OMPI_"))}
        env.update(env_extra or {})
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

    def wait_for(self, what, cond, timeout=60, poll=0.1):
        wait_until(cond, lambda: "%s did not happen; logs:\n%s" % (what, "\n".join(
            "--- %s\n%s" % (os.path.basename(l), self.text(l)[-2500:]) for _, l in self.procs)),
            timeout, poll)

    def kill_host(self, i):
        """Host i is lost: its link goes down first (nothing it sends arrives), then every
        process in its namespace is SIGKILLed."""
        ip("-n", self.sw, "link", "set", "p%ds" % i, "down")
        for pid in self.host_pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def host_pids(self, i):
        return [int(p) for p in subprocess.run(["ip", "netns", "pids", self.hosts[i]],
                                               capture_output=True, text=True,
                                               timeout=10).stdout.split()]


class Partition(NetnsHosts):

    def test_partition_of_the_leaders_host(self):
        replicas = self.replicas_up()
        # The agents start once a leader serves: started before, they back off between rounds
        # of refusals, and one may come back after generation 1's last call (a spare then).
        self.wait_leader(replicas)
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
        # Its worker's end is logged once reaped, a moment after "stopping the workers" (under
        # ASan, after the replica stepped down too): waited for, not read at once.
        self.wait_for("the cut-off agent's worker killed by SIGTERM", lambda: re.search(
            r"was killed by signal 15", self.text(agents[cut][1])), timeout=10)
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


    def wait_leader(self, replicas):
        """Until one of replicas says it leads."""
        def leader_known():
            # A replica says it leads when it first serves: ask each (a follower refuses).
            for i, h in enumerate(self.hosts):
                subprocess.run(["ip", "netns", "exec", h, RDZVCTL, "-e", "%s%d:%d" % (
                    NET, i + 1, PORT), "--timeout", "2", "ping"], capture_output=True, timeout=10)
            return any("leads (term" in self.text(l) for _, l in replicas)
        self.wait_for("a leader", leader_known)

    def replicas_up(self):
        return [self.spawn(h, "replica%d" % i,
                           [RDZVD, "--peers", self.peers, "--replica-id", str(i + 1),
                            "--port", str(PORT), "--bind", "%s%d" % (NET, i + 1),
                            "--state-dir", os.path.join(self.tmp, "state%d" % i), "-l", "info"])
                for i, h in enumerate(self.hosts)]

    def host_loss(self, recovery, steps=600):
        """Lose the host of the leader and of node rank 0 (the workers' store) under rdzv-train
        --recovery RECOVERY, with a spare waiting on another host. Returns the seconds from the
        cut to the first training step of the next generation."""
        if not os.access(TRAIN, os.X_OK):
            self.skipTest("rdzv-train is not built (no CUDA toolkit, or -Dtrainer=disabled)")
        replicas = self.replicas_up()
        self.wait_leader(replicas)
        lead = next(i for i, (_, l) in enumerate(replicas) if "leads (term" in self.text(l))
        train = [TRAIN, "--backend", "gloo", "--samples", "288", "--batch-size", "48", "--layers",
                 TRAIN_LAYERS, "--log-every", "1", "--steps", str(steps), "--timeout", "30"]

        def agent(i, name, rank=None):
            return self.spawn(self.hosts[i], name,
                              [AGENT, "--endpoint", self.peers, "--rdzv-id", "hostloss",
                               "--nnodes", "2:3", "--nproc", "1", "--host", name,
                               "--heartbeat-timeout", "2", "--connect-timeout", "120",
                               "--last-call", "0.5", "--max-restarts", "3", "--nccl", "off",
                               "--recovery", recovery, "--log-level", "info",
                               *(("--node-rank", str(rank)) if rank is not None else ()), "--",
                               *train])
        # Node rank 0 on the leader's host: losing it loses the leader and the workers' store.
        others = [i for i in range(3) if i != lead]
        agents = {lead: agent(lead, "h%d" % lead, 0)}
        for r, i in enumerate(others, 1):
            agents[i] = agent(i, "h%d" % i, r)
        self.wait_for("generation 1 training", lambda: max(
            (int(x) for x in STEP_RE.findall(self.text(agents[lead][1]))), default=0) >= 20)
        spare = agent(others[0], "spare")
        self.wait_for("the spare waiting", lambda: "waiting as a spare" in self.text(spare[1]))
        self.assertIn("hosting generation 1's store", self.text(agents[lead][1]))
        live = [agents[i][1] for i in others] + [spare[1]]
        seen = {l: len(self.text(l)) for l in live}
        t_cut = time.monotonic()
        self.kill_host(lead)
        # Training goes on: a step of the next generation (the old rank 0 was on the lost host).
        self.wait_for("a training step after the host's loss", lambda: any(
            STEP_RE.search(self.text(l)[seen[l]:]) for l in live), timeout=60, poll=0.01)
        took = time.monotonic() - t_cut
        for p, log in [agents[i] for i in others] + [spare]:
            try:
                rc = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.fail("agent %s did not end:\n%s" % (log, self.text(log)[-3000:]))
            self.assertEqual(rc, 0, self.text(log)[-3000:])
        logs = {i: self.text(agents[i][1]) for i in others}
        stext = self.text(spare[1])
        # Generation 2's store is on its node rank 0's agent (the spare, placed in the free
        # rank 0: survivors keep theirs), not on a replica, and every member was sent there.
        self.assertIn("generation 2: node rank 0 of 3", stext)
        self.assertRegex(stext, r"hosting generation 2's store on %s%d:\d+" % (
            re.escape(NET), others[0] + 1))
        for t in list(logs.values()) + [stext]:
            self.assertRegex(t, r"generation 2: node rank \d of 3, .* store %s%d:" % (
                re.escape(NET), others[0] + 1))
        self.assertEqual(len(STARTED_RE.findall(stext)), 1, stext[-3000:])
        for _, l in replicas:
            for what in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                self.assertNotIn(what, self.text(l))
        return took, logs, stext

    def test_host_loss_in_place(self):
        took, logs, stext = self.host_loss("inplace")
        for t in logs.values():
            # Never started again: one worker process for the whole job.
            self.assertEqual(len(STARTED_RE.findall(t)), 1, t[-3000:])
            self.assertIn("generation 2 in place: 1 worker keeps running, 0 start", t)
        reformed = [line for t in list(logs.values()) + [stext] for line in t.splitlines()
                    if '"event":"reformed","generation":2' in line]
        self.assertEqual(len(reformed), 1, reformed)
        self.assertRegex(reformed[0], r'"world":3,.*"source":[0-9]')  # the spare got the model
        print("host loss (leader + node rank 0 + store), in place: training again %.2f s after "
              "the cut" % took, file=sys.stderr)

    def test_host_loss_restart(self):
        took, logs, stext = self.host_loss("restart", steps=300)
        for t in logs.values():
            # The job moved to a new generation: every survivor's worker started again.
            self.assertEqual(len(STARTED_RE.findall(t)), 2, t[-3000:])
        print("host loss (leader + node rank 0 + store), restart: training again %.2f s after "
              "the cut" % took, file=sys.stderr)

if __name__ == "__main__":
    main()
