# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent --progress-timeout: a worker that reported progress on
RDZV_PROGRESS_FD and then went silent is failed as if it had crashed, and the job's root cause
says so; without the option the same hang is never noticed; a worker that never reports is never
failed for it (unless --progress-grace says so)."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import agenttest
from agenttest import AGENT, finish, start

# Every worker reports steps 1..3; local rank 1 then hangs, local rank 0 keeps reporting.
HANG_RANK1 = r'''
for i in 1 2 3; do echo "step $i" >&$RDZV_PROGRESS_FD; sleep 0.05; done
[ "$LOCAL_RANK" = 1 ] && exec sleep 600
i=4; while :; do echo "step $i" >&$RDZV_PROGRESS_FD; i=$((i+1)); sleep 0.1; done
'''


# The same in Python with the rdzv module: local rank 1 hangs in a function of its own.
HANG_PY = r'''
import os, time, rdzv

def stuck_in_all_reduce():
    time.sleep(600)

for step in range(1, 4):
    rdzv.progress(step)
    time.sleep(0.05)
if os.environ["LOCAL_RANK"] == "1":
    stuck_in_all_reduce()
step = 4
while True:
    rdzv.progress(step)
    step += 1
    time.sleep(0.1)
'''
PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def agent(*opts, script=HANG_RANK1):
    return start([AGENT, "--standalone", "--nproc", "2", *opts, "--", "bash", "-c", script])


class TestProgressTimeout(agenttest.AgentTestCase):
    def test_hang_is_failed_with_its_root_cause(self):
        t0 = time.monotonic()
        p = agent("--progress-timeout", "1")
        rc, _, err = finish(p, timeout=60)
        took = time.monotonic() - t0
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"worker rank 1 \(local rank 1\) made no progress for 1\.\d s after "
                              r"step 3, in .*: failing it")
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 1\.\d s after step 3")
        # Not a timed test: only that it ended long before the hung worker would have (600 s).
        self.assertLess(took, 30, err)
        # Where it was stuck: a native worker's threads from gdb (when installed) or /proc, and
        # the innermost frame of its main thread in the root cause.
        source = "gdb" if shutil.which("gdb") else "/proc"
        self.assertRegex(err, r"worker rank 1 \(local rank 1\): its stacks \(%s\):" %
                         re.escape(source))
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 1\.\d s after step 3, in \S*sleep")

    def test_python_hang_names_its_frame(self):
        """python/rdzv registers faulthandler: the worker dumps its own Python stacks on the
        agent's signal, and the root cause names the function and line it was stuck in."""
        d = tempfile.mkdtemp(prefix="rdzv-hang-")
        self.addCleanup(shutil.rmtree, d, True)
        script = os.path.join(d, "hang.py")
        with open(script, "w") as f:
            f.write(HANG_PY)
        p = start([AGENT, "--standalone", "--nproc", "2", "--progress-timeout", "1", "--",
                   "/usr/bin/python3", script], env={"PYTHONPATH": PYTHON_DIR})
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"worker rank 1 \(local rank 1\): its stacks \(faulthandler\):")
        self.assertRegex(err, r"\| +File \"%s\", line \d+ in stuck_in_all_reduce" %
                         re.escape(script))
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 1\.\d s after step 3, in "
                              r"stuck_in_all_reduce \(hang\.py:5\)")

    def test_auto_timeout_follows_the_step_time(self):
        """--progress-timeout auto:FLOOR: after 20 steps each worker's timeout is 10 x its own
        99th-percentile step time, at least FLOOR; it is logged, and a hang is caught by it."""
        script = (r'''
for i in $(seq 1 30); do echo "step $i" >&$RDZV_PROGRESS_FD; sleep 0.05; done
[ "$LOCAL_RANK" = 1 ] && exec sleep 600
i=31; while :; do echo "step $i" >&$RDZV_PROGRESS_FD; i=$((i+1)); sleep 0.05; done
''')
        p = agent("--progress-timeout", "auto:1", script=script)
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        m = re.search(r"worker rank 1 \(local rank 1\): progress timeout (\d+\.\d) s \(10 x the "
                      r"99th percentile of its last (\d+) step times, (\d+\.\d+) s; at least "
                      r"1\.0 s\)", err)
        self.assertIsNotNone(m, err)
        self.assertGreaterEqual(int(m.group(2)), 20)
        self.assertAlmostEqual(float(m.group(1)), max(1.0, 10 * float(m.group(3))), delta=0.11)
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for \d+\.\d s after step 30")

    def test_an_announced_slow_step_is_not_a_hang(self):
        """"slow N" (python: rdzv.slow(N)) before a long step (an evaluation, a checkpoint): the
        step may take up to N s without being failed, under a fixed timeout as under auto."""
        script = (r'''
for i in $(seq 1 25); do echo "step $i" >&$RDZV_PROGRESS_FD; sleep 0.05; done
echo "slow 4" >&$RDZV_PROGRESS_FD; sleep 2.5
for i in $(seq 26 30); do echo "step $i" >&$RDZV_PROGRESS_FD; sleep 0.05; done
''')
        for timeout in ("1", "auto:1"):
            p = agent("--progress-timeout", timeout, script=script)
            rc, _, err = finish(p, timeout=60)
            self.assertEqual(rc, 0, err)
            self.assertNotRegex(err, r"made no progress")

    def test_a_said_error_is_the_root_cause(self):
        """A worker that says its error on the progress channel ("error TEXT", as rdzv-agent's
        Python hooks do for an uncaught exception) before it exits: the root cause names that,
        not the last line of its stderr."""
        script = ('echo "error ValueError: bad batch (train.py:7)" >&$RDZV_PROGRESS_FD; '
                  '[ "$LOCAL_RANK" = 1 ] && { echo "teardown noise" >&2; exit 1; }; sleep 30')
        p = agent("--grace", "1", script=script)
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"exited with code 1: ValueError: bad batch \(train\.py:7\) at ")

    def test_a_stopped_worker_is_named_so(self):
        script = HANG_RANK1.replace("exec sleep 600", "kill -STOP $$")
        p = agent("--progress-timeout", "1", script=script)
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 1\.\d s after step 3, stopped \(SIGSTOP\)")

    def test_without_the_option_the_hang_is_not_noticed(self):
        p = agent()
        try:
            p.wait(timeout=4)
            self.fail("the agent ended although nothing watched progress:\n" +
                      p.stderr.read().decode(errors="replace"))
        except subprocess.TimeoutExpired:
            pass  # still stuck, as torchrun would be
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p, timeout=60)
        self.assertNotRegex(err, r"made no progress")

    def test_a_worker_that_never_reports_is_not_failed(self):
        p = agent("--progress-timeout", "0.5", script="sleep 2")
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 0, err)
        self.assertNotRegex(err, r"made no (first )?progress")

    def test_grace_bounds_the_first_report(self):
        p = agent("--progress-timeout", "0.5", "--progress-grace", "1", script="exec sleep 600")
        rc, _, err = finish(p, timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertRegex(err, r"root cause: worker rank \d \(local rank \d\) on node rank 0 "
                              r"\(\S+\) "
                              r"made no first progress report within 1\.\d s of its start")


if __name__ == "__main__":
    agenttest.main()
