# SPDX-License-Identifier: Apache-2.0
"""A new run with a finished run's line, started at once: torchrun's default line (one node,
--master-port P: node rank 0's agent hosts rdzvd) run twice in a row. The second run must run a
job of its own, from generation 1, to success: never be refused as too late, never join the
finished one. The rdzvd the first run hosted leaves the port as soon as its job is over (it
lingered 5 s before issue 47 item 7, and took the second line as a new run), so the second run
hosts its own; a job that ended is still told to an agent that started before it ended, and a
job-scoped rdzvd still running takes a later line as a new run (tests/unit/test-job-verdicts.c).
An rdzvd that answers the agent's first look and is gone when it connects (one exiting as its run
ends) is hosted again by the agent."""
import os
import re
import socket
import threading
import time

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

    def test_an_endpoint_that_answered_and_left_is_hosted_again(self):
        # What answers the agent's look at the endpoint (as the hosted rdzvd of a run that just
        # ended, in the milliseconds before it exits) is gone when the agent connects: the
        # connection is refused, and the agent hosts rdzvd there itself. Before, it took the
        # endpoint as someone else's and failed after --connect-timeout.
        out = self.outdir()
        port = free_port()
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("127.0.0.1", port))
        lsock.listen(8)

        def answer_once():
            c, _ = lsock.accept()
            lsock.close()
            c.close()

        t = threading.Thread(target=answer_once, daemon=True)
        t.start()
        line = [AGENT, "--nproc-per-node", "1", "--master-port", str(port), "--nccl", "off",
                "--connect-timeout", "20", "--no-python", "/bin/sh", "-c",
                'echo "$RDZV_GENERATION" > "$OUT/ran"']
        t0 = time.monotonic()
        rc, _, err = finish(start(line, env={"TMPDIR": out, "OUT": out}), timeout=60)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertFalse(t.is_alive(), "the agent never looked at the endpoint")
        self.assertEqual(err.count("hosting rdzvd at"), 1, err)
        self.assertLess(time.monotonic() - t0, 15, err)
        with open(os.path.join(out, "ran")) as f:
            self.assertEqual(f.read().split(), ["1"])


if __name__ == "__main__":
    main()
