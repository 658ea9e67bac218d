# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent --progress-timeout (issue 14, part 1): a worker that reported progress on
RDZV_PROGRESS_FD and then went silent is failed as if it had crashed, and the job's root cause
says so; without the option the same hang is never noticed; a worker that never reports is never
failed for it (unless --progress-grace says so)."""
import re
import signal
import subprocess
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
                              r"step 3: failing it")
        self.assertRegex(err, r"root cause: worker rank 1 \(local rank 1\) on node rank 0 \(\S+\) "
                              r"made no progress for 1\.\d s after step 3")
        # Not a timed test: only that it ended long before the hung worker would have (600 s).
        self.assertLess(took, 30, err)

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
        self.assertRegex(err, r"root cause: worker rank \d \(local rank \d\) on node rank 0 \(\S+\) "
                              r"made no first progress report within 1\.\d s of its start")


if __name__ == "__main__":
    agenttest.main()
