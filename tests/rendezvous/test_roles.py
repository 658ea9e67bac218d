# SPDX-License-Identifier: Apache-2.0
"""What one node's agent may do to a job, and no more (proto/SECURITY.md), with real
rdzv-agents against a real rdzvd:
- a signal to one agent (a scheduler that preempts or drains one node) is that node leaving, not
  the job cancelled: a spare just goes; a member is a node lost, charging nothing: the spare takes
  its ranks, an elastic job goes on with what is left. torchrun keeps its rendezvous open the
  same way. The job is cancelled only when it cannot go on (test_schedulers: scancel);
- --on-bad-node drain names the node as the scheduler does, never by --local-addr or --host;
- cancelling a whole job and taking back a node put aside are the operator's (rdzvctl
  --admin-token-file): the agents' token allows neither."""
import json
import os
import signal
import socket
import subprocess
import time

from agenttest import AgentTestCase, agent_cmd, finish, main, start
from rdzvtest import RDZVD  # noqa: E402  (agenttest put tests/integration on the path)
from authtest import token_file  # noqa: E402  (agenttest put tests/integration on the path)

RDZVCTL = os.environ.get("RDZVCTL", os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get("RDZVD", "build/daemon/rdzvd"))), "ctl", "rdzvctl"))

# Each start appends its generation to starts.<node>; the worker runs RDZV_TEST_RUN seconds.
WORKER = ["/bin/sh", "-c",
          'echo "$RDZV_GENERATION" >> "$RDZV_TEST_OUT/starts.$RDZV_TEST_NODE"; '
          'sleep "${RDZV_TEST_RUN:-4}"; echo done >> "$RDZV_TEST_OUT/done.$RDZV_TEST_NODE"']


class Roles(AgentTestCase):
    def agent(self, ep, out, run_id, node, nnodes="2", run="4"):
        return start(agent_cmd(ep, "--nnodes", nnodes, "--nproc", "1", "--rdzv-id", run_id,
                               "--max-restarts", "0", "--host", node, "--grace", "2",
                               "--last-call", "0.5", "--nccl", "off", worker=WORKER),
                     env={"RDZV_TEST_OUT": out, "RDZV_TEST_NODE": node, "RDZV_TEST_RUN": run})

    def starts(self, out, node):
        try:
            with open(os.path.join(out, "starts." + node)) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def wait_starts(self, out, nodes, want, timeout=30):
        """Until each node's workers have started the generations in want (their own lines)."""
        deadline = time.monotonic() + timeout
        while any(self.starts(out, n) != want for n in nodes):
            self.assertLess(time.monotonic(), deadline, [self.starts(out, n) for n in nodes])
            time.sleep(0.05)

    def job(self, d, run_id):
        p = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "status", "--json"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [j for j in json.loads(p.stdout)["jobs"] if j["run_id"] == run_id][0]

    def three(self, run_id):
        """Nodes a and b run generation 1 of a --nnodes 2 job, s waits as the spare."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        a = self.agent(ep, out, run_id, "a")
        b = self.agent(ep, out, run_id, "b")
        d.wait_log(r"job=%s gen=1 generation 1 formed" % run_id)
        s = self.agent(ep, out, run_id, "s")
        d.wait_log(r"job=%s .*node=s joined" % run_id)
        return d, out, a, b, s

    def test_spare_signalled_just_goes(self):
        d, out, a, b, s = self.three("sig-spare")
        s.send_signal(signal.SIGTERM)
        rc, _, err = finish(s, timeout=30)
        self.assertEqual(rc, 143, err[-3000:])
        # The last line names the job, and the signal by its name with what it means.
        self.assertIn("rdzv-agent: left job sig-spare, stopped from outside (exit code 143): "
                      "node s left job sig-spare", err)
        self.assertIn("received SIGTERM from outside (the scheduler or someone stopped this "
                      "node)", err)
        self.assertIn("the job goes on without it", err)
        for p in (a, b):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(self.starts(out, "a"), ["1"])  # never restarted
        self.assertEqual(self.starts(out, "b"), ["1"])
        j = self.job(d, "sig-spare")
        self.assertEqual((j["outcome"]["type"], j["restart_count"]), ("succeeded", 0), j)

    def test_member_signalled_spare_takes_its_ranks(self):
        d, out, a, b, s = self.three("sig-member")
        a.send_signal(signal.SIGTERM)
        rc, _, err = finish(a, timeout=30)
        self.assertEqual(rc, 143, err[-3000:])
        self.assertIn("node a left job sig-member: its agent received SIGTERM from outside", err)
        self.assertIn("rdzv-agent: left job sig-member, stopped from outside (exit code 143)",
                      err)
        for p in (b, s):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(self.starts(out, "s"), ["2"])  # the spare took the place
        self.assertTrue(os.path.exists(os.path.join(out, "done.s")))
        j = self.job(d, "sig-member")
        # --max-restarts 0: a node that left on a signal is charged nothing.
        self.assertEqual((j["outcome"]["type"], j["restart_count"]), ("succeeded", 0), j)

    def test_elastic_job_goes_on(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        a = self.agent(ep, out, "sig-elastic", "a", nnodes="1:2")
        b = self.agent(ep, out, "sig-elastic", "b", nnodes="1:2")
        d.wait_log(r"job=sig-elastic gen=1 generation 1 formed")
        self.wait_starts(out, ("a", "b"), ["1"])  # both workers of generation 1 running
        b.send_signal(signal.SIGTERM)
        rc, _, err = finish(b, timeout=30)
        self.assertEqual(rc, 143, err[-3000:])
        rc, _, err = finish(a, timeout=60)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(self.starts(out, "a"), ["1", "2"])  # alone in generation 2
        j = self.job(d, "sig-elastic")
        self.assertEqual((j["outcome"]["type"], j["restart_count"]), ("succeeded", 0), j)

    def fixed_pair(self, run_id):
        """Nodes a and b run generation 1 of a --nnodes 2 job, no spare."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        a, b = (self.agent(ep, out, run_id, n, run="60") for n in ("a", "b"))
        self.wait_starts(out, ("a", "b"), ["1"])
        return d, a, b

    def test_member_signalled_without_spare_cancels_a_fixed_job(self):
        """failures.md: one signalled agent of a fixed 2-node job with no spare leaves fewer
        than MIN unsignalled nodes, so the job is cancelled on both nodes (job-policy.md R15),
        not left waiting for a node; nothing is charged."""
        d, a, b = self.fixed_pair("sig-fixed")
        a.send_signal(signal.SIGTERM)
        for p in (a, b):
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 143, err[-3000:])
            self.assertIn("rdzv-agent: job sig-fixed cancelled (exit code 143): cancelled: the "
                          "agent of node a received SIGTERM from outside", err)
        j = self.job(d, "sig-fixed")
        self.assertEqual((j["outcome"]["type"], j["restart_count"]), ("cancelled", 0), j)

    def test_every_agent_signalled_is_cancelled(self):
        """failures.md: SIGINT to every agent (a Ctrl-C on each node) cancels the job; the agents
        exit 130; nothing is charged."""
        d, a, b = self.fixed_pair("sig-all")
        for p in (a, b):
            p.send_signal(signal.SIGINT)
        for p in (a, b):
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 130, err[-3000:])
            self.assertIn("rdzv-agent: job sig-all cancelled (exit code 130)", err)
        j = self.job(d, "sig-all")
        self.assertEqual((j["outcome"]["type"], j["restart_count"]), ("cancelled", 0), j)

    def test_drain_names_the_scheduler_node(self):
        """Under Slurm without SLURMD_NODENAME (or PBS), the node drained is the short host
        name: before, --local-addr 127.0.0.1 made it NodeName=127.0.0.1. The node fails its
        health check before joining (put aside here, no rdzvd needed); scontrol, given an empty
        configuration, fails at once (or is missing), and the agent says which node it did not
        drain."""
        short = socket.gethostname().split(".")[0]
        conf = os.path.join(self.outdir(), "slurm.conf")  # empty: scontrol fails at once
        open(conf, "w").close()
        p = start([*agent_cmd("127.0.0.1:1", "--nnodes", "1", "--nproc", "1", "--rdzv-id",
                              "drain-name", "--local-addr", "127.0.0.1", "--health-check",
                              "echo disk gone; exit 1", "--on-bad-node", "drain", "--nccl", "off",
                              worker=["true"])],
                  env={"SLURM_JOB_ID": "77", "SLURM_CONF": conf})
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        # What the drain says (past the log line's own prefix, which names --host).
        drain = [ln.partition("--on-bad-node drain")[2] for ln in err.splitlines()
                 if "--on-bad-node drain" in ln]
        self.assertTrue(drain, err[-3000:])
        self.assertIn("node %s " % short, drain[-1] + " ")
        self.assertNotIn("127.0.0.1", "\n".join(drain))


class Operator(AgentTestCase):
    """rdzvd --token-file T --admin-token-file A: an agent's token (T) may not release nor
    cancel (exit 4, saying so in rdzvctl's words); the operator's (A) may; the job then ends
    cancelled on every node."""

    def setUp(self):
        self.tok = token_file(self)
        self.admin = token_file(self)
        self.d = self.daemon("--token-file", self.tok, "--admin-token-file", self.admin)
        self.ep = "127.0.0.1:%d" % self.d.port

    def ctl(self, *args, token=None, admin=None):
        cmd = [RDZVCTL, "-e", self.ep]
        cmd += ["--token-file", token] if token else []
        cmd += ["--admin-token-file", admin] if admin else []
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=10)

    def test_agents_token_may_not_release_nor_cancel(self):
        out = self.outdir()
        agents = [start(agent_cmd(self.ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "op",
                                  "--host", n, "--token-file", self.tok, "--nccl", "off",
                                  "--grace", "2", worker=["sleep", "60"]),
                        env={"RDZV_TEST_OUT": out}) for n in ("a", "b")]
        self.d.wait_log(r"job=op gen=1 generation 1 formed")
        # Said in the command's words (not the protocol's RELEASE, CANCEL_JOB), with what to
        # do, on one line; exit 4, as a token that does not allow it (1 is "none such").
        for args, what in ((("release", "op", "a"), "take back a node put aside"),
                           (("cancel", "op", "because"), "cancel a job")):
            r = self.ctl(*args, token=self.tok)
            self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
            self.assertEqual(r.stderr,
                             "rdzvctl: %s: only the operator may %s: run rdzvctl with "
                             "--admin-token-file FILE, the file rdzvd's --admin-token-file names "
                             "(the agents' token, --token-file, does not allow it)\n"
                             % (args[0], what))
        self.d.wait_log(r"refused CANCEL_JOB: not the operator")
        for p in agents:
            self.assertIsNone(p.poll(), "the job ended on the agents' token")
        # The operator's: a release of a node never put aside is "none such", and a cancel
        # ends the job on every node as cancelled, saying why.
        r = self.ctl("release", "op", "a", admin=self.admin)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("has put no node 'a' aside (rdzvctl status lists the nodes it put aside",
                      r.stderr)
        r = self.ctl("cancel", "op", "maintenance at noon", admin=self.admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cancelled job op", r.stdout)
        for p in agents:
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 143, err[-3000:])
            self.assertIn("rdzv-agent: job op cancelled (exit code 143): cancelled by the "
                          "operator: maintenance at noon", err)
        r = self.ctl("cancel", "op", admin=self.admin)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("job 'op' is not running on this rdzvd", r.stderr)

    def test_operator_ends_a_job_waiting_for_its_nodes(self):
        """A job whose agents are all gone keeps its record: rebuilt as rdzvd starts, then,
        none of its agents back within the window, waiting for its nodes; the operator's cancel
        ends it, and the run id starts afresh."""
        state = self.outdir()
        d = self.daemon("--token-file", self.tok, "--admin-token-file", self.admin,
                        "--state-dir", state)
        self.ep = "127.0.0.1:%d" % d.port
        agents = [start(agent_cmd(self.ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "w",
                                  "--host", n, "--token-file", self.tok, "--nccl", "off",
                                  "--heartbeat-timeout", "1", worker=["sleep", "60"]))
                  for n in ("a", "b")]
        d.wait_log(r"job=w gen=1 generation 1 formed")
        d.kill()
        for p in agents:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        d = self.daemon("--token-file", self.tok, "--admin-token-file", self.admin,
                        "--state-dir", state, "--port", str(d.port))
        st = json.loads(self.ctl("status", "--json", token=self.tok).stdout)
        self.assertEqual([(j["run_id"], j["state"]) for j in st["jobs"]], [("w", "running")])
        # The window: two heartbeat timeouts and an agent's longest reconnect wait (3 s).
        d.wait_log(r"job=w gen=1 no agent of generation 1 came back", timeout=30)
        st = json.loads(self.ctl("status", "--json", token=self.tok).stdout)
        self.assertEqual([(j["run_id"], j["state"]) for j in st["jobs"]], [("w", "waiting")])
        r = self.ctl("cancel", "w", token=self.tok)
        self.assertEqual(r.returncode, 4, r.stderr)  # the agents' token does not allow it
        r = self.ctl("cancel", "w", "its nodes are gone", admin=self.admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        d.wait_log(r"job=w cancelled by the operator while it waited for its nodes")
        st = json.loads(self.ctl("status", "--json", token=self.tok).stdout)
        self.assertEqual([j["run_id"] for j in st["jobs"] if j["state"] == "waiting"], [])

    def test_operator_secret_must_be_its_own(self):
        for args, want in ((["--admin-token-file", self.admin],
                            "--admin-token-file needs --token-file"),
                           (["--token-file", self.tok, "--admin-token-file", self.tok],
                            "--admin-token-file holds the agents' token")):
            r = subprocess.run([RDZVD, "--port", "0", *args], capture_output=True, text=True,
                               timeout=10)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)


if __name__ == "__main__":
    main()
