# SPDX-License-Identifier: Apache-2.0
"""Hosted replicas: with c10d self-hosting (no rdzvd started by hand) a job of 3
or more nodes runs 3 replicas of rdzvd on 3 different hosts of the job, and replaces the voter of
a lost host, so that a second failure later is survived too. Four "hosts" are network namespaces
this test makes (test_partition.py's NetnsHosts; root, as CI runs), each with its own TMPDIR, so
with its own hosted logs and Raft directories. Every agent is given the same endpoint, the first
host's address; none is told about replicas:
  - the first host's agent starts rdzvd (replica 1 of 3); the leader asks the agents on two other
    hosts for the other two (REPLICA), and every agent learns the three endpoints (REPLICAS);
  - the first host is lost whole (link down, every process SIGKILLed): the other replicas elect
    a leader, the agents find it, the job moves to a new generation with the spare (the fourth
    host), and the dead voter is replaced by a replica on the spare's host;
  - then the new leader's host is lost whole too: with the replacement voting, the last two
    replicas still form a majority, and the job ends 0 on the two hosts left;
  - once the job is over, the leader decides for the cluster (--exit-when-idle through the log),
    and no rdzvd is left running on any host.
A hosted rdzvd that exits alone (its host and agent live on) is replaced too: its agent tells
the leader."""
import os
import re
import sys
import time

from faulttest import AGENT, main
from test_partition import PORT, NetnsHosts

# Generations 1 and 2 outlive the two losses; the third ends the job.
WORKER = ["/bin/sh", "-c", 'if [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then sleep 60; '
          'else sleep 3; fi']
LEADS_RE = re.compile(r"replica (\d+) of (\d+) leads")


class HostedReplicas(NetnsHosts):
    NHOSTS = 4
    NET = "10.241.8."

    def tmpdir(self, i):
        d = os.path.join(self.tmp, "h%d" % i)
        os.makedirs(d, exist_ok=True)
        return d

    def rdzvd_logs(self, i):
        """The hosted rdzvd logs of host i (the first replica's, or one asked for)."""
        d = self.tmpdir(i)
        # Each in the directory made for it (deleted when it ends normally), or kept in
        # --log-dir as rdzvd-host-PORT.log / rdzvd-replica-PORT-ID.log.
        return [p for f in sorted(os.listdir(d))
                if f.startswith(("rdzvd-host-", "rdzvd-replica-"))
                for p in [os.path.join(d, f, "rdzvd.log") if not f.endswith(".log")
                          else os.path.join(d, f)] if os.path.exists(p)]

    def rtext(self, i):
        return "".join(self.text(l) for l in self.rdzvd_logs(i))

    def hosted_agent(self, i, run_id, worker, extra=()):
        """An agent of a 4-node c10d job on host i, given only the first host's address."""
        return self.spawn(self.hosts[i], "agent%d" % i,
                          [AGENT, "--rdzv-backend", "c10d", "--rdzv-endpoint",
                           "%s1:%d" % (self.NET, PORT), "--rdzv-id", run_id, "--nnodes", "4",
                           "--nproc", "1", "--host", "h%d" % i, "--heartbeat-timeout", "2",
                           "--connect-timeout", "60", "--nccl", "off", "--log-level", "info",
                           *extra, "--", *worker],
                          env_extra={"TMPDIR": self.tmpdir(i)})

    def test_hosted_replicas_prove_the_replica_key(self):
        """Agents given --token-file and --replica-key-file pass both to the
        replicas they host; the three replicas link with the key (no warning that agents can
        reach their links, no refusal), and the job ends 0."""
        files = []
        for name, secret in (("token", "agents-token-0123456789abcdef"),
                             ("replica.key", "replicas-only-0123456789abcdef")):
            path = os.path.join(self.tmp, name)
            with open(path, "w") as f:
                f.write(secret)
            os.chmod(path, 0o600)
            files.append(path)
        extra = ["--token-file", files[0], "--replica-key-file", files[1]]
        agents = [self.hosted_agent(0, "keyed", ["/bin/sh", "-c", "sleep 4"], extra)]
        self.wait_for("the first host's rdzvd", lambda: "hosting rdzvd at" in self.text(
            agents[0][1]))
        agents += [self.hosted_agent(i, "keyed", ["/bin/sh", "-c", "sleep 4"], extra)
                   for i in (1, 2, 3)]
        for p, log in agents:
            self.assertEqual(p.wait(timeout=60), 0, self.text(log)[-3000:])
        lead = self.rtext(0)
        self.assertIn("the configuration has 3 voter(s)", lead)
        for i in range(self.NHOSTS):
            t = self.rtext(i)
            self.assertNotIn("every agent-token holder can reach them", t)
            self.assertNotIn("wrong replica key", t)
            self.assertNotIn("does not hold our replica key", t)

    def leader_host(self, alive):
        """The host whose replica led last (the latest "leads" line by time of writing)."""
        best = None
        for i in alive:
            for l in self.rdzvd_logs(i):
                if LEADS_RE.search(self.text(l)):
                    m = os.path.getmtime(l)
                    if best is None or m > best[0]:
                        best = (m, i)
        return best[1] if best else None

    def test_a_host_that_cannot_host_is_passed_over(self):
        """The third host's port is taken: its agent's replica cannot listen, it says so, and the
        leader asks the fourth host instead. With no loss, the job ends 0, the leader decides for
        the cluster and every replica exits (normally: their coverage is written too) and deletes
        the Raft directory its agent made for it."""
        blocker = self.spawn(self.hosts[2], "blocker", [sys.executable, "-c", (
            "import socket, time\n"
            "s = socket.socket(); s.bind(('%s3', %d)); s.listen(); time.sleep(120)" % (
                self.NET, PORT))])
        def agent(i):
            return self.hosted_agent(i, "pass", ["/bin/sh", "-c", "sleep 4"])
        agents = [agent(0)]
        self.wait_for("the first host's rdzvd", lambda: "hosting rdzvd at" in self.text(
            agents[0][1]))
        # The blocked host joins first, so that it is the first one asked (the leader asks
        # candidates in the order they joined).
        agents.append(agent(2))
        self.wait_for("the third host's agent joined", lambda: "node=h2 joined" in self.rtext(0))
        agents += [agent(i) for i in (1, 3)]
        agents = [agents[0], agents[2], agents[1], agents[3]]  # by host
        # Read while the leader runs: it deletes its log with its directory when it ends.
        passed = re.compile(r"the agent at %s3 did not start replica \d+: .*exited before "
                            r"listening" % re.escape(self.NET))
        self.wait_for("the third host passed over, three voters", lambda: passed.search(
            self.rtext(0)) and "the configuration has 3 voter(s)" in self.rtext(0))
        for i, (p, log) in enumerate(agents):
            rc = p.wait(timeout=60)
            self.assertEqual(rc, 0, self.text(log)[-3000:])
        self.assertIn("hosting replica of rdzvd at %s4:%d" % (self.NET, PORT),
                      self.text(agents[3][1]))
        self.assertIn("cannot host replica", self.text(agents[2][1]))
        blocker[0].kill()
        self.wait_for("every replica gone", lambda: not any(
            p for i in range(self.NHOSTS) for p in self.host_pids(i)), timeout=30, poll=0.5)
        # The directories made for the replicas (each rdzvd's --remove-dir, logs and Raft logs
        # in them), and the one of the replica that could not listen (its agent's), are gone.
        for i in range(self.NHOSTS):
            self.assertEqual(os.listdir(self.tmpdir(i)), [], "host %d's TMPDIR" % i)

    def rdzvd_pid(self, i):
        """The pid of the hosted rdzvd running on host i, or None."""
        for pid in self.host_pids(i):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"rdzvd":
                return pid
        return None

    def test_a_replica_that_exits_alone_is_replaced(self):
        """A hosted replica's rdzvd alone is SIGKILLed (its host and agent live on): its agent
        sees it exit (the pipe it holds to it ends) and tells the leader, which removes that
        voter once it answers no heartbeat and asks for another; the configuration is back to 3
        voters, no worker is restarted, and the job ends 0."""
        def agent(i):
            return self.hosted_agent(i, "alone", ["/bin/sh", "-c", "sleep 14"])
        agents = [agent(0)]
        self.wait_for("the first host's rdzvd", lambda: "hosting rdzvd at" in self.text(
            agents[0][1]))
        agents += [agent(i) for i in (1, 2, 3)]
        self.wait_for("three voters", lambda: "the configuration has 3 voter(s)" in
                      self.rtext(0), timeout=40)
        hosting = [i for i in (1, 2, 3) if "hosting replica of rdzvd at" in
                   self.text(agents[i][1])]
        self.assertEqual(len(hosting), 2, hosting)
        victim = hosting[0]
        pid = self.rdzvd_pid(victim)
        self.assertIsNotNone(pid, "host %d runs a replica" % victim)
        mark = len(self.rtext(0))
        os.kill(pid, 9)
        try:
            self.wait_for("the voter replaced", lambda: re.search(
                r"says replica \d+ exited.*removing it from the configuration.*asking the agent "
                r"at \S+ to host replica \d+.*the configuration has 3 voter\(s\)",
                self.rtext(0)[mark:], re.S), timeout=40)
        except AssertionError as e:
            raise AssertionError("%s\n--- the leader's log:\n%s" % (e, self.rtext(0)[-4000:]))
        self.assertIn("the replica of rdzvd this agent hosts (%s%d:%d) exited" % (
            self.NET, victim + 1, PORT), self.text(agents[victim][1]))
        for i, (p, log) in enumerate(agents):
            rc = p.wait(timeout=60)
            self.assertEqual(rc, 0, self.text(log)[-3000:])
        text = self.rtext(0)
        self.assertIn("job=alone gen=1 generation 1 formed", text)
        self.assertNotIn("gen=2", text, "no worker was restarted")

    def test_hosted_replicas_survive_two_host_losses(self):
        endpoint = "%s1:%d" % (self.NET, PORT)

        def agent(i):
            return self.spawn(self.hosts[i], "agent%d" % i,
                              [AGENT, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                               "--rdzv-id", "hosted", "--nnodes", "2:3", "--nproc", "1",
                               "--host", "h%d" % i, "--heartbeat-timeout", "2",
                               "--connect-timeout", "60", "--last-call", "0.5",
                               "--max-restarts", "5", "--nccl", "off", "--log-level", "info",
                               "--", *WORKER],
                              env_extra={"TMPDIR": self.tmpdir(i)})
        agents = [agent(0)]
        self.wait_for("the first host's rdzvd", lambda: "hosting rdzvd at" in self.text(
            agents[0][1]))
        agents += [agent(i) for i in (1, 2)]
        # Three voters, on hosts 0, 1 and 2 (the first three agents' hosts).
        self.wait_for("three voters", lambda: "the configuration has 3 voter(s)" in self.rtext(0))
        self.wait_for("every agent told the endpoints", lambda: all(
            "rdzvd runs 3 replicas so far" in self.text(l) for _, l in agents))
        self.wait_for("generation 1 running", lambda: all(
            "started worker rank" in self.text(l) for _, l in agents))
        for i in (1, 2):
            self.assertIn("hosting replica of rdzvd at %s%d:%d" % (self.NET, i + 1, PORT),
                          self.text(agents[i][1]))
        agents.append(agent(3))
        self.wait_for("the spare waiting", lambda: "waiting as a spare" in self.text(
            agents[3][1]))

        # First loss: the host of replica 1 (the leader) and of an agent.
        t0 = time.monotonic()
        self.kill_host(0)
        alive = [1, 2, 3]
        self.wait_for("generation 2 on the spare", lambda: any(
            "job=hosted gen=2 generation 2 formed" in self.rtext(i) for i in (1, 2)),
            timeout=60, poll=0.02)
        took1 = time.monotonic() - t0
        # The dead voter is replaced by one on the spare's host.
        self.wait_for("a replica on the spare's host", lambda: "hosting replica of rdzvd at "
                      "%s4:%d" % (self.NET, PORT) in self.text(agents[3][1]), timeout=60)
        self.wait_for("the replacement voting", lambda: any(
            "the configuration has 3 voter(s)" in self.rtext(i) for i in (1, 2)), timeout=60)
        lead = self.leader_host([1, 2])
        self.assertIn(lead, (1, 2))

        # Second loss: the new leader's host.
        t0 = time.monotonic()
        self.kill_host(lead)
        alive.remove(lead)
        self.wait_for("generation 3 on the two hosts left", lambda: any(
            "job=hosted gen=3 generation 3 formed" in self.rtext(i) for i in alive),
            timeout=60, poll=0.02)
        took2 = time.monotonic() - t0
        for i in alive:
            p, log = agents[i]
            try:
                rc = p.wait(timeout=120)
            except Exception:  # noqa: BLE001
                self.fail("agent %d did not end:\n%s\n%s" % (i, self.text(log)[-3000:],
                                                              self.rtext(i)[-3000:]))
            self.assertEqual(rc, 0, self.text(log)[-3000:])
        text = "".join(self.rtext(i) for i in alive)
        self.assertIn("job=hosted gen=3 generation 3 formed", text)
        # Once the job is over, the cluster ends itself: no rdzvd is left on any host.
        self.wait_for("every replica gone", lambda: not any(self.host_pids(i) for i in alive),
                      timeout=30, poll=0.5)
        for i in range(self.NHOSTS):
            for what in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                self.assertNotIn(what, self.rtext(i))
        print("hosted replicas, --heartbeat-timeout 2: the next generation formed %.2f s after "
              "the first host's loss, %.2f s after the second's" % (took1, took2),
              file=sys.stderr)


if __name__ == "__main__":
    main()
