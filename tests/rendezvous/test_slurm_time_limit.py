# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent under a local two-node Slurm when Slurm ends the job at its time limit: a job that
reads as cancelled, not failed (test_schedulers.py's scancel case, by Slurm's own clock). Its own
file because it is a minute of waiting for the limit: tests/suite-lock.sh gives it the shared
lock, not the whole machine as test_schedulers.py has."""
import os
import unittest

import test_schedulers as sched
from agenttest import AgentTestCase, main, rdzvtest


class TestSlurmTimeLimit(AgentTestCase):
    cancelled_job = sched.TestSlurm.cancelled_job

    @classmethod
    def setUpClass(cls):
        cls.slurm = None
        if rdzvtest.asan_build():
            return  # the test skips: no Slurm to start
        if os.geteuid() != 0:
            raise unittest.SkipTest("the local Slurm needs root")
        cls.slurm = sched.Slurm()

    @classmethod
    def tearDownClass(cls):
        if cls.slurm is not None:
            cls.slurm.stop()

    def test_time_limit_is_cancelled_not_failed(self):
        """srun -t 1: Slurm ends the job at its time limit (about a minute, and its next check):
        cancelled, "its time limit" (slurmctld's reason TimeLimit), not a failure: a requeue
        script can tell it from a crash and from scancel. The gcc build only (a minute of
        nothing; the path is scancel's)."""
        if rdzvtest.asan_build():
            self.skipTest("a minute of waiting: the gcc build runs it")
        self.cancelled_job(["-t", "1"], lambda job: None, "its time limit")


if __name__ == "__main__":
    main()
