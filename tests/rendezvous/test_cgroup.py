# SPDX-License-Identifier: Apache-2.0
"""Nothing a worker starts outlives its job: a worker that starts
`setsid env -i sleep ...` (a session of its own, an empty environment: neither the kill of the
worker's process group nor the reaper's token scan finds it) and exits. Where the agent may make a
cgroup (root here), the workers run in one below the agent's own (cgroup v2), and the end of each
generation kills everything in it: at the end of the job, and before a restart's new workers,
which are not killed by it. With --no-cgroup the agent says it tracks them by process group and
token, and such a process outlives the job (as before). Skipped where the agent has no cgroup, as
it says at start ("no cgroup (<why>)": not root, root in a user namespace, a read-only cgroup2
mount, no cgroup.kill before Linux 5.14): a delegated subtree works too, but the test does not
make one."""
import os
import re
import shutil
import signal
import subprocess
import time

from agenttest import AGENT, AgentTestCase, finish, main, start

# Starts the escaping process, records its pid in $RDZV_TEST_OUT/gc.<restart>.<local rank> once it
# runs sleep (it went through setsid and env), then goes on with the rest of the worker.
ESCAPE = ('setsid env -i sleep 600 & p=$!; '
          'echo $p > "$RDZV_TEST_OUT/gc.$TORCHELASTIC_RESTART_COUNT.$LOCAL_RANK"; i=0; '
          'while [ "$(cat /proc/$p/comm)" != sleep ] && [ $i -lt 500 ]; do '
          'sleep 0.01; i=$((i+1)); done; ')


def cgroup2_mount():
    """The first read-write cgroup2 mount point, where the agent's cgroup is, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fields = pre.split()
            if post.startswith("cgroup2 ") and "rw" in fields[5].split(","):
                return fields[4].replace("\\040", " ")
    return None


def pid_gone(pid):
    """Gone once reaped or a zombie (re-parented: its reaper is not ours to wait for)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_gone(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pid_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class TestCgroup(AgentTestCase):
    no_cgroup = None  # why the agent has none here, in its words ("" when it has one)

    def setUp(self):
        if TestCgroup.no_cgroup is None:
            # Ask the agent itself: the one line it says at start.
            rc, _, err = finish(start([AGENT, "--standalone", "--nproc", "1", "--", "true"]))
            m = re.search(r"no cgroup \((.*)\)$", err, re.M)
            if not m and "workers run in cgroup " not in err:
                self.fail(f"the agent said neither that it has a cgroup nor why not (rc {rc}):\n"
                          f"{err}")
            TestCgroup.no_cgroup = m.group(1) if m else ""
        if TestCgroup.no_cgroup:
            self.skipTest(f"the agent has no cgroup here: {TestCgroup.no_cgroup}")
        self.mount = cgroup2_mount()

    def run_agent(self, *args, worker, timeout=60):
        out = self.outdir()
        p = start([AGENT, "--standalone", *args, "--", "/bin/sh", "-c", worker],
                  env={"RDZV_TEST_OUT": out})
        rc, stdout, err = finish(p, timeout=timeout)
        pids = {}
        for name in os.listdir(out):
            if name.startswith("gc."):
                with open(os.path.join(out, name)) as f:
                    pids[name[3:]] = int(f.read())
                self.addCleanup(self.kill_leftover, pids[name[3:]])
        return rc, stdout, err, pids, out

    @staticmethod
    def kill_leftover(pid):
        if not pid_gone(pid):
            os.kill(pid, signal.SIGKILL)

    def assert_cgroup_line(self, err):
        m = re.search(r"\[info\]: workers run in cgroup (/\S*rdzv-agent\.[0-9a-f.]+) "
                      r"\(cgroup v2\): everything they start is killed at the end of each "
                      r"generation", err)
        self.assertIsNotNone(m, err)
        return m.group(1)

    def test_escaped_grandchild_is_gone_when_the_job_ends(self):
        rc, _, err, pids, _ = self.run_agent("--nproc", "2", worker=ESCAPE + "exit 0")
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(pids), ["0.0", "0.1"], err)
        for k, pid in pids.items():
            self.assertTrue(wait_gone(pid), f"{k}: pid {pid} outlived the job:\n{err}")
        name = self.assert_cgroup_line(err)
        self.assertIn(f"processes left in the workers' cgroup {name} after they exited: "
                      f"killing them", err)
        self.assertFalse(os.path.exists(self.mount + name), "the cgroup is removed at the end")

    def test_restart_kills_the_first_generation_and_spares_the_second(self):
        # The second generation's worker waits (5 s at most) for the first's escaped process to
        # be gone, says whether it was, and runs on for a second: a kill of the cgroup written
        # after its spawn would end it.
        worker = (ESCAPE + 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 1; fi; '
                  'p0=$(cat "$RDZV_TEST_OUT/gc.0.0"); i=0; '
                  'state() { cut -d" " -f3 /proc/$p0/stat 2>/dev/null || echo X; }; '
                  'while [ "$(state)" != Z ] && [ "$(state)" != X ] && [ $i -lt 500 ]; do '
                  'sleep 0.01; i=$((i+1)); done; '
                  'echo "first generation\'s process: $(state)"; sleep 1; echo "done"; exit 0')
        rc, out, err, pids, _ = self.run_agent("--nproc", "1", "--max-restarts", "1",
                                               worker=worker)
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(pids), ["0.0", "1.0"], err)
        self.assertRegex(out, r"\[rank0\]: first generation's process: [ZX]\n")
        self.assertIn("[rank0]: done\n", out, "the second generation's worker ran to its end")
        name = self.assert_cgroup_line(err)
        killed = f"processes left in the workers' cgroup {name} after they exited: killing them"
        second = "starting 1 worker (ranks 0..0 of 1, generation 2, attempt 1)"
        self.assertIn(killed, err)
        self.assertIn(second, err)
        self.assertLess(err.index(killed), err.index(second),
                        "the first generation's processes are killed before the second starts")
        for k, pid in pids.items():
            self.assertTrue(wait_gone(pid), f"{k}: pid {pid} outlived the job:\n{err}")

    def test_a_chatty_escaped_process_does_not_keep_the_job_running(self):
        # It left the worker's session holding its stdout, and writes a line every 0.5 s: the
        # drain of output after the last exit, which waits for 2 s of silence, would wait for
        # ever. The cgroup is killed as soon as the last worker has exited, and the pipe ends.
        worker = ('setsid sh -c "while :; do echo tick; sleep 0.5; done" & '
                  'echo $! > "$RDZV_TEST_OUT/gc.$TORCHELASTIC_RESTART_COUNT.$LOCAL_RANK"; '
                  'sleep .3; exit 0')
        t0 = time.monotonic()
        rc, _, err, pids, _ = self.run_agent("--nproc", "1", worker=worker, timeout=20)
        self.assertEqual(rc, 0, err)
        self.assertLess(time.monotonic() - t0, 15, err)
        self.assertEqual(list(pids), ["0.0"], err)
        self.assertTrue(wait_gone(pids["0.0"]), f"pid {pids['0.0']} outlived the job:\n{err}")
        name = self.assert_cgroup_line(err)
        self.assertIn(f"processes left in the workers' cgroup {name} after they exited: "
                      f"killing them", err)

    def test_agents_in_two_pid_namespaces_have_cgroups_of_their_own(self):
        # Each agent is pid 1 in a PID namespace of its own: by its pid alone, both would name the
        # same cgroup (the second found it taken, or removed the first's while it was empty, and
        # then each one's kill ended the other's workers).
        if not shutil.which("unshare") or subprocess.call(
                ["unshare", "--pid", "--fork", "--mount-proc", "true"]) != 0:
            self.skipTest("no unshare --pid here")
        out = self.outdir()
        ns = ["unshare", "--pid", "--fork", "--mount-proc", AGENT, "--standalone", "--nproc", "1",
              "--", "/bin/sh", "-c"]
        a = start(ns + ['echo started > "$RDZV_TEST_OUT/a"; sleep 3; echo done'],
                  env={"RDZV_TEST_OUT": out})
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(out, "a")) and time.monotonic() < deadline:
            time.sleep(0.02)
        rc_b, _, err_b = finish(start(ns + ["exit 0"]), timeout=30)
        rc_a, out_a, err_a = finish(a, timeout=30)
        self.assertEqual(rc_b, 0, err_b)
        self.assertEqual(rc_a, 0, err_a)
        self.assertNotEqual(self.assert_cgroup_line(err_a), self.assert_cgroup_line(err_b))
        self.assertIn("[rank0]: done\n", out_a, "the first agent's worker ran to its end")

    def test_no_cgroup_says_the_token_scan_is_used(self):
        rc, _, err, pids, _ = self.run_agent("--nproc", "1", "--no-cgroup",
                                             worker=ESCAPE + "exit 0")
        self.assertEqual(rc, 0, err)
        self.assertIn("[info]: workers are tracked by their process groups and the token scan: "
                      "no cgroup (--no-cgroup)", err)
        self.assertNotIn("workers run in cgroup", err)
        # What the cgroup is for: without it, this one escapes (killed by the cleanup).
        self.assertEqual(list(pids), ["0.0"], err)
        self.assertFalse(pid_gone(pids["0.0"]), "an escaped process is found by the cgroup only")


if __name__ == "__main__":
    main()
