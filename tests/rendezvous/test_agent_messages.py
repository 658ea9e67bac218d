# SPDX-License-Identifier: Apache-2.0
"""What an agent and rdzvd say must match the run: every worker exit logged once, a one-node job
never "waits for the other nodes", a join without a node rank is "any node rank" (not "node rank
-1"), a job without NCCL ids says none, and a second job started on this host with the first
one's line is told to take its own --rdzv-id or --master-port. --print-launch takes a list of
replicas as --endpoint, as the agent does. rdzvctl status shows a member
that waits for its peers as waiting, not spare. A replica whose link port
(--port + 1) is taken says which port and why. A join wait is never silent: the agent says
what it waits for and what to check. Two agents of one job on one host under one name are
each told so, with the --host to give."""
import json
import re
import selectors
import socket
import os
import subprocess
import tempfile
import time

from agenttest import AGENT, AgentTestCase, agent_cmd, finish, main, rdzvtest, start


def read_stderr_until(p, pattern, timeout):
    """Read p's stderr (an agent's log) until pattern matches; return the match's text."""
    seen, deadline = b"", time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(p.stderr, selectors.EVENT_READ)
        while True:
            m = re.search(pattern, seen.decode(errors="replace"))
            if m:
                return m.group(0)
            left = deadline - time.monotonic()
            chunk = os.read(p.stderr.fileno(), 65536) if left > 0 and sel.select(left) else b""
            if not chunk:
                raise AssertionError("no line matching %r within %s s; the agent said:\n%s"
                                     % (pattern, timeout, seen.decode(errors="replace")[-3000:]))
            seen += chunk


class TestAgentMessages(AgentTestCase):
    def test_a_one_node_gloo_job_says_what_it_does_once(self):
        d = self.daemon()
        p = start(agent_cmd(f"127.0.0.1:{d.port}", "--nnodes", "1", "--nproc", "2", "--rdzv-id",
                            "msg", "--nccl", "off", worker=["true"]))
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 0, err)
        for lr in (0, 1):
            exits = re.findall(rf"worker rank {lr} \(local rank {lr}\b[^\n]*exited", err)
            self.assertEqual(len(exits), 1, err)
        self.assertIn("all 2 local workers exited 0", err)
        self.assertNotIn("waiting for the other nodes", err)
        d.wait_log(r"job=msg gen=1 generation 1 succeeded")
        log = d.log()
        self.assertIn("2 workers, any node rank)", log)
        self.assertNotIn("node rank -1", log)
        self.assertNotIn("NCCL id", log)

    def test_a_second_job_on_this_host_is_told_its_own_rdzv_id_or_master_port(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        first = start(agent_cmd(ep, "--nnodes", "1", "--node-rank", "0", "--rdzv-id", "same",
                                worker=["sleep", "30"]))
        self.addCleanup(first.kill)
        d.wait_log(r"job=same gen=1 generation 1 formed")
        second = start(agent_cmd(ep, "--nnodes", "1", "--node-rank", "0", "--rdzv-id", "same",
                                 worker=["true"]))
        rc, _, err = finish(second, timeout=30)
        self.assertEqual(rc, 1, err)
        # The host by its name, the node id said to be one (not a node id as if it were a host).
        host = re.escape(socket.gethostname())
        self.assertRegex(err, r"node rank 0 of job 'same' is already taken by another agent on "
                              r"this host, %s \(node id [^)\s]+\):" % host)
        self.assertIn("give this one its own --rdzv-id, or its own rdzvd with another "
                      "--master-port", err)


    def test_print_launch_takes_the_replicas_endpoint_list(self):
        # The list the agent itself runs with (rdzvd --peers' replicas), each default port filled
        # in; before, --print-launch refused it as a bad HOST:PORT.
        base = [AGENT, "--print-launch", "--rdzv-id", "r", "--nnodes", "2", "--endpoint"]
        r = subprocess.run(base + ["h1:1,[::1]:2,h3", "--", "true"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["endpoint"], "h1:1,[::1]:2,h3:29400")
        r = subprocess.run(base + [",".join(f"h{i}:1" for i in range(9)), "--", "true"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.strip().count("\n"), 0, r.stderr)
        self.assertIn("expected HOST:PORT, or up to 8 of them separated by commas (the replicas "
                      "of rdzvd --peers)", r.stderr)

    def test_a_member_waiting_for_its_peer_is_waiting_not_spare(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "alone", worker=["true"]))
        self.addCleanup(p.kill)
        d.wait_log(r"job=alone gen=0 node=\S+ joined")
        ctl = os.path.join(os.path.dirname(os.path.dirname(rdzvtest.RDZVD)), "ctl", "rdzvctl")
        deadline = time.monotonic() + 10
        while True:
            r = subprocess.run([ctl, "-e", ep, "status", "--json"], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            if '"alone"' in r.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertIn('"state": "waiting"', r.stdout.replace('":"', '": "'))
        self.assertNotIn('"spare": true', r.stdout.replace('":true', '": true'))
        text = subprocess.run([ctl, "-e", ep, "status"], capture_output=True, text=True,
                              timeout=10).stdout
        self.assertIn("waiting", text)
        self.assertNotIn("spare", text)

    def test_a_join_wait_speaks(self):
        # Two agents of one job, one of them given another port (a typo): no wait is silent.
        # Each says, within seconds and then every 30 s, how many nodes joined, the time left,
        # and what to check.
        agents = []
        for _ in range(2):
            d = self.daemon()
            p = start(agent_cmd(f"127.0.0.1:{d.port}", "--nnodes", "2", "--rdzv-id", "typo",
                                "--heartbeat-timeout", "5", "--join-timeout", "120",
                                worker=["true"]))
            self.addCleanup(p.kill)
            agents.append((p, d.port))
        for p, port in agents:
            line = read_stderr_until(p, r"still waiting for job typo's nodes[^\n]*", 40)
            self.assertRegex(line, r"still waiting for job typo's nodes: 1 of --nnodes 2 joined "
                                   r"\(1[01]\d s left before the join timeout\)\. Are the others "
                                   r"started, with the same --rdzv-id typo and --endpoint "
                                   r"127\.0\.0\.1:%d\? Another id or endpoint is another job"
                                   % port)
            self.assertIsNone(p.poll())

    def test_two_agents_under_one_host_name_are_each_told(self):
        # Two agents of one job on one machine, no --host: every log and verdict names both by
        # the host's name, so each is told: the second in its JOINED, the first in rdzvd's next
        # HEARTBEAT answer; with --host, neither.
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        pattern = (r"\[warn\]: [^\n]*another agent of job twin runs on this host under the "
                   r"same name, (\S+) \(node id [^)]+\): logs and verdicts cannot tell the two "
                   r"apart, and putting one aside puts both aside\. If that is meant, give each "
                   r"agent its own --host \(--host \1-0, --host \1-1, \.\.\.\)")
        agents = [start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "twin", "--heartbeat-timeout",
                                  "2", worker=["sleep", "2"])) for _ in range(2)]
        t0 = time.monotonic()
        for p in agents:
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err)
            self.assertEqual(len(re.findall(pattern, err)), 1, err)
        self.assertLess(time.monotonic() - t0, 30)
        agents = [start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "apart", "--host", h,
                                  worker=["true"])) for h in ("node-a", "node-b")]
        for p in agents:
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err)
            self.assertNotIn("under the same name", err)

    def test_a_replica_whose_link_port_is_taken_names_the_port_and_the_cause(self):
        for _ in range(20):  # a port P whose P + 1 this test can hold
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            probe.close()
            held = socket.socket()
            try:
                held.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                held.close()
        held.listen(1)
        self.addCleanup(held.close)
        with tempfile.TemporaryDirectory(prefix="rdzv-link-") as state:
            r = subprocess.run([rdzvtest.RDZVD, "--bind", "127.0.0.1", "--port", str(port),
                                "--peers", f"127.0.0.1:{port}", "--replicas", "1",
                                "--state-dir", state], capture_output=True, text=True,
                               timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"cannot start replica 1: its Raft link (--port + 1): listen on "
                      f"127.0.0.1:{port + 1}: address already in use", r.stderr)
        self.assertNotIn(": I/O error", r.stderr)


if __name__ == "__main__":
    main()
