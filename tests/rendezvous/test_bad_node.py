# SPDX-License-Identifier: Apache-2.0
"""A bad node is put aside, not restarted into: three real rdzv-agents against a real
rdzvd, --nnodes 2 (one spare), --max-restarts 4. The workers of one node die at start-up (the
worker checks an environment variable only that agent has): before, the job put the next
generation back on that node until its budget was spent, and failed with the spare never used.
Now, after its second failure (--bad-node-failures 2, the default), the node is put aside: its
agent exits 69 saying why, its workers started twice and never again, the spare takes its
place, and the job succeeds on the two good nodes, under --recovery restart and inplace. A node
put aside that joins again is told so, by its node id or by its host (a new agent of the same
host), and without a spare (the job at its --nnodes MIN) the job
restarts on the nodes it has, as before, and says that it had no choice, unless the node's
workers fail at start-up: then it is put aside and the job waits for a node."""
import json
import os
import random
import signal
import subprocess
import time

from agenttest import AgentTestCase, agent_cmd, finish, main, start

RDZVCTL = os.environ.get("RDZVCTL", os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get("RDZVD", "build/daemon/rdzvd"))), "ctl", "rdzvctl"))

# Each start appends its generation to starts.<node>; a bad node's worker dies half a second
# (RDZV_TEST_BAD_AFTER) after it starts (long enough for the spare to join meanwhile), the others
# run RDZV_TEST_RUN seconds (default 3) and exit 0. Under --recovery inplace it says it follows
# the control channel (proto/WORKER.md "control"): a sleeping survivor has nothing to re-form.
WORKER = ["/bin/sh", "-c",
          'if [ -n "$RDZV_CONTROL_FD" ]; then echo control >&"$RDZV_PROGRESS_FD"; fi; '
          'echo "$RDZV_GENERATION" >> "$RDZV_TEST_OUT/starts.$RDZV_TEST_NODE"; '
          'if [ -n "$RDZV_TEST_BAD" ]; then sleep "${RDZV_TEST_BAD_AFTER:-0.5}"; exit 3; fi; '
          'sleep "${RDZV_TEST_RUN:-3}"; echo done >> "$RDZV_TEST_OUT/done.$RDZV_TEST_NODE"']
FAKE_NVML = os.environ.get("RDZV_FAKE_NVML") or os.path.join(
    os.environ.get("RDZV_BUILD_ROOT", "build"), "tests", "agent", "libfake-nvml.so")


# The bad node's worker dies 0.3 s after its peer is there, of an error of its
# own; the other nodes' workers die of the connection it closed (a FIFO between them, per
# generation: its end of EOF is the closed connection), 0.2 s later, as gloo's and NCCL's do
# (the library's error, then Python's traceback). Without a peer within 2 s (a generation
# without the bad node), they run a second and exit 0.
PEER_WORKER = [
    "/bin/sh", "-c",
    'echo "$RDZV_GENERATION" >> "$RDZV_TEST_OUT/starts.$RDZV_TEST_NODE"; '
    'f="$RDZV_TEST_OUT/peer.$RDZV_GENERATION"; mkfifo "$f" 2>/dev/null; '
    'if [ -n "$RDZV_TEST_BAD" ]; then exec 3>"$f"; sleep 0.3; '
    '  echo "ValueError: node $RDZV_TEST_NODE cannot read its shard" >&2; exit 1; fi; '
    'if timeout 2 cat "$f" >/dev/null; then sleep 0.2; '
    '  echo "RuntimeError: [gloo.cc:$$] Connection closed by peer [127.0.0.1]:$$" >&2; exit 1; '
    'fi; sleep 1; echo done >> "$RDZV_TEST_OUT/done.$RDZV_TEST_NODE"']


class Base(AgentTestCase):
    def agent(self, ep, out, run_id, node, *extra, bad=False, env=None, worker=WORKER):
        env = dict(env or {}, RDZV_TEST_OUT=out, RDZV_TEST_NODE=node)
        if bad:
            env["RDZV_TEST_BAD"] = "1"
        return start(agent_cmd(ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", run_id,
                               "--max-restarts", "4", "--host", node, "--grace", "2",
                               "--last-call", "0.5", "--nccl", "off", *extra, worker=worker),
                     env=env)

    @staticmethod
    def starts(out, node):
        try:
            with open(os.path.join(out, "starts." + node)) as f:
                return f.read().split()
        except FileNotFoundError:
            return []


class BadNode(Base):
    def run_job(self, recovery):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        run_id = "bad-" + recovery
        extra = ("--recovery", recovery)
        bad = self.agent(ep, out, run_id, "bad", *extra, bad=True)
        d.wait_log(r"job=%s .*node=bad joined" % run_id)
        good = self.agent(ep, out, run_id, "good", *extra)
        d.wait_log(r"job=%s gen=1 generation 1 formed" % run_id)
        spare = self.agent(ep, out, run_id, "spare", *extra)
        rc, _, err = finish(bad, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("put aside by job %s" % run_id, err)
        self.assertIn("its workers failed 2 times within 3600 s", err)
        # The same host's next agent (a new process, a new node id) is put aside too:
        # before, it joined at once.
        again = self.agent(ep, out, run_id, "bad", *extra, bad=True)
        rc, _, err = finish(again, timeout=30)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("node bad was put aside by job %s (as node id " % run_id, err)
        for p in (good, spare):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(len(self.starts(out, "bad")), 2, self.starts(out, "bad"))
        self.assertTrue(os.path.exists(os.path.join(out, "done.spare")))
        self.assertTrue(os.path.exists(os.path.join(out, "done.good")))
        d.wait_log(r"job=%s .*node=bad put aside \(node id [^)]*\): its workers failed 2 times"
                   % run_id)
        line = d.wait_log(r"job=%s .*generation \d+ succeeded" % run_id)
        return d, out, line

    def test_put_aside_restart(self):
        d, out, _ = self.run_job("restart")
        # Two restarts were charged (the bad node's two failures), not four.
        d.wait_log(r"job=bad-restart .*restart 2 of 4.*node rank \d \(bad\) is put aside")
        # The spare's worker started in the generation after the one the bad node left.
        self.assertEqual(len(self.starts(out, "spare")), 1, self.starts(out, "spare"))
        # rdzvctl status --ended shows the node put aside, and why (the job is kept as ended).
        ep = "127.0.0.1:%d" % d.port
        p = subprocess.run([RDZVCTL, "-e", ep, "status", "--ended"], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("put aside:\n    bad", p.stdout)
        self.assertIn("(2 failures): its workers failed 2 times within 3600 s", p.stdout)
        p = subprocess.run([RDZVCTL, "-e", ep, "status", "--json"], capture_output=True,
                           text=True, timeout=10)
        st = json.loads(p.stdout)
        self.assertEqual(st["nodes_put_aside"], {"failures": 1, "check": 0, "straggler": 0})
        job = [j for j in st["jobs"] if j["run_id"] == "bad-restart"][0]
        self.assertEqual(job["put_aside_total"], 1)
        self.assertEqual(job["put_aside"][0]["host"], "bad")
        # Its recoveries by cause: the first failure's, then the bad node's.
        rec = job["timeline"]["recoveries"]
        self.assertEqual([r["kind"] for r in rec["list"]], ["failure", "put_aside"], rec)

    def test_put_aside_inplace(self):
        _, out, _ = self.run_job("inplace")
        # In place: the good node's worker is the one it started first, never restarted.
        self.assertEqual(self.starts(out, "good"), ["1"])
        self.assertEqual(len(self.starts(out, "spare")), 1, self.starts(out, "spare"))

    def test_no_spare_no_choice(self):
        """A node whose workers fail after start-up (6 s in) with no spare: the job restarts on
        the nodes it has, and says that it had no choice."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        bad = self.agent(ep, out, "nochoice", "bad", "--max-restarts", "2", bad=True,
                         env={"RDZV_TEST_BAD_AFTER": "6", "RDZV_TEST_RUN": "30"})
        good = self.agent(ep, out, "nochoice", "good", "--max-restarts", "2",
                          env={"RDZV_TEST_RUN": "30"})
        for p in (bad, good):
            rc, _, err = finish(p, timeout=90)
            self.assertEqual(rc, 3, err[-3000:])
            self.assertIn("restart budget exhausted", err)
        self.assertEqual(len(self.starts(out, "bad")), 3)
        d.wait_log(r"job=nochoice .*node=bad \(node id [^)]*\): its workers failed 2 times; it is "
                   r"not put aside: without a spare the job has only its --nnodes MIN of 2 nodes")

    def test_no_spare_fails_at_startup_job_waits(self):
        """A node whose workers fail at start-up with no spare is put aside all the same after
        its second failure: the job waits for a node (--join-timeout 3 here) instead of
        restarting into it, and fails saying so when none comes."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        bad = self.agent(ep, out, "startup", "bad", "--join-timeout", "3", bad=True)
        d.wait_log(r"job=startup .*node=bad joined")
        good = self.agent(ep, out, "startup", "good", "--join-timeout", "3")
        rc, _, err = finish(bad, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("its workers failed at start-up 2 times within 3600 s", err)
        rc, _, err = finish(good, timeout=60)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("only 1 of the 2 nodes the job needs", err)
        self.assertEqual(len(self.starts(out, "bad")), 2, self.starts(out, "bad"))
        self.assertEqual(len(self.starts(out, "good")), 2, self.starts(out, "good"))
        d.wait_log(r"job=startup .*no spare waits: the job waits for a node to take its place")

    def test_started_apart_second_broken(self):
        """Three agents started 0.4 s apart (--nnodes 2, --max-restarts 4), the second on a node
        whose workers exit 1 at once: it is put aside after --bad-node-failures (2) starts,
        whether the third has joined by then or not, the third takes its place and the job
        succeeds."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        env = {"RDZV_TEST_BAD_AFTER": "0"}
        ps = []
        for node in ("a", "broken", "c"):
            ps.append(self.agent(ep, out, "apart", node, bad=node == "broken", env=env))
            time.sleep(0.4)  # the scenario: started 0.4 s apart
        a, broken, c = ps
        rc, _, err = finish(broken, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("put aside by job apart", err)
        for p in (a, c):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(len(self.starts(out, "broken")), 2, self.starts(out, "broken"))
        self.assertTrue(os.path.exists(os.path.join(out, "done.a")))
        self.assertTrue(os.path.exists(os.path.join(out, "done.c")))
        d.wait_log(r"job=apart .*generation \d+ succeeded")


class PeerFailures(Base):
    def test_peers_that_fail_of_the_closed_connection_do_not_shield_the_bad_node(self):
        """Two nodes and a spare; node a's worker dies at start-up in every
        generation, node b's in the start-up grace of the connection a's closed. Not every node
        failing alike (their errors differ): a is charged, put aside at its second failure, the
        spare takes its place and the job succeeds. The root cause each agent is told names a's
        error. Before, b's failures took a's charges back each time: the spare was never placed
        and the job failed once its 4 restarts were spent."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        a = self.agent(ep, out, "peer", "a", bad=True, worker=PEER_WORKER)
        d.wait_log(r"job=peer .*node=a joined")
        b = self.agent(ep, out, "peer", "b", worker=PEER_WORKER)
        d.wait_log(r"job=peer gen=1 generation 1 formed")
        spare = self.agent(ep, out, "peer", "spare", worker=PEER_WORKER)
        rc, _, err = finish(a, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("its workers failed 2 times within 3600 s", err)
        errs = []
        for p in (b, spare):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
            errs.append(err)
        self.assertIn("(a) exited with code 1: ValueError: node a cannot read its shard at ",
                      errs[0])
        self.assertEqual(self.starts(out, "a"), ["1", "2"])
        self.assertTrue(os.path.exists(os.path.join(out, "done.spare")))
        d.wait_log(r"job=peer .*node=b: its worker rank \d failed at start-up of another error "
                   r"than the first failure's \(\"RuntimeError: \[gloo\.cc:\d+\] Connection "
                   r"closed by peer")
        d.wait_log(r"job=peer .*generation 3 succeeded")


class WorkerErrors(Base):
    def test_root_cause_names_the_error_written_as_the_worker_exits(self):
        """The root cause every node is told names the error the worker died of, its last stderr
        line, even when that line comes after its exit is seen (here a child of the worker writes
        it 50 ms later, as a process that exits before its output is read): the agent waits for
        the end of the worker's stderr before it reports the exit. Node x's local rank 0 fails,
        the job has no restart left, and node y's agent ends naming x's error."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        worker = ["/bin/sh", "-c",
                  'if [ "$RDZV_TEST_NODE$LOCAL_RANK" = x0 ]; then '
                  '(sleep 0.05; echo "RuntimeError: boom" >&2) & exit 1; fi; sleep 30']
        ps = [start(agent_cmd(ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "late",
                              "--max-restarts", "0", "--host", node, "--nccl", "off",
                              worker=worker), env={"RDZV_TEST_NODE": node})
              for node in ("x", "y")]
        for p in ps:
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 1, err[-3000:])
        self.assertRegex(err, r"\nrdzv-agent: job late failed \(exit code 1\): root cause: "
                              r"worker rank \d \(local rank 0\) on node rank \d \(x\) exited "
                              r"with code 1: RuntimeError: boom at ")


class Backoff(Base):
    """Restarts back off (--restart-backoff, default 30): a worker that fails at once, four
    generations (--max-restarts 3): the second starts right after the first fails, the third at
    least 1 s after the second, the fourth at least 2 s after the third. With --restart-backoff 0
    (torchrun's way: restart at its next poll) nothing waits."""

    def generations(self, run_id, *extra):
        d = self.daemon()
        out = self.outdir()
        worker = ["/bin/sh", "-c", 'date +%s.%N >> "$RDZV_TEST_OUT/t"; exit 3']
        p = start(agent_cmd(f"127.0.0.1:{d.port}", "--nnodes", "1", "--nproc", "1", "--rdzv-id",
                            run_id, "--max-restarts", "3", "--bad-node-failures", "0",
                            "--nccl", "off", *extra, worker=worker),
                  env={"RDZV_TEST_OUT": out})
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 3, err[-3000:])
        self.assertIn("restart budget exhausted (3 of 3 restarts used)", err)
        with open(os.path.join(out, "t")) as f:
            t = [float(x) for x in f.read().split()]
        self.assertEqual(len(t), 4, t)
        return d, [b - a for a, b in zip(t, t[1:])]

    def test_restarts_back_off(self):
        d, gaps = self.generations("backoff")
        self.assertLess(gaps[0], 1.0, gaps)
        self.assertGreaterEqual(gaps[1], 1.0, gaps)
        self.assertGreaterEqual(gaps[2], 2.0, gaps)
        d.wait_log(r"job=backoff .*the next generation forms in 2 s \(restart backoff\)")

    def test_no_backoff(self):
        _, gaps = self.generations("nobackoff", "--restart-backoff", "0")
        self.assertLess(sum(gaps), 2.5, gaps)


class Fairness(Base):
    def test_kills_on_healthy_nodes_never_put_them_aside(self):
        """Random SIGKILLs of healthy nodes' workers (a seeded schedule: which node, which rank,
        when) while one node's workers fail on their own (exit 3): only that node is put aside
        (after two failures; the spare takes its place), the kills are the job's, charged to the
        restart budget, and the job succeeds on the healthy nodes."""
        seed = int(os.environ.get("RDZV_TEST_SEED", "0")) or random.randrange(1, 1 << 30)
        rnd = random.Random(seed)
        print("seed", seed)
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = ["/bin/sh", "-c",
                  'echo $$ > "$RDZV_TEST_OUT/pid.$RDZV_TEST_NODE.$RDZV_GENERATION.$LOCAL_RANK"; '
                  'if [ -n "$RDZV_TEST_BAD" ]; then sleep 1.5; exit 3; fi; '
                  'sleep 4; echo done >> "$RDZV_TEST_OUT/done.$RDZV_TEST_NODE"']
        nodes = ("h1", "bad", "h2", "spare")
        ps = {}
        for n in nodes:
            env = {"RDZV_TEST_OUT": out, "RDZV_TEST_NODE": n}
            if n == "bad":
                env["RDZV_TEST_BAD"] = "1"
            ps[n] = start(agent_cmd(ep, "--nnodes", "3", "--nproc", "2", "--rdzv-id", "mix",
                                    "--max-restarts", "12", "--restart-backoff", "1",
                                    "--host", n, "--grace", "2", "--nccl", "off",
                                    worker=worker), env=env)
            d.wait_log(r"job=mix .*node=%s joined" % n)
        kills = 0
        for gen in range(1, 30):
            if kills == 5:
                break
            d.wait_log(r"job=mix gen=%d generation %d formed" % (gen, gen), timeout=60)
            time.sleep(rnd.uniform(0.1, 1.0))
            live = [f for f in os.listdir(out) if f.startswith("pid.") and
                    f.split(".")[1] != "bad" and f.split(".")[2] == str(gen)]
            if not live:
                continue
            with open(os.path.join(out, rnd.choice(sorted(live)))) as f:
                pid = int(f.read())
            try:
                os.kill(pid, signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass
        rc, _, err = finish(ps["bad"], timeout=90)
        self.assertEqual(rc, 69, err[-3000:])
        for n in ("h1", "h2", "spare"):
            rc, _, err = finish(ps[n], timeout=120)
            self.assertEqual(rc, 0, "seed %d: %s" % (seed, err[-3000:]))
        aside = [x for x in d.log().splitlines() if "put aside (node id" in x]
        self.assertEqual(len(aside), 1, aside)
        self.assertIn("node=bad put aside", aside[0])
        self.assertGreaterEqual(kills, 3, "seed %d" % seed)
        self.assertIn("a signal from outside, not counted against the node", d.log())


class EndedJob(Base):
    def test_join_to_an_ended_job_exits_at_once(self):
        """An agent that started before a job ended and joins it after (a spare late for a job
        that failed: here its health check holds it until the job is over) is told its outcome
        at once, on one line, and exits as the job did (its EVENT, X1): before, it waited in
        silence (a new job of one under the old id) until killed. One started after the end is a
        new run (rendezvous-rerun)."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        up, go = os.path.join(out, "late-up"), os.path.join(out, "go")
        late = start(agent_cmd(ep, "--nnodes", "1", "--nproc", "1", "--rdzv-id", "over",
                               "--nccl", "off", "--health-check",
                               f"touch {up}; while [ ! -e {go} ]; do sleep 0.02; done",
                               worker=["/bin/true"]))
        first = start(agent_cmd(ep, "--nnodes", "1", "--nproc", "1", "--rdzv-id", "over",
                                "--nccl", "off", worker=[
                                    "/bin/sh", "-c",
                                    f"while [ ! -e {up} ]; do sleep 0.02; done; exit 3"]))
        rc, _, err = finish(first, timeout=60)
        self.assertEqual(rc, 3, err[-3000:])
        open(go, "w").close()
        t0 = time.monotonic()
        rc, _, err = finish(late, timeout=30)
        self.assertEqual(rc, 3, err[-3000:])
        self.assertLess(time.monotonic() - t0, 10, err)
        lines = [x for x in err.splitlines() if "has ended" in x]
        self.assertTrue(lines, err)
        self.assertRegex(lines[-1], r"job 'over' has ended: it failed at \d{4}-\d\d-\d\dT"
                                    r"[\d:]+Z \(exit code 3\), and this agent started before "
                                    r"that; to run it again, start its agents again \(an agent "
                                    r"started after the end runs a new job\)\. Its outcome: "
                                    r"root cause: worker rank 0")


class HealthChecks(Base):
    """rdzv-agent --health-*: a node that fails its check before joining never starts a worker
    and the job forms with the spare; one that fails it while the job runs is put aside within an
    interval, the others' workers running on in place; NVML (the fake library) and RDMA ports
    (a sysfs tree the test makes) as reasons; a check that cannot run, or hangs, and values out
    of range."""

    def three(self, run_id, bad_extra, good_extra=(), bad_env=None, recovery="restart",
              run_s="3", bad_joins=True):
        """bad, good, spare: when bad_joins, bad and good form generation 1 and spare waits."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        common = ("--recovery", recovery)
        env = {"RDZV_TEST_RUN": run_s}
        bad = self.agent(ep, out, run_id, "bad", *common, *bad_extra,
                         env=dict(env, **(bad_env or {})))
        if bad_joins:
            d.wait_log(r"job=%s .*node=bad joined" % run_id)
        good = self.agent(ep, out, run_id, "good", *common, *good_extra, env=env)
        if bad_joins:
            d.wait_log(r"job=%s gen=1 generation 1 formed" % run_id)
        spare = self.agent(ep, out, run_id, "spare", *common, *good_extra, env=env)
        if bad_joins:
            d.wait_log(r"job=%s .*node=spare joined" % run_id)
        return d, out, bad, good, spare

    def assert_finished(self, bad, good, spare, reason):
        rc, _, err = finish(bad, timeout=60)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn(reason, err)
        for p in (good, spare):
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])

    def test_check_fails_before_joining(self):
        d, out, bad, good, spare = self.three(
            "hc-before", ("--health-check", 'echo "GPU 3 missing from the bus"; exit 1'),
            bad_joins=False)
        self.assert_finished(bad, good, spare, "failed its health check: GPU 3 missing from the "
                                               "bus; it does not join job hc-before")
        self.assertEqual(self.starts(out, "bad"), [])
        self.assertEqual(self.starts(out, "good"), ["1"])
        self.assertEqual(self.starts(out, "spare"), ["1"])
        self.assertIsNone(d.find_log(r"job=hc-before .*node=bad joined"))

    def release(self, d, run_id, node):
        return subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "release", run_id, node],
                              capture_output=True, text=True, timeout=10)

    def check_fails_while_running(self, recovery, release=False):
        flag = os.path.join(self.outdir(), "broken")
        check = 'if [ -e %s ]; then echo "scratch disk failed"; exit 1; fi' % flag
        d, out, bad, good, spare = self.three(
            "hc-run-" + recovery, ("--health-check", check, "--health-interval", "0.3"),
            recovery=recovery, run_s="6")
        open(flag, "w").close()  # bad and good run generation 1, the spare waits
        line = d.wait_log(r"job=hc-run-%s .*node=(bad|good) put aside" % recovery, timeout=10)
        self.assertIn("node=bad put aside", line)
        self.assertIn("failed a health check: scratch disk failed", line)
        if release:
            # rdzvctl release takes it back while the job runs (good and spare run on).
            p = self.release(d, "hc-run-" + recovery, "bad")
            self.assertEqual((p.returncode, p.stdout), (0, "released 1 node(s) of job hc-run-%s\n"
                                                        % recovery), p.stderr)
            d.wait_log(r"node bad released by an operator")
            p = self.release(d, "hc-run-" + recovery, "bad")
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("has put no node 'bad' aside", p.stderr)
            p = self.release(d, "no-such-job", "bad")
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("is not running on this rdzvd", p.stderr)
        self.assert_finished(bad, good, spare, "scratch disk failed")
        return out

    def test_check_fails_while_running_restart(self):
        out = self.check_fails_while_running("restart", release=True)
        self.assertEqual(self.starts(out, "bad"), ["1"])
        self.assertEqual(len(self.starts(out, "spare")), 1)

    def test_check_fails_while_running_inplace(self):
        out = self.check_fails_while_running("inplace")
        self.assertEqual(self.starts(out, "bad"), ["1"])
        self.assertEqual(self.starts(out, "good"), ["1"])  # never restarted
        self.assertEqual(len(self.starts(out, "spare")), 1)

    def test_nvml_missing_device_then_xid(self):
        for env, reason in (({"FAKE_NVML_COUNT": "0"}, "NVML sees 0 GPU(s), the node should "
                                                       "have 1"),
                            ({"FAKE_NVML_XID": "79"}, "GPU 0 reported XID 79 (fallen off the "
                                                      "bus)")):
            env = dict(env, RDZV_NVML_LIB=FAKE_NVML, CUDA_VISIBLE_DEVICES="0")
            d, out, bad, good, spare = self.three("nvml-" + env.get("FAKE_NVML_XID", "count"),
                                                  (), bad_env=env, bad_joins=False)
            self.assert_finished(bad, good, spare, reason)
            self.assertEqual(self.starts(out, "bad"), [])

    def test_rdma_port_down(self):
        root = self.outdir()
        state = os.path.join(root, "class", "infiniband", "mlx5_0", "ports", "1", "state")
        os.makedirs(os.path.dirname(state))
        with open(state, "w") as f:
            f.write("4: ACTIVE\n")
        d, out, bad, good, spare = self.three(
            "rdma", ("--health-interval", "0.3"), bad_env={"RDZV_SYSFS_ROOT": root}, run_s="6")
        with open(state, "w") as f:
            f.write("1: DOWN\n")
        self.assert_finished(bad, good, spare, "RDMA port mlx5_0/1 is DOWN")

    def test_check_that_cannot_run_or_hangs(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        # Not found: said once, and the node is not called broken.
        p = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "missing", "--nccl", "off",
                            "--health-check", "/nonexistent/nhc", "--health-interval", "0.2",
                            worker=["/bin/sh", "-c", "sleep 1"]),
                  env={"RDZV_TEST_OUT": out})
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(err.count("cannot run (exit 127: not found): not checked"), 1, err)
        # Hangs: killed at its timeout, a failure.
        p = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "hangs", "--nccl", "off",
                            "--health-check", "sleep 30", "--health-timeout", "0.5",
                            worker=["/bin/sh", "-c", "exit 0"]))
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("the health check 'sleep 30' did not finish within 0.5 s", err)

    def test_values_out_of_range(self):
        for opt, val in (("--health-interval", "-1"), ("--health-interval", "0.01"),
                         ("--health-timeout", "0"), ("--bad-node-failures", "1001"),
                         ("--bad-node-window", "-1"), ("--bad-node-window", "2592001"),
                         ("--bad-node-failures", "33"),  # 33: more than rdzvd keeps per node
                         ("--restart-backoff", "3601")):
            p = start(agent_cmd("127.0.0.1:1", "--rdzv-id", "x", opt, val,
                                worker=["/bin/true"]))
            rc, _, err = finish(p, timeout=20)
            self.assertEqual(rc, 2, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(opt, err)


if __name__ == "__main__":
    main()
