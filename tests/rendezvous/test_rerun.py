# SPDX-License-Identifier: Apache-2.0
"""A new run with a finished run's line, started at once: torchrun's default line (one node,
--master-port P: node rank 0's agent hosts rdzvd) run twice in a row. The second run must run a
job of its own, from generation 1, to success: never be refused as too late, never join the
finished one. The rdzvd the first run hosted leaves the port as soon as its job is over (it
lingered 5 s before issue 47 item 7, and took the second line as a new run), so the second run
hosts its own; a job that ended is still told to an agent that started before it ended, and a
job-scoped rdzvd still running takes a later line as a new run (tests/unit/test-job-verdicts.c)."""
import os
import re
import socket

from agenttest import AGENT, AgentTestCase, finish, main, start


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestRerun(AgentTestCase):
    def test_the_same_line_at_once_runs_a_fresh_job(self):
        out = self.outdir()
        port = free_port()
        env = {"TMPDIR": out}  # the hosted rdzvd's log: $TMPDIR/rdzvd-host-PORT.log
        rdzvd_log = os.path.join(out, f"rdzvd-host-{port}.log")
        line = [AGENT, "--nproc-per-node", "1", "--master-port", str(port), "--nccl", "off",
                "--no-python", "/bin/sh", "-c",
                'echo "$TORCHELASTIC_RUN_ID $RDZV_GENERATION $MASTER_PORT" >> "$OUT/runs"']
        for run in (1, 2):
            rc, _, err = finish(start(line, env={**env, "OUT": out}), timeout=60)
            self.assertEqual(rc, 0, f"run {run}:\n{err[-3000:]}")
            self.assertNotIn("has ended", err)
            self.assertIn("hosting rdzvd", err)
        with open(os.path.join(out, "runs")) as f:
            runs = f.read().split("\n")[:-1]
        self.assertEqual(len(runs), 2, runs)
        self.assertEqual([r.split()[1] for r in runs], ["1", "1"],
                         "each run is a job of its own, from generation 1")
        with open(rdzvd_log) as f:
            log = f.read()
        self.assertEqual(len(re.findall(r"every job ended and no agent is connected: the job is "
                                        r"over, exiting", log)), 2, log)


if __name__ == "__main__":
    main()
