# SPDX-License-Identifier: Apache-2.0
"""Node faults against real agents and a real rdzvd: an agent SIGKILLed (its workers die with it),
SIGSTOPped (heartbeat timeout), cut off by its link going down inside a network namespace;
survivors re-form when --nnodes MIN allows, wait for a replacement or fail after --join-timeout
below MIN; a spare takes a lost node's place; --scale-up now takes a late node in at once; a node
that goes before it ran spends nothing of the job."""
import os
import re
import shutil
import signal
import subprocess
import time

from authtest import (HEARTBEAT, JOIN, JOINED, ROUND, Peer, join_body, read_token,
                      token_file)
from faulttest import HB, WORKER, FaultTestCase, finish, kill_quietly, main, pid_alive

# A worker that holds its generation's stop (SIGTERM) until FAULT_DIR/go.<generation> exists:
# the test decides what happens while the job stops. Otherwise fault-worker, its exit status.
HOLD_STOP = r"""gen=$RDZV_GENERATION
trap 'until [ -e "$FAULT_DIR/go.$gen" ]; do sleep 0.02; done; kill -9 $c 2>/dev/null; exit 143' TERM
"$0" & c=$!
wait $c
"""


def restart_said(d, run_id, mark):
    """The restart count rdzvd gave generation 1's restart (logged since mark)."""
    line = d.wait_log(rf"job={run_id} gen=\d+ restarting generation 1 \(restart \d+ of",
                      since=mark)
    return int(re.search(r"\(restart (\d+) of", line).group(1))


class TestNodeLoss(FaultTestCase):
    def two_nodes(self, run_id, nnodes, *args, env=None):
        ps = [self.agent(run_id, "--nnodes", nnodes, "--nproc", "2", "--node-rank", str(i),
                         "--max-restarts", "1", *args, env=env) for i in (0, 1)]
        self.wait_starts(1, 4, agents=ps)
        return ps

    def test_agent_sigkill_takes_its_workers_and_survivors_continue(self):
        self.start_daemon()
        a, b = self.two_nodes("akill", "1:2")
        victims = [self.worker_pid(1, r) for r in (2, 3)]
        survivors1 = [self.worker_pid(1, r) for r in (0, 1)]
        t0 = time.time()
        os.kill(b.pid, signal.SIGKILL)
        self.assertEqual(self.wait_pids_gone(victims, 2.0), [],
                         "the SIGKILLed agent's workers die with it")
        gen2 = self.wait_starts(2, 2, agents=[a])
        self.assertLess(max(e.t for e in gen2) - t0, 5.0, "agent SIGKILL -> survivors restarted")
        self.assertEqual(self.wait_pids_gone(survivors1, 1.0), [])
        # Lost within the start-up window, before a step: it never ran, and the job
        # re-forms without it, not counted.
        self.assert_generation(2, 2, nnodes=1, restart=0)
        self.assertEqual({e.agent for e in gen2}, {a.pid})
        self.release()
        self.finish_all([a], 0)
        self.assertEqual(finish(b)[0], -signal.SIGKILL)
        self.d.wait_log(r"job=akill gen=\d+ the agent of node rank 1 \(.*\) disconnected")

    def test_agent_sigstop_is_detected_after_the_heartbeat_timeout(self):
        self.start_daemon()
        a, b = self.two_nodes("astop", "1:2", "--heartbeat-timeout", str(HB))
        mark = self.d.mark()
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGSTOP)
        self.addCleanup(kill_quietly, b.pid, signal.SIGCONT)
        self.d.wait_log(rf"job=astop gen=\d+ the agent of node rank 1 \(.*\) sent no heartbeat for "
                        rf"{HB}\.0 s", since=mark, timeout=15)
        took = time.monotonic() - t0
        # Agents heartbeat every timeout/5: the last one came at most that long before the stop.
        self.assertGreater(took, HB * 0.75, "not detected before the heartbeat timeout")
        self.assertLess(took, HB + 3.0, f"--heartbeat-timeout {HB} -> detected")
        gen2 = self.wait_starts(2, 2, agents=[a])
        self.assertEqual({e.agent for e in gen2}, {a.pid})
        # Its heartbeat lapsed about 2.5 s after its workers started: within the start-up
        # window (5 s) it never ran, not counted; on a slow machine it may lapse
        # past it. The workers' count is rdzvd's.
        self.assert_generation(2, 2, nnodes=1, restart=restart_said(self.d, "astop", mark))
        # Woken up, the stopped agent finds its connection closed, reconnects, is told that its
        # generation is over, stops its workers and waits as a spare; the job's end reaches it.
        stale = [self.worker_pid(1, r) for r in (2, 3)]
        mark = self.d.mark()
        os.kill(b.pid, signal.SIGCONT)
        self.d.wait_log(r"job=astop gen=\d+ .* reconnected from generation 1 \(now 2\)", since=mark,
                        timeout=10)
        self.assertEqual(self.wait_pids_gone(stale, 5.0), [], "its old workers are stopped")
        self.release()
        self.finish_all([a, b], 0)
        self.assertEqual(self.events("start", 3), [], "no further generation")

    def test_join_timeout_below_min_fails_clearly(self):
        self.start_daemon()
        a, b = self.two_nodes("jto", "2:2", "--join-timeout", "2")
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGKILL)
        rc, _, err = finish(a, timeout=20)
        took = time.monotonic() - t0
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("rdzv-agent: job jto failed (exit code 1): only 1 of the 2 nodes the job "
                      "needs (--nnodes 2:2) were there within the join timeout (2 s); root cause: "
                      "the agent of node rank 1", err)
        self.assertGreater(took, 1.8)
        self.assertLess(took, 8.0)
        self.assertEqual(self.events("start", 2), [])

    def test_replacement_node_joins_below_min(self):
        self.start_daemon()
        a, b = self.two_nodes("repl", "2:2")
        os.kill(b.pid, signal.SIGKILL)
        self.d.wait_log(r"job=repl gen=\d+ restarting generation 1")
        time.sleep(1.5)  # the behaviour: below MIN, nothing starts in this window
        self.assertEqual(self.events("start", 2), [], "below MIN: the job waits")
        self.assertIsNone(a.poll())
        t0 = time.time()
        c = self.agent("repl", "--nnodes", "2:2", "--nproc", "2", "--max-restarts", "1")
        gen2 = self.wait_starts(2, 4, agents=[a, c])
        self.assertLess(max(e.t for e in gen2) - t0, 5.0, "replacement start -> generation 2")
        self.assert_generation(2, 4, nnodes=2, restart=0)  # b went before it ran
        self.assertEqual({e.agent for e in gen2}, {a.pid, c.pid})
        self.assertEqual({e.agent for e in gen2 if e.node == 0}, {a.pid}, "survivor keeps rank 0")
        self.release()
        self.finish_all([a, c], 0)

    def test_replacement_after_spares_came_and_went(self):
        """A spare that JOINs and closes, 2,100 times under 128-byte node ids
        and 20 under 16-byte ones (a raw client: 271 KB of ids, past the 256 KiB a job kept of
        every id it ever admitted), then a member lost: its replacement (a real agent) is taken
        and generation 2 runs. It was refused ("job 'ids' has seen too many node ids"), and the
        job failed at its join timeout."""
        self.start_daemon()
        a, b = self.two_nodes("ids", "2:2")
        spares = 0
        for form, n in (("%0128d", 2100), ("s%015d", 20)):  # then 16-byte ids: to the brim
            for k in range(n):
                p = Peer(self.d.port)
                p.hello()
                p.send(JOIN, join_body("ids", form % k, mn=2, mx=2, max_restarts=1))
                op, body = p.recv_json()
                p.close()
                if op != JOINED:
                    break  # the job's node ids were full (the spare refused too)
                self.assertTrue(body["spare"], body)
                spares += 1
        mark = self.d.mark()
        os.kill(b.pid, signal.SIGKILL)
        self.d.wait_log(r"job=ids gen=\d+ restarting generation 1", since=mark)
        c = self.agent("ids", "--nnodes", "2:2", "--nproc", "2", "--max-restarts", "1")
        gen2 = self.wait_starts(2, 4, agents=[a, c])
        self.assertEqual({e.agent for e in gen2}, {a.pid, c.pid})
        self.assertEqual(spares, 2120, "every spare was taken")
        self.release()
        self.finish_all([a, c], 0)

    def test_spare_takes_the_place_of_a_lost_node(self):
        self.start_daemon()
        a, b = self.two_nodes("spare", "2:2")
        mark = self.d.mark()
        s = self.agent("spare", "--nnodes", "2:2", "--nproc", "2", "--max-restarts", "1")
        self.d.wait_log(r"job=spare gen=\d+ node=\S+ joined .*, 3 of 2\.\.2 "
                        r"\(waits for the next generation\)",
                        since=mark)
        time.sleep(0.3)  # the behaviour: the spare's join restarts nothing in this window
        self.assertEqual(self.events("start", 2), [], "a spare does not disturb the job")
        # b's workers run past the start-up window (5 s): it ran, its loss is a counted restart.
        time.sleep(max(0.0, max(e.t for e in self.events("start", 1)) + 5.3 - time.time()))
        t0 = time.time()
        os.kill(b.pid, signal.SIGKILL)
        gen2 = self.wait_starts(2, 4, agents=[a, s])
        self.assertLess(max(e.t for e in gen2) - t0, 5.0, "node lost -> spare's workers started")
        self.assert_generation(2, 4, nnodes=2, restart=1)
        self.assertEqual({e.agent for e in gen2 if e.node == 1}, {s.pid})
        self.release()
        errs = self.finish_all([a, s], 0)
        self.assertIn("waiting as a spare", errs[1])

    def test_scale_up_now_takes_a_late_node_in(self):
        # The joiner is taken in at its first HEARTBEAT, which its agent sends as soon as it is
        # told it is a spare, not a heartbeat interval later: here 30 s (--heartbeat-timeout 150).
        self.start_daemon()
        args = ("--nnodes", "1:2", "--nproc", "2", "--scale-up", "now", "--max-restarts", "0",
                "--heartbeat-timeout", "150")
        a = self.agent("scale", *args)
        self.wait_starts(1, 2, agents=[a])
        self.assert_generation(1, 2, nnodes=1)
        t0 = time.time()
        mark = self.d.mark()
        b = self.agent("scale", *args)
        self.d.wait_log(r"job=scale gen=1 .*restarting to scale up", since=mark, timeout=10)
        gen2 = self.wait_starts(2, 4, agents=[a, b])
        self.assertLess(max(e.t for e in gen2) - t0, 5.0, "late join -> 2-node generation")
        # Not a failure: the restart budget (0) is untouched.
        self.assert_generation(2, 4, nnodes=2, restart=0)
        self.assertEqual({e.agent for e in gen2}, {a.pid, b.pid})
        self.release()
        self.finish_all([a, b], 0)
        self.d.wait_log(r"job=scale gen=\d+ restarting generation 1 \(restart 0 of 0, not counted: "
                        r"scale-up\)")


    def test_a_job_whose_last_node_is_lost_is_not_rebuilt_from_its_word(self):
        """A job with no record to wait for ends with its last node (test-job-roles.c's test
        of the cancelled job is apart): --nnodes 2 on a and b, c a spare, no --state-dir. b's
        agent is frozen; a and then c get SIGTERM; b's heartbeat lapses and the job goes with its
        last node. rdzvd never restarted, so b's agent, woken later, is told the job's end (failed,
        its nodes gone), and the job is not rebuilt from its word. Before, b's resume rebuilt
        generation 1 "from reconnecting agents", and the job failed once more a rebuild window
        later, "1 of 2 nodes of generation 1 did not come back after rdzvd restarted"."""
        hb = 3  # the story's 5 s, shorter; a and c leave well within it
        self.start_daemon()
        args = ("--nnodes", "2", "--nproc", "1", "--max-restarts", "3", "--heartbeat-timeout",
                str(hb))
        a = self.agent("late", *args, "--host", "a")
        b = self.agent("late", *args, "--host", "b")
        self.wait_starts(1, 2, agents=[a, b])
        mark = self.d.mark()
        c = self.agent("late", *args, "--host", "c")
        self.d.wait_log(r"job=late gen=1 node=c joined .*\(waits for the next generation\)",
                        since=mark)
        # b's heartbeats after its ROUND: from then on it is lost a heartbeat timeout after it
        # falls silent (not the longer grace of a generation starting).
        time.sleep(2 * hb / 5)  # the behaviour: every agent heartbeats each timeout/5
        mark = self.d.mark()
        os.kill(b.pid, signal.SIGSTOP)
        self.addCleanup(kill_quietly, b.pid, signal.SIGCONT)
        a.send_signal(signal.SIGTERM)
        self.d.wait_log(r"node a left job late", since=mark)
        c.send_signal(signal.SIGTERM)
        self.d.wait_log(r"node c left job late", since=mark)
        self.d.wait_log(r"job=late gen=1 node=b .*sent no heartbeat", since=mark, timeout=15)
        self.d.wait_log(r"job=late gen=1 removed \(generation 1\)", since=mark)
        mark = self.d.mark()
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGCONT)
        rc, _, err = finish(b, timeout=20)
        self.assertEqual(rc, 1, f"{err[-3000:]}\nrdzvd log:\n{self.d.log()[-3000:]}")
        self.assertLess(time.monotonic() - t0, 5.0, "told at once, not after a rebuild window")
        self.assertRegex(err, r"job late failed \(exit code 1\): .*sent no heartbeat")
        self.assertIsNone(self.d.find_log(r"job=late .*rebuilding generation", since=mark),
                          self.d.log()[-3000:])
        self.assertIsNone(self.d.find_log(r"did not come back after rdzvd restarted"),
                          self.d.log()[-3000:])
        self.finish_all([a, c], 143)

class TestNeverRan(FaultTestCase):
    """A node that never ran (its agent gone before it answered its
    ROUND, or after its JOIN scaled the job up) spends nothing of the job. The token holder
    that comes and goes is a raw client of the agents' token."""

    def stranger(self, run_id, node_id, host, mn, mx, max_restarts):
        """A token holder's JOIN of run_id (JOINED read); its connection."""
        s = Peer(self.d.port)
        self.addCleanup(s.close)
        s.authenticate(read_token(self.tok))
        s.send(JOIN, join_body(run_id, node_id, mx, mn=mn, host=host,
                                  max_restarts=max_restarts))
        op, body = s.recv_json()
        self.assertEqual(op, JOINED, body)
        return s, body

    def test_node_lost_before_it_ran_spends_no_restart(self):
        # Case 1 as written: --nnodes 2:3 --max-restarts 3 on A and B; A's worker dies once.
        # While A and B stop their workers, a token holder JOINs; the re-form places it; it
        # disconnects at its ROUND. Three such cycles: before, each was a lost node charged to
        # the job, and the third exhausted the budget ("restart budget exhausted (3 of 3
        # restarts used)"). Now the job runs on at restart count 1.
        self.tok = token_file(self)
        self.start_daemon("--token-file", self.tok)
        hold = ["/bin/sh", "-c", HOLD_STOP, WORKER]
        ps = [self.agent("nr", "--nnodes", "2:3", "--nproc", "1", "--node-rank", str(i),
                         "--max-restarts", "3", "--token-file", self.tok, "--grace", "30",
                         worker=hold) for i in (0, 1)]
        self.wait_starts(1, 2, agents=ps)  # the workers' stops are held from here on
        mark = self.d.mark()
        os.kill(self.worker_pid(1, 0), signal.SIGKILL)  # an ordinary restart, counted
        for gen in (1, 2, 3):
            self.d.wait_log(rf"job=nr gen=\d+ restarting generation {gen} ", since=mark)
            s, joined = self.stranger("nr", f"stranger-{gen}", f"stranger{gen}", 2, 3, 3)
            self.assertTrue(joined["spare"], joined)
            open(os.path.join(self.dir, f"go.{gen}"), "w").close()  # A and B stop now
            op, rd = s.recv_json()
            self.assertEqual(op, ROUND, rd)
            self.assertEqual(rd["generation"], gen + 1)
            self.wait_starts(gen + 1, 2, agents=ps)  # A's and B's: their stops held
            mark = self.d.mark()
            s.close()  # it never answers its ROUND
        self.d.wait_log(r"job=nr gen=\d+ restarting generation 4 \(restart 1 of 3, not "
                        r"counted: a node lost before it ran\)", since=mark)
        self.d.wait_log(r"job=nr gen=4 node=stranger3 \(node id stranger-3\) went before it ran")
        open(os.path.join(self.dir, "go.4"), "w").close()
        self.wait_starts(5, 2, agents=ps)
        self.assert_generation(5, 2, nnodes=2, restart=1)
        self.release()
        self.finish_all(ps, 0)
        self.assertIsNone(self.d.find_log(r"restart budget exhausted"))

    def test_agent_that_crashes_as_its_workers_start_spends_no_restart(self):
        # Case 1's honest agent: --nnodes 2:3 --max-restarts 0 --scale-up now on A and B. A
        # third agent joins and is placed; its agent is SIGKILLed 1 s after its workers started
        # (an OOM, a crash loop), within the start-up window, before any step. Before, it was a
        # lost node charged to the job: with a budget of 0, "restart budget exhausted (0 of 0
        # restarts used)". Now the job re-forms on A and B at restart count 0. (A second
        # crasher would wait out the job's spacing of scale-ups, job-policy.md P8a: 60 s; the
        # unit tests of test-job-unran.c run that with a fake clock.)
        self.start_daemon()
        args = ("--nnodes", "2:3", "--nproc", "1", "--max-restarts", "0", "--scale-up", "now")
        ps = [self.agent("cr", *args, "--node-rank", str(i)) for i in (0, 1)]
        self.wait_starts(1, 2, agents=ps)
        c = self.agent("cr", *args, "--host", "crasher1")
        starts = self.wait_starts(2, 3, agents=[*ps, c], timeout=20)
        self.assertIn(c.pid, {e.agent for e in starts})
        time.sleep(1.0)  # the story: its agent dies 1 s after its workers started
        mark = self.d.mark()
        os.kill(c.pid, signal.SIGKILL)
        self.wait_starts(3, 2, agents=ps)
        self.assert_generation(3, 2, nnodes=2, restart=0)
        self.d.wait_log(r"job=cr gen=2 node=crasher1 \(node id .*\) went before it ran",
                        since=mark)
        self.assertEqual(finish(c)[0], -signal.SIGKILL)
        self.release()
        self.finish_all(ps, 0)
        self.assertIsNone(self.d.find_log(r"restart budget exhausted"))

    def test_scale_up_join_and_close_restarts_nothing(self):
        # Case 2 as written: --scale-up now, the job below MAX; a token holder JOINs and closes,
        # again and again. Before, every JOIN restarted every worker, uncounted (8 cycles, 8
        # restarts, restart count 0); later the first still cost one restart. Now a joiner is
        # taken in at its first HEARTBEAT: one that closes before it restarts nothing.
        self.tok = token_file(self)
        self.start_daemon("--token-file", self.tok)
        a = self.agent("su", "--nnodes", "1:2", "--nproc", "1", "--scale-up", "now",
                       "--max-restarts", "0", "--token-file", self.tok)
        self.wait_starts(1, 1, agents=[a])
        for c in range(8):
            mark = self.d.mark()
            s, joined = self.stranger("su", f"joiner-{c}", "joiner", 1, 2, 0)
            self.assertTrue(joined["spare"], joined)
            s.close()
            self.d.wait_log(rf"job=su gen=\d+ node=joiner left \(node id joiner-{c}\)",
                            since=mark)
            self.assertIsNone(self.d.find_log(r"restarting generation", since=mark),
                              f"JOIN+close cycle {c + 1} restarted the job's workers")
        self.assertEqual(len(self.events("start")), 1, self.events())
        self.assert_generation(1, 1, nnodes=1, restart=0)
        self.release()
        self.finish_all([a], 0)

    def test_scale_up_under_new_host_names_is_bounded(self):
        # Issue 71, case 1 as written: --scale-up now; a token holder JOINs, sends one HEARTBEAT
        # and closes, as h1, then h2, and so on: a new host name and node id each time. Before,
        # each cycle restarted every worker, uncounted: 8 cycles, 8 restarts, restart count 0
        # (the host was charged, and each host was new). Now the job takes at most 4 restarts
        # not counted within 10 minutes, whatever the names, spaced 30 s doubling: back to
        # back, the first cycle restarts the job, and the others find the spacing and wait.
        self.tok = token_file(self)
        self.start_daemon("--token-file", self.tok)
        a = self.agent("sh", "--nnodes", "1:2", "--nproc", "1", "--scale-up", "now",
                       "--max-restarts", "0", "--token-file", self.tok)
        self.wait_starts(1, 1, agents=[a])
        for c in range(8):
            s, joined = self.stranger("sh", f"joiner-{c}", f"h{c + 1}", 1, 2, 0)
            s.send(HEARTBEAT, {"generation": joined.get("generation", 0)})
            s.recv_json()  # its answer: the HEARTBEAT was taken
            s.close()
            time.sleep(0.3)  # the restart it made, if any, goes on
        time.sleep(2.0)
        gens = sorted({e.gen for e in self.events("start")})
        self.assertLessEqual(len(gens) - 1, 4, f"{len(gens) - 1} restarts of the job's worker "
                             f"for 8 JOIN+HEARTBEAT+close cycles: {self.events()}")
        self.wait_starts(gens[-1], 1, agents=[a])
        self.assert_generation(gens[-1], 1, nnodes=1, restart=0)
        self.release()
        self.finish_all([a], 0)


class TestLinkCut(FaultTestCase):
    """One agent inside a network namespace behind a veth pair; the link goes down."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root for ip netns")
        if not shutil.which("ip"):
            self.skipTest("needs the ip command (iproute2)")
        pid = os.getpid()
        self.ns = f"rdzvf{pid}"
        self.vh, self.vn = f"rfh{pid}", f"rfn{pid}"
        base = 4 * ((pid >> 8) % 64)
        self.host_ip = f"10.77.{pid % 256}.{base + 1}"
        self.ns_ip = f"10.77.{pid % 256}.{base + 2}"
        self.addCleanup(self._teardown_ns)
        self._teardown_ns()
        try:
            for cmd in (["ip", "netns", "add", self.ns],
                        ["ip", "link", "add", self.vh, "type", "veth", "peer", "name", self.vn],
                        ["ip", "link", "set", self.vn, "netns", self.ns],
                        ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.vh],
                        ["ip", "link", "set", self.vh, "up"],
                        ["ip", "netns", "exec", self.ns, "ip", "addr", "add", f"{self.ns_ip}/30",
                         "dev", self.vn],
                        ["ip", "netns", "exec", self.ns, "ip", "link", "set", self.vn, "up"],
                        ["ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up"]):
                subprocess.run(cmd, check=True, capture_output=True, timeout=10)
        except subprocess.CalledProcessError as e:
            self.skipTest(f"cannot set up a network namespace: {' '.join(e.cmd)}: "
                          f"{e.stderr.decode().strip()}")

    def _teardown_ns(self):
        # Deleting the namespace deletes the veth pair with it.
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.vh], capture_output=True, timeout=10)

    def test_link_down_is_detected_and_survivors_reform(self):
        self.start_daemon("--bind", self.host_ip)
        ep = f"{self.host_ip}:{self.d.port}"
        args = ("--nnodes", "1:2", "--nproc", "2", "--max-restarts", "1", "--heartbeat-timeout",
                str(HB))
        a = self.agent("link", *args, "--node-rank", "0", ep=ep)
        b = self.agent("link", *args, "--node-rank", "1", ep=ep,
                       prefix=["ip", "netns", "exec", self.ns])
        self.wait_starts(1, 4, agents=[a, b])
        env_b = self.env_of(1, 2)
        self.assertEqual(env_b["MASTER_ADDR"], self.host_ip, "the store's address as B sees it")
        mark = self.d.mark()
        t0 = time.monotonic()
        subprocess.run(["ip", "link", "set", self.vh, "down"], check=True, timeout=10)
        self.d.wait_log(rf"job=link gen=\d+ the agent of node rank 1 \(.*\) sent no heartbeat for "
                        rf"{HB}\.0 s", since=mark, timeout=15)
        took = time.monotonic() - t0
        self.assertGreater(took, HB * 0.75)
        self.assertLess(took, HB + 3.0, "link down -> detected after the heartbeat timeout")
        gen2 = self.wait_starts(2, 2, agents=[a])
        self.assertEqual({e.agent for e in gen2}, {a.pid})
        # B's heartbeat lapsed about 2.5 s after its workers started: within the start-up
        # window (5 s) it never ran, not counted; on a slow machine it may lapse
        # past it. The workers' count is rdzvd's.
        self.assert_generation(2, 2, nnodes=1, restart=restart_said(self.d, "link", mark))
        # Cut off, B keeps its workers (it cannot tell a lost daemon from a lost job).
        self.assertTrue(all(pid_alive(self.worker_pid(1, r)) for r in (2, 3)))
        self.release()
        self.finish_all([a], 0)


if __name__ == "__main__":
    main()
