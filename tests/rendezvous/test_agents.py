# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent against a real rdzvd, agents started by hand: the worker contract, node ranks,
errors, outcome and exit status, signals, and 256 agents on one machine."""
import os
import re
import shutil
import signal
import time

from agenttest import (AGENT, ENV_WORKER, AgentTestCase, agent_cmd, finish, main, read_envs,
                       start)


def _gone(pid):
    """Exited: no such process, or a zombie whose reaper is not ours."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class TestByHand(AgentTestCase):
    def test_two_agents_four_workers_each_get_the_contract(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        ps = [start(agent_cmd(ep, "--nnodes", "2", "--nproc", "4", "--rdzv-id", "hand-1",
                              worker=ENV_WORKER), env={"RDZV_TEST_OUT": out}) for _ in range(2)]
        for p in ps:
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        self.assert_contract(read_envs(out), 2, 4, "hand-1", ep)
        # The daemon logged the round and the job's success.
        d.wait_log(r"job=hand-1 gen=1 generation 1 formed: 2 nodes, world size 8")
        d.wait_log(r"job=hand-1 gen=1 generation 1 succeeded")

    def test_node_rank_is_honoured_and_ranks_follow_it(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        # Start node rank 1 first: join order must not decide the rank when one is asked for.
        p1 = start(agent_cmd(ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "nr", "--node-rank",
                             "1", "--host", "nodeB", worker=ENV_WORKER), env={"RDZV_TEST_OUT": out})
        d.wait_log(r"job=nr gen=0 node=nodeB joined")
        p0 = start(agent_cmd(ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "nr", "--node-rank",
                             "0", "--host", "nodeA", worker=ENV_WORKER), env={"RDZV_TEST_OUT": out})
        for p in (p0, p1):
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        envs = read_envs(out)
        self.assert_contract(envs, 2, 2, "nr", ep)
        self.assertEqual({envs[r]["GROUP_RANK"] for r in (2, 3)}, {"1"})

    def test_uneven_nproc_offsets(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        p0 = start(agent_cmd(ep, "--nnodes", "2", "--nproc", "3", "--rdzv-id", "uneven",
                             "--node-rank", "0", worker=ENV_WORKER), env={"RDZV_TEST_OUT": out})
        p1 = start(agent_cmd(ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "uneven",
                             "--node-rank", "1", worker=ENV_WORKER), env={"RDZV_TEST_OUT": out})
        for p in (p0, p1):
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        envs = read_envs(out)
        self.assertEqual(sorted(envs), [0, 1, 2, 3])
        self.assertEqual([envs[r]["GROUP_RANK"] for r in range(4)], ["0", "0", "0", "1"])
        self.assertEqual(envs[3]["LOCAL_RANK"], "0")
        self.assertEqual({e["WORLD_SIZE"] for e in envs.values()}, {"4"})

    def test_elastic_round_closes_after_last_call(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        t0 = time.monotonic()
        ps = [start(agent_cmd(ep, "--nnodes", "1:4", "--nproc", "1", "--rdzv-id", "el",
                              "--last-call", "0.5", worker=ENV_WORKER),
                    env={"RDZV_TEST_OUT": out}) for _ in range(2)]
        for p in ps:
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        envs = read_envs(out)
        self.assertIn(len(envs), (1, 2))
        self.assertEqual({e["WORLD_SIZE"] for e in envs.values()}, {str(len(envs))})
        self.assertLess(time.monotonic() - t0, 10)


class TestErrors(AgentTestCase):
    def test_conflicting_node_rank_is_refused_clearly(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p0 = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "c", "--node-rank", "0",
                             worker=["sleep", "30"]))
        d.wait_log(r"job=c gen=0 node=\S+ joined")
        p1 = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "c", "--node-rank", "0",
                             worker=["true"]))
        rc, _, err = finish(p1, timeout=20)
        self.assertNotEqual(rc, 0)
        self.assertIn("node rank 0 of job 'c' is already taken", err)
        p0.send_signal(signal.SIGTERM)
        finish(p0, timeout=20)

    def test_out_of_range_node_rank(self):
        p = start([AGENT, "--endpoint", "127.0.0.1:1", "--nnodes", "2", "--rdzv-id", "x",
                   "--node-rank", "5", "--", "true"])
        rc, _, err = finish(p, timeout=10)
        self.assertEqual(rc, 2)
        self.assertIn("node rank 5 is out of range", err)
        self.assertEqual(len(err.strip().splitlines()), 1, "one-line message")

    def test_missing_run_id_and_endpoint_and_command(self):
        for args, text in ((["--endpoint", "127.0.0.1:1", "--", "true"], "pass --rdzv-id"),
                           (["--rdzv-id", "x", "--", "true"], "pass --endpoint"),
                           (["--nnodes", "3:2", "--standalone", "--", "true"],
                            "MIN must not exceed MAX"),
                           (["--bogus"], "unknown option")):
            p = start([AGENT, *args])
            rc, _, err = finish(p, timeout=10)
            self.assertEqual(rc, 2, f"{args}: {err}")
            self.assertIn(text, err, args)

    def test_no_command_without_the_trainer(self):
        # A copy of the agent with no rdzv-train beside it and an empty PATH: a clear error.
        d = self.outdir()
        agent = os.path.join(d, "rdzv-agent")
        shutil.copy(AGENT, agent)
        p = start([agent, "--standalone"], env={"PATH": d})
        rc, _, err = finish(p, timeout=10)
        self.assertEqual(rc, 2, err)
        self.assertIn("give a command after --", err)

    def test_unreachable_daemon_fails_within_connect_timeout(self):
        t0 = time.monotonic()
        p = start([AGENT, "--endpoint", "127.0.0.1:1", "--rdzv-id", "x", "--connect-timeout",
                   "1", "--", "true"])
        rc, _, err = finish(p, timeout=15)
        self.assertEqual(rc, 68, err)  # no rdzvd answered: its own status
        self.assertIn("cannot reach rdzvd at 127.0.0.1:1", err)
        self.assertLess(time.monotonic() - t0, 6)

    def test_mismatched_nnodes_is_refused(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p0 = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "mm", worker=["sleep", "30"]))
        d.wait_log(r"job=mm gen=0 node=\S+ joined")
        p1 = start(agent_cmd(ep, "--nnodes", "3", "--rdzv-id", "mm", worker=["true"]))
        rc, _, err = finish(p1, timeout=20)
        self.assertEqual(rc, 1)
        self.assertIn("start every agent with the same values", err)
        p0.send_signal(signal.SIGTERM)
        finish(p0, timeout=20)


    def test_second_job_with_another_command_is_refused_at_once(self):
        """A second agent started with a running job's --rdzv-id and another command is told
        so at once; a spare with the job's own command runs nothing and says
        so when the job succeeds, rc 0."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        gate = os.path.join(self.outdir(), "go")
        work = ["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
        p0 = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "cmd", worker=work))
        d.wait_log(r"job=cmd gen=1 generation 1 formed")
        t0 = time.monotonic()
        other = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "cmd",
                                worker=["python3", "other.py"]))
        rc, _, err = finish(other, timeout=20)
        self.assertEqual(rc, 1, err[-2000:])
        self.assertIn("job 'cmd' runs another command than this agent's", err)
        self.assertIn("give this one its own --rdzv-id", err)
        self.assertLess(time.monotonic() - t0, 10)
        # --any-command: this agent's command is not compared (per-node arguments).
        anyc = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "cmd", "--any-command",
                               worker=["python3", "other.py"]))
        d.wait_log(r"job=cmd gen=1 node=\S+ joined .* 2 of 1\.\.1 \(waits for the next")
        spare = start(agent_cmd(ep, "--nnodes", "1", "--rdzv-id", "cmd", worker=work))
        d.wait_log(r"job=cmd gen=1 node=\S+ joined .* 3 of 1\.\.1 \(waits for the next")
        open(gate, "w").close()
        rc, _, err = finish(p0, timeout=30)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("job cmd succeeded", err)
        for p in (spare, anyc):
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 0, err[-2000:])
            self.assertIn("this node ran nothing: it waited as a spare, and job cmd succeeded on "
                          "its other nodes", err)

class TestOutcome(AgentTestCase):
    def test_worker_failure_fails_every_node_with_its_exit_code_and_root_cause(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        fail = ["/bin/sh", "-c", 'if [ "$RANK" = 5 ]; then exit 7; fi; exec sleep 60']
        t0 = time.monotonic()
        ps = [start(agent_cmd(ep, "--nnodes", "2", "--nproc", "4", "--rdzv-id", "f",
                              "--node-rank", str(i), "--grace", "2", worker=fail)) for i in (0, 1)]
        res = [finish(p, timeout=30) for p in ps]
        for rc, _, err in res:
            self.assertEqual(rc, 7, err[-2000:])
            self.assertIn("worker rank 5 (local rank 1) on node rank 1", err)
            self.assertIn("exited with code 7", err)
        # No exit barrier: the healthy node stops within the grace period, not minutes.
        self.assertLess(time.monotonic() - t0, 15)

    def test_signal_death_exit_code_is_128_plus_n(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p = start(agent_cmd(ep, "--rdzv-id", "sig", "--nproc", "2", worker=[
            "/bin/sh", "-c", 'if [ "$LOCAL_RANK" = 1 ]; then kill -9 $$; fi; exec sleep 60']))
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 137, err[-2000:])
        self.assertIn("killed by signal 9", err)

    def test_sigterm_is_forwarded_to_workers(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = ["/bin/sh", "-c",
                  'trap "echo got-term > $RDZV_TEST_OUT/term.$RANK; exit 0" TERM; '
                  'touch $RDZV_TEST_OUT/up.$RANK; while :; do sleep 0.1; done']
        p = start(agent_cmd(ep, "--rdzv-id", "term", "--nproc", "2", worker=worker),
                  env={"RDZV_TEST_OUT": out})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
                os.path.exists(f"{out}/up.{r}") for r in (0, 1)):
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 128 + signal.SIGTERM, err[-2000:])
        for r in (0, 1):
            with open(f"{out}/term.{r}") as f:
                self.assertEqual(f.read().strip(), "got-term")

    def _pid_worker(self, out, script=""):
        """A worker that writes its pid to out/pid.RANK.GEN (after script), then sleeps."""
        f = "$RDZV_TEST_OUT/pid.$RANK.$TORCHELASTIC_RESTART_COUNT"
        return ["/bin/sh", "-c", script + f"echo $$ > {f}.tmp; mv {f}.tmp {f}; exec sleep 60"]

    def _wait_pid(self, out, name):
        path = os.path.join(out, name)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not os.path.exists(path):
            time.sleep(0.05)
        with open(path) as f:
            return int(f.read())

    def test_step_signal_reaching_a_worker_first_is_the_node_leaving(self):
        """scancel, a time limit or a Ctrl-C signals the workers and the agent alike, in either
        order. A worker killed first is not a failure: the job is cancelled, with no restart
        begun and none charged (the agent holds the worker's report for its own signal)."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        p = start(agent_cmd(ep, "--rdzv-id", "first", "--nproc", "2", "--max-restarts", "3",
                            worker=self._pid_worker(out)), env={"RDZV_TEST_OUT": out})
        pids = [self._wait_pid(out, f"pid.{r}.0") for r in (0, 1)]
        os.kill(pids[1], signal.SIGTERM)
        time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 128 + signal.SIGTERM, err[-2000:])
        self.assertIn("job first cancelled", err)
        self.assertNotIn("restarting", d.log())
        self.assertIn("generation 1 cancelled (exit code 143)", d.log())

    def test_sigterm_to_one_worker_alone_is_its_failure(self):
        """The same signal to one worker only (an operator, a watchdog): after the hold, its
        failure is reported and the job restarts (charged to the job, not the node)."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = self._pid_worker(out,
                                  'if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then exit 0; fi; ')
        p = start(agent_cmd(ep, "--rdzv-id", "alone", "--nproc", "2", "--max-restarts", "3",
                            worker=worker), env={"RDZV_TEST_OUT": out})
        os.kill(self._wait_pid(out, "pid.1.0"), signal.SIGTERM)
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("did not reach this agent within 500 ms: reporting its failure", err)
        self.assertRegex(d.log(), r"restarting generation 1 \(restart 1 of 3\): root cause: "
                         r"worker rank 1 .*killed by signal 15 .*a signal from outside")

    def test_missing_command_exits_127_with_a_clear_message(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p = start(agent_cmd(ep, "--rdzv-id", "nocmd", "--nproc", "2",
                            worker=["rdzv-no-such-command", "arg"]))
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 127, err[-2000:])
        for r in (0, 1):
            self.assertIn(f"[rank{r}]: rdzv-agent: cannot run 'rdzv-no-such-command': "
                          "No such file or directory", err)
        self.assertIn("exited with code 127", err)

    def test_sigkilled_agent_leaves_no_worker_behind(self):
        """The reaper kills the workers' process groups (their children too) when the agent is
        SIGKILLed: nothing else would, as each worker leads its own session."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        worker = ["/bin/sh", "-c", 'sleep 60 & echo "$$ $!" > "$RDZV_TEST_OUT/p.$RANK.tmp"; '
                  'mv "$RDZV_TEST_OUT/p.$RANK.tmp" "$RDZV_TEST_OUT/p.$RANK"; wait']
        p = start(agent_cmd(ep, "--rdzv-id", "k9", "--nproc", "2", worker=worker),
                  env={"RDZV_TEST_OUT": out})
        pids = []
        deadline = time.monotonic() + 20
        for r in (0, 1):
            path = f"{out}/p.{r}"
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.02)
            with open(path) as f:
                pids += [int(x) for x in f.read().split()]
        self.addCleanup(_kill_all, pids)
        p.kill()
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, -signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(_gone(x) for x in pids):
            time.sleep(0.02)
        self.assertEqual([x for x in pids if not _gone(x)], [], err[-2000:])
        # Both groups, listed to the reaper or (a worker SIGKILLed with the agent right after
        # its spawn, before its listing went out) found by the token in its environment.
        m = re.search(r"SIGKILLed the (\d+) worker process group\(s\) it had listed"
                      r"(?: and (\d+) more found by its token)?", err)
        self.assertIsNotNone(m, err[-2000:])
        self.assertEqual(int(m.group(1)) + int(m.group(2) or 0), 2, m.group(0))

    def test_sigkilled_agents_directory_is_removed_by_the_next_agent(self):
        """A SIGKILLed agent cannot remove its private directory ($TMPDIR/rdzv-ID-XXXXXX): the
        next agent of the user on the host does, as it starts its workers (its lock is free),
        whatever the job. A live agent's directory, and one kept for logs, stay. Before, the
        directory stayed for good."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        tmp = os.path.join(out, "tmp")
        os.mkdir(tmp)
        kept = os.path.join(tmp, "rdzv-kept-AAAAAA")  # a directory of logs: no lock in it
        os.mkdir(kept)
        worker = ["/bin/sh", "-c", 'echo $$ > "$RDZV_TEST_OUT/$TORCHELASTIC_RUN_ID"; '
                  'exec sleep 60']
        env = {"RDZV_TEST_OUT": out, "TMPDIR": tmp}
        live = start(agent_cmd(ep, "--rdzv-id", "live", "--nproc", "1", worker=worker),
                     env=env)
        p = start(agent_cmd(ep, "--rdzv-id", "k10", "--nproc", "1", worker=worker), env=env)
        deadline = time.monotonic() + 20
        while not all(os.path.exists(os.path.join(out, r)) for r in ("live", "k10")):
            self.assertLess(time.monotonic(), deadline, os.listdir(out))
            time.sleep(0.02)
        dirs = sorted(os.listdir(tmp))
        self.assertEqual(len([x for x in dirs if x.startswith("rdzv-k10-")]), 1, dirs)
        p.kill()
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, -signal.SIGKILL)
        self.assertEqual(sorted(os.listdir(tmp)), dirs, "gone before the next agent")
        nxt = start(agent_cmd(ep, "--rdzv-id", "next", "--nproc", "1", worker=["true"]),
                    env=env)
        rc, _, err = finish(nxt, timeout=30)
        self.assertEqual(rc, 0, err[-2000:])
        left = sorted(os.listdir(tmp))
        self.assertEqual([x for x in left if x.startswith("rdzv-k10-")], [], err[-2000:])
        self.assertIn("rdzv-kept-AAAAAA", left)
        self.assertEqual(len([x for x in left if x.startswith("rdzv-live-")]), 1, left)
        live.terminate()
        finish(live, timeout=20)
        self.assertEqual(os.listdir(tmp), ["rdzv-kept-AAAAAA"])

    def test_output_is_prefixed_with_the_rank(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p = start(agent_cmd(ep, "--rdzv-id", "out", "--nproc", "2",
                            worker=["/bin/sh", "-c",
                                    'echo "hello from $RANK"; echo "err $RANK" >&2']))
        rc, out, err = finish(p, timeout=30)
        self.assertEqual(rc, 0, err)
        self.assertIn("[rank0]: hello from 0", out)
        self.assertIn("[rank1]: hello from 1", out)
        self.assertIn("[rank1]: err 1", err)

    def test_standalone_runs_without_a_daemon(self):
        out = self.outdir()
        p = start([AGENT, "--standalone", "--nproc", "3", "--", *ENV_WORKER],
                  env={"RDZV_TEST_OUT": out})
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 0, err[-2000:])
        envs = read_envs(out)
        self.assertEqual(sorted(envs), [0, 1, 2])
        self.assertTrue(envs[0]["TORCHELASTIC_RUN_ID"].startswith("standalone-"))

    def test_endpoint_port_0_hosts_on_a_free_port(self):
        # torchtitan's line: torchrun --rdzv_backend c10d --rdzv_endpoint="localhost:0" (the
        # agent hosts the store on a free port), refused as "bad --endpoint" before; and the
        # static backend's --master_port 0. The given run id is kept.
        for args in (["--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0", "--rdzv_id", "tt"],
                     ["--master_addr", "127.0.0.1", "--master_port", "0", "--rdzv_id", "tt"]):
            out = self.outdir()
            p = start([AGENT, "--nnodes", "1", "--nproc_per_node", "2", *args, "--",
                       *ENV_WORKER], env={"RDZV_TEST_OUT": out})
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 0, err[-2000:])
            self.assertIn("(port 0: a free port, as torchrun)", err)
            envs = read_envs(out)
            self.assertEqual(sorted(envs), [0, 1])
            self.assertEqual(envs[0]["TORCHELASTIC_RUN_ID"], "tt")
            self.assertNotEqual(envs[0]["MASTER_PORT"], "0")
            self.assertEqual(envs[0]["MASTER_PORT"], envs[1]["MASTER_PORT"])
        # More than one node cannot find a free port chosen on one of them: one line, exit 2.
        p = start([AGENT, "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                   "localhost:0", "--", "true"])
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("port 0 (a free port, as torchrun) serves one node", err)


class TestBlockedLoop(AgentTestCase):
    def test_agent_blocked_starting_a_worker_keeps_rdzvd(self):
        """uv_spawn blocks the agent's loop until the worker has exec'd. On a starved machine
        (256 ASan agents starting their workers at once on 2 cores) that took 5.7 s, past the
        heartbeat timeout: on waking, the agent's timers ran before it read rdzvd's answer, it
        took rdzvd for silent and reconnected, and rdzvd failed the job. strace delays the
        worker's execve by 3 s against a 2 s timeout (rdzvd allows 3 timeouts after a ROUND)."""
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        delay_s = 3
        # Only the worker's execve (-P): the agent's helpers (reaper, NCCL root) exec too.
        cmd = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", "/usr/bin/true",
               "-e", "trace=execve", "-e", "signal=none",
               "-e", f"inject=execve:delay_enter={delay_s * 1000000}",
               *agent_cmd(ep, "--nnodes", "1", "--nproc", "1", "--rdzv-id", "slow-exec",
                          "--heartbeat-timeout", "2", "--max-restarts", "0",
                          worker=["/usr/bin/true"])]
        # LeakSanitizer cannot run under ptrace: in a sanitizer build it would fail the exit.
        asan = os.environ.get("ASAN_OPTIONS", "")
        p = start(cmd, env={"ASAN_OPTIONS": (asan + ":" if asan else "") + "detect_leaks=0"})
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertNotIn("sent nothing", err)
        # The block happened: the agent's loop was held from "starting" to "started".
        ts = {}
        for line in err.splitlines():
            m = re.match(r"\S+T(\d+):(\d+):([\d.]+)Z .*\b(starting|started) (1 )?worker", line)
            if m:
                ts[m.group(4)] = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        self.assertEqual(sorted(ts), ["started", "starting"], err[-3000:])
        self.assertGreaterEqual(ts["started"] - ts["starting"], delay_s - 0.1, err[-3000:])


class TestScale(AgentTestCase):
    def test_256_agents_one_worker_each(self):
        d = self.daemon(log_level="warn")
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        n = 256
        worker = ["/bin/sh", "-c", 'date +%s.%N > "$RDZV_TEST_OUT/start.$RANK"']
        t0 = time.time()
        ps = [start(agent_cmd(ep, "--nnodes", str(n), "--nproc", "1", "--rdzv-id", "big",
                              "--log-level", "warn", worker=worker),
                    env={"RDZV_TEST_OUT": out}) for _ in range(n)]
        fails = []
        for p in ps:
            rc, _, err = finish(p, timeout=120)
            if rc != 0:
                fails.append(err[-500:])
        self.assertEqual(fails, [])
        starts = {}
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                starts[int(name.split(".")[1])] = float(f.read())
        self.assertEqual(sorted(starts), list(range(n)), "every rank exactly once")
        last = max(starts.values()) - t0
        # The figure (target: under 3 s) is reported by tests/bench/scale-agents.sh on a quiet
        # machine; here only a hang guard, since CI shares its two cores.
        print(f"256 agents: last worker started {last:.2f} s after the first launch")
        self.assertLess(last, 60.0)


if __name__ == "__main__":
    main()
