#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_ended_jobs.py: finished jobs stay visible. A job that ended used to
# vanish from STATUS, rdzvctl status, the status page and /metrics as soon as its agents left, so
# nobody could see afterwards how it ended. rdzvd now keeps each ended job (outcome, exit code,
# root cause, generation, restarts, how long it ran) for --keep-ended seconds (default an hour),
# at most --keep-ended-max of them (default 100), the oldest dropped first.
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from agenttest import AGENT, finish, job_status, start
from authtest import (EVENT, JOIN, JOINED, ROUND, STATUS, STATUS_REPLY, WORKER_EXIT,
                      Peer, join_body, resume)
from metricstest import daemon_with_metrics, http_get
from rdzvtest import RDZVD, DaemonTestCase, main, shut, wait_until

LEAVE = 0xAA
RDZVCTL = os.environ.get("RDZVCTL") or os.path.join(os.path.dirname(os.path.dirname(RDZVD)),
                                                    "ctl", "rdzvctl")


class Relay:
    """A relay in front of rdzvd: every connection passed on, until cut() closes them all (a
    network that drops them); new ones are passed on again."""

    def __init__(self, port):
        self.upstream = port
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.socks = []
        threading.Thread(target=self.accept, daemon=True).start()

    def close(self):
        self.lsock.close()
        self.cut()

    def cut(self):
        shut(*self.socks, close=False)
        self.socks = []

    def accept(self):
        while True:
            try:
                a, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # upstream down (rdzvd restarting): the agent tries again
                a.close()
                continue
            self.socks += [u, a]
            threading.Thread(target=self.pipe, args=(a, u), daemon=True).start()
            threading.Thread(target=self.pipe, args=(u, a), daemon=True).start()

    @staticmethod
    def pipe(src, dst):
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        shut(src, dst)


class EndedJobs(DaemonTestCase):

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        return p

    def run_job(self, d, run_id, fail=False):
        """One node, one generation: it succeeds (LEAVE) or fails (WORKER_EXIT, no restarts
        left); its agent then goes."""
        p = self.peer(d)
        body = join_body(run_id, "n0", mx=1)
        body["max_restarts"] = 0
        p.send(JOIN, body)
        op, _ = p.recv_json()
        self.assertEqual(op, JOINED)
        op, rnd = p.recv_json()
        self.assertEqual(op, ROUND, rnd)
        if fail:
            p.send(WORKER_EXIT, {"generation": 1, "rank": 0, "local_rank": 0, "exit_code": 3,
                                 "signal": 0, "time": time.time(), "host": "host-n0"})
        else:
            p.send(LEAVE, {"generation": 1, "status": "succeeded"})
        op, ev = p.recv_json()
        self.assertEqual(op, EVENT, ev)
        p.close()
        d.wait_log(r"job=%s gen=\d+ removed" % run_id)
        return ev

    def other_jobs_end(self, d, n):
        """n one-node jobs run and succeed, one after another."""
        for k in range(n):
            p = Peer(d.port)
            p.hello()
            p.send(JOIN, join_body("other-%d" % k, "n0", mx=1, max_restarts=0))
            self.assertEqual(p.recv_json()[0], JOINED)
            self.assertEqual(p.recv_json()[0], ROUND)
            p.send(LEAVE, {"generation": 1, "status": "succeeded"})
            op, ev = p.recv_json()
            self.assertEqual((op, ev["type"]), (EVENT, "succeeded"), ev)
            p.close()

    def away_and_cancelled(self, d, a):
        """Agent a stopped (SIGSTOP) past its heartbeat timeout: its job J leaves memory, and
        waits in its record; then the operator cancels J."""
        mark = d.mark()
        os.kill(a.pid, signal.SIGSTOP)
        self.addCleanup(lambda: a.poll() is None and os.kill(a.pid, signal.SIGCONT))
        d.wait_log(r"job=J gen=1 removed \(generation 1\)", since=mark)
        out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "cancel", "J"],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 0, out.stderr)

    def status(self, d):
        p = self.peer(d)
        p.send(STATUS, {})
        op, st = p.recv_json()
        self.assertEqual(op, STATUS_REPLY)
        return st

    def test_ended_jobs_stay_in_status(self):
        d, mport = daemon_with_metrics(self)
        self.run_job(d, "good")
        ev = self.run_job(d, "bad", fail=True)
        self.assertEqual(ev["type"], "failed", ev)
        jobs = {j["run_id"]: j for j in self.status(d)["jobs"]}
        self.assertEqual(set(jobs), {"good", "bad"})
        good, bad = jobs["good"], jobs["bad"]
        self.assertEqual((good["state"], good["outcome"]["type"], good["outcome"]["exit_code"]),
                         ("ended", "succeeded", 0), good)
        self.assertEqual((bad["outcome"]["type"], bad["outcome"]["exit_code"], bad["generation"],
                          bad["restart_count"]), ("failed", 3, 1, 0), bad)
        self.assertIn("exit", bad["outcome"]["summary"])  # the root cause
        for j in (good, bad):
            self.assertGreaterEqual(j["outcome"]["duration_s"], 0)
            self.assertTrue(0 <= j["outcome"]["ended_age_s"] < 30, j)
        # rdzvctl status says how it ended: one line each, the summary cut to the width;
        # --ended in full. /metrics has it under its own
        # names.
        def ctl_status(*args):
            out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "status", *args],
                                 capture_output=True, text=True, timeout=10,
                                 env=dict(os.environ, COLUMNS="90"))
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout

        text = ctl_status()
        self.assertNotIn("\njob ", text)
        self.assertRegex(text, r"(?m)^2 ended jobs \(rdzvctl status --ended shows each in full\):"
                               r"\n  RUN_ID +OUTCOME +EXIT +ENDED +SUMMARY$")
        self.assertRegex(text, r"(?m)^  good +succeeded +0 +\d+s ago  \S.*$")
        line = re.search(r"(?m)^  bad +failed +3 +\d+s ago  root cause: .*\.\.\.$", text)
        self.assertIsNotNone(line, text)
        self.assertEqual(len(line.group(0)), 90, text)
        self.assertRegex(ctl_status("--ended"), r"job bad: ended.*\n  outcome: failed, exit code "
                                                r"3, ran [0-9.]+ s, ended \d+ s ago: ")
        m = http_get(mport, "/metrics")
        self.assertIn('rdzvd_job_ended_exit_code{job="bad",outcome="failed"} 3', m)
        self.assertIn('rdzvd_job_ended_exit_code{job="good",outcome="succeeded"} 0', m)
        self.assertNotIn('rdzvd_job_generation{job="bad"}', m)  # the live families: live jobs
        self.assertIn("rdzvd_jobs 0\n", m)
        self.assertIn("bad", http_get(mport, "/status.json"))

    def test_keep_ended_bounds(self):
        d = self.daemon("--keep-ended", "1.5", "--keep-ended-max", "2")
        for name in ("a", "b", "c"):
            self.run_job(d, name)
        # At most 2: the oldest went first.
        self.assertEqual([j["run_id"] for j in self.status(d)["jobs"]], ["b", "c"])
        time.sleep(1.6)  # the behaviour: gone once --keep-ended (1.5 s) has passed
        self.assertEqual(self.status(d)["jobs"], [])
        d2 = self.daemon("--keep-ended", "0")
        self.run_job(d2, "x")
        self.assertEqual(self.status(d2)["jobs"], [])

    def test_ended_job_stays_ended_across_a_restart(self):
        """With --state-dir, how a job ended is kept in the job table: rdzvd killed and started
        again lists it as ended, and its agent coming back (a resume, with its secret) is told
        that outcome, not taken back into a job rebuilt from its word (policy W6)."""
        tmp = tempfile.TemporaryDirectory(prefix="rdzvtest-state-")
        self.addCleanup(tmp.cleanup)
        state = tmp.name
        d = self.daemon("--state-dir", state)
        p = self.peer(d)
        body = join_body("bad", "n0", mx=1)
        body["max_restarts"] = 0
        p.send(JOIN, body)
        op, joined = p.recv_json()
        self.assertEqual(op, JOINED, joined)
        op, rnd = p.recv_json()
        self.assertEqual(op, ROUND, rnd)
        p.send(WORKER_EXIT, {"generation": 1, "rank": 0, "local_rank": 0, "exit_code": 3,
                             "signal": 0, "time": time.time(), "host": "host-n0"})
        op, ev = p.recv_json()
        self.assertEqual((op, ev["type"]), (EVENT, "failed"), ev)
        p.close()
        d.wait_log(r"job=bad gen=\d+ removed")
        port = d.port
        d.kill()
        d2 = self.daemon("--state-dir", state, "--port", str(port))
        jobs = {j["run_id"]: j for j in self.status(d2)["jobs"]}
        self.assertEqual((jobs["bad"]["state"], jobs["bad"]["outcome"]["type"],
                          jobs["bad"]["outcome"]["exit_code"]), ("ended", "failed", 3), jobs)
        p = self.peer(d2)
        back = join_body("bad", "n0", mx=1, resume=resume(), secret=joined["secret"])
        back["max_restarts"] = 0
        back["age_ms"] = 600000  # its agent started before the end
        p.send(JOIN, back)
        op, ev = p.recv_json()
        self.assertEqual((op, ev["type"], ev["exit_code"]), (EVENT, "failed", 3), ev)  # 1.25
        self.assertIn("job 'bad' has ended: it failed", ev["summary"])

    def test_cancelled_job_never_comes_back(self):
        """A cancelled job never comes back, with a real agent A: rdzvd with --state-dir, job
        J runs on A. A is
        stopped (SIGSTOP) past its heartbeat timeout: rdzvd closes its connection, and J waits
        in its record. The operator cancels J (rdzvctl cancel). Then 300 one-node jobs run and
        end, past --keep-ended-max (2 here) and the 256 ends the job table keeps. A woken up
        finds its connection closed and resumes: it is refused, J has ended, and A stops its
        worker and exits 1. It was taken ("JOINED resumed") and J ran again."""
        state = tempfile.mkdtemp(prefix="rdzvtest-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state, "--fsync", "no", "--keep-ended-max", "2")
        ep = "127.0.0.1:%d" % d.port
        pidfile = os.path.join(state, "worker.pid")
        a = start([AGENT, "--endpoint", ep, "--rdzv-id", "J", "--nnodes", "1", "--nproc", "1",
                   "--nccl", "off", "--last-call", "0", "--heartbeat-timeout", "1", "--grace",
                   "1", "--", "/bin/sh", "-c", 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep '
                   '60' % (pidfile, pidfile, pidfile)])
        d.wait_log(r"job=J gen=1 generation 1 formed")
        # Its worker runs (on a loaded machine it starts well after the generation formed).
        wait_until(lambda: os.path.exists(pidfile), "the worker's pid file", timeout=30)
        self.away_and_cancelled(d, a)
        self.assertIsNotNone(d.find_log(r"job=J cancelled by the operator while it waited"))
        self.other_jobs_end(d, 300)
        os.kill(a.pid, signal.SIGCONT)
        rc, _, err = finish(a, timeout=10)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("job 'J' has ended, or ran on another rdzvd: it has no record here", err)
        with open(pidfile) as f:
            worker = int(f.read())
        self.assertFalse(os.path.exists("/proc/%d" % worker), "its worker is stopped")
        self.assertIsNone(d.find_log(r"job=J gen=1 node=\S+ is back"))

    def test_late_agent_of_a_cancelled_job_is_not_taken_into_a_new_run(self):
        """Case 5 of issue 71, with real agents: rdzvd with --state-dir, job J runs on A. A is
        stopped (SIGSTOP) past its heartbeat timeout: J waits in its record, and the operator
        cancels it. A new run of J starts on B (a requeue). A woken up resumes with its secret:
        it is told J was cancelled (an EVENT, 1.25), stops its worker and exits 143, the
        cancelled job's code; B's run goes on untouched. A
        was JOINED as a spare of B's run, then told to restart (policy X8)."""
        state = tempfile.mkdtemp(prefix="rdzvtest-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state, "--fsync", "no")
        ep = "127.0.0.1:%d" % d.port
        pidfile = os.path.join(state, "worker.pid")
        line = ["--endpoint", ep, "--rdzv-id", "J", "--nnodes", "1", "--nproc", "1", "--nccl",
                "off", "--last-call", "0", "--heartbeat-timeout", "1", "--grace", "1", "--",
                "/bin/sh", "-c", 'echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE" && '
                'exec sleep 60']
        a = start([AGENT, "--host", "a", *line], env={"PIDFILE": pidfile})
        d.wait_log(r"job=J gen=1 generation 1 formed")
        wait_until(lambda: os.path.exists(pidfile), "the worker's pid file", timeout=30)
        self.away_and_cancelled(d, a)
        mark = d.mark()
        b = start([AGENT, "--host", "b", *line], env={"PIDFILE": pidfile + ".b"})
        self.addCleanup(lambda: b.poll() is None and os.killpg(b.pid, signal.SIGKILL))
        d.wait_log(r"job=J gen=1 generation 1 formed", since=mark)
        os.kill(a.pid, signal.SIGCONT)
        rc, _, err = finish(a, timeout=20)
        self.assertEqual(rc, 143, err[-3000:])
        self.assertIn("job 'J' has ended: it cancelled", err[-1500:])
        with open(pidfile) as f:
            worker = int(f.read())
        wait_until(lambda: not os.path.exists("/proc/%d" % worker), "A's worker stopped",
                   timeout=10)
        self.assertIsNone(b.poll(), "B runs on")
        self.assertEqual(job_status(ep, "J")["generation"], 1)
        self.assertIsNone(d.find_log(r"job=J gen=1 node=a reconnected", since=mark))

    def test_agent_stopped_for_a_restart_is_told_its_job_is_over(self):
        """An ended job never comes back from an agent that stopped its workers for a restart
        (1.20), with real agents: no --state-dir, no end kept (--keep-ended 0). Job J runs on A
        (through a relay) and B; B is killed, and A stops its worker for the restart (its READY
        goes) and waits for the next round. A's connection is cut: J ends with its last node.
        A reconnects and JOINs again with no resume: it is told J is over (its JOIN names the
        rdzvd that ran its generation), and exits 1. It was made a new job of J, which waited
        for a second node."""
        d = self.daemon("--keep-ended", "0")
        relay = Relay(d.port)
        self.addCleanup(relay.close)
        line = ["--rdzv-id", "J", "--nnodes", "2", "--nproc", "1", "--nccl", "off",
                "--last-call", "0", "--max-restarts", "3", "--", "/bin/sh", "-c", "exec sleep 60"]
        a = start([AGENT, "--endpoint", "127.0.0.1:%d" % relay.port, "--host", "a", *line])
        b = start([AGENT, "--endpoint", "127.0.0.1:%d" % d.port, "--host", "b", *line])
        d.wait_log(r"job=J gen=1 generation 1 formed")
        os.killpg(b.pid, signal.SIGKILL)
        # A's READY went: the job forms its next generation, and waits for a second node.
        wait_until(lambda: (job_status("127.0.0.1:%d" % d.port, "J") or {}).get("state") ==
                   "forming", "J forming again", timeout=30)
        mark = d.mark()
        relay.cut()
        rc, _, err = finish(a, timeout=15)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("workers of generation 1 stopped; ready for the next round", err)
        self.assertIn("job 'J' is over: this rdzvd ran a generation of it and has not "
                      "restarted since", err)
        self.assertIsNotNone(d.find_log(r"job=J gen=1 .*it was the job's last node",
                                        since=mark), d.log()[-3000:])

    def test_agent_stopped_after_a_rebuild_is_told_its_job_is_over(self):
        """The same after an rdzvd restart (1.20): no --state-dir, no end kept. Job J runs on
        A and B; rdzvd restarts and rebuilds J from their resumes. B is killed, and A stops its
        worker for the restart and waits for the next round. A's connection (through a relay)
        is cut: J ends with its last node. A reconnects and JOINs again with no resume, naming
        the rdzvd that took its resume: it is told J is over, and exits 1. It named the rdzvd
        before the restart, and was made a new job of J, which waited for a second node."""
        d = self.daemon("--keep-ended", "0")
        port = d.port
        ep = "127.0.0.1:%d" % port
        relay = Relay(port)
        self.addCleanup(relay.close)
        ran = tempfile.mkdtemp(prefix="rdzvtest-ran-")
        self.addCleanup(shutil.rmtree, ran, True)
        line = ["--rdzv-id", "J", "--nnodes", "2", "--nproc", "1", "--nccl", "off",
                "--last-call", "0", "--max-restarts", "3", "--", "/bin/sh", "-c",
                "touch %s/rank.$RANK && exec sleep 60" % ran]
        a = start([AGENT, "--endpoint", "127.0.0.1:%d" % relay.port, "--host", "a", *line])
        b = start([AGENT, "--endpoint", ep, "--host", "b", *line])
        # Both workers run (each agent got its ROUND) before rdzvd goes.
        wait_until(lambda: len(os.listdir(ran)) == 2, "both workers started", timeout=30)
        d.kill()
        d = self.daemon("--keep-ended", "0", "--port", str(port))
        d.wait_log(r"job=J gen=1 generation 1 rebuilt; its workers never stopped")
        os.killpg(b.pid, signal.SIGKILL)
        wait_until(lambda: (job_status(ep, "J") or {}).get("state") == "forming",
                   "J forming again", timeout=30)
        mark = d.mark()
        relay.cut()
        d.wait_log(r"job=J gen=1 .*it was the job's last node", since=mark)
        rc, _, err = finish(a, timeout=15)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("workers of generation 1 stopped; ready for the next round", err)
        self.assertIn("job 'J' is over: this rdzvd ran a generation of it and has not "
                      "restarted since", err)

    def test_cancelled_job_never_comes_back_to_a_stopped_agent(self):
        """The same for an agent that stopped its worker for a restart (1.20): job J, with
        --state-dir, runs on A and B; B is killed, and A stops its worker (its READY goes) and
        waits for the next round. A is stopped (SIGSTOP) past its heartbeat timeout: J waits in
        its record. The operator cancels J, 300 other jobs end, and rdzvd restarts. A woken up
        JOINs again with no resume: J has no record, so it ended; A exits 1. It was made a new
        job of J, which waited for a second node."""
        state = tempfile.mkdtemp(prefix="rdzvtest-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--state-dir", state, "--fsync", "no", "--keep-ended-max", "2")
        ep = "127.0.0.1:%d" % d.port
        line = [AGENT, "--endpoint", ep, "--rdzv-id", "J", "--nnodes", "2", "--nproc", "1",
                "--nccl", "off", "--last-call", "0", "--heartbeat-timeout", "1",
                "--max-restarts", "3", "--", "/bin/sh", "-c", "exec sleep 60"]
        a, b = start([*line[:3], "--host", "a", *line[3:]]), start(line)
        d.wait_log(r"job=J gen=1 generation 1 formed")
        os.killpg(b.pid, signal.SIGKILL)
        wait_until(lambda: (job_status(ep, "J") or {}).get("state") == "forming",
                   "J forming again", timeout=30)
        self.away_and_cancelled(d, a)
        self.other_jobs_end(d, 300)
        d.kill()
        d = self.daemon("--state-dir", state, "--fsync", "no", "--port", ep.split(":")[1])
        os.kill(a.pid, signal.SIGCONT)
        rc, _, err = finish(a, timeout=15)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("workers of generation 1 stopped; ready for the next round", err)
        self.assertIn("job 'J' has ended, or ran on another rdzvd: it has no record here", err)

    def test_keep_ended_mistakes(self):
        for args, words in ((("--keep-ended", "-1"), "keep-ended"),
                            (("--keep-ended-max", "100001"), "keep-ended-max")):
            r = subprocess.run([RDZVD, *args], capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(words, r.stderr)


if __name__ == "__main__":
    main()
