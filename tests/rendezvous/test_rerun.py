# SPDX-License-Identifier: Apache-2.0
"""A new run with a finished run's line, started at once: torchrun's default line (one node,
--master-port P: node rank 0's agent hosts rdzvd) run twice in a row. The second run must run a
job of its own, from generation 1, to success: never be refused as too late, never join the
finished one. The rdzvd the first run hosted leaves the port as soon as its job is over, so the
second run hosts its own; a job that ended is still told to an agent that started before it
ended, and a
job-scoped rdzvd still running takes a later line as a new run (tests/unit/test-job-verdicts.c).
An rdzvd that answers the agent's first look and is gone when it connects (one exiting as its run
ends) is hosted again by the agent."""
import json
import os
import re
import socket
import subprocess
import threading
import time

from agenttest import AGENT, AgentTestCase, finish, main, start
from rdzvtest import RDZVCTL, fixed_port


def free_port():
    return fixed_port()


class TestRerun(AgentTestCase):
    def test_the_same_line_at_once_runs_a_fresh_job(self):
        out = self.outdir()
        port = free_port()
        env = {"TMPDIR": out}
        rdzvd_log = os.path.join(out, f"rdzvd-host-{port}.log")  # --log-dir keeps it there
        line = [AGENT, "--nproc-per-node", "1", "--master-port", str(port), "--nccl", "off",
                "--log-dir", out, "--no-python", "/bin/sh", "-c",
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

    def test_a_hosted_run_leaves_nothing_in_tmpdir(self):
        # Without --log-dir, the hosted rdzvd's log lives in a directory made for it, which it
        # deletes when it ends normally; --tee's copies go with the agent's own directory.
        out = self.outdir()
        tmp = os.path.join(out, "tmp")
        os.mkdir(tmp)
        line = [AGENT, "--nproc-per-node", "1", "--master-port", str(free_port()), "--nccl",
                "off", "--tee", "3", "--no-python", "/bin/sh", "-c", "echo ran"]
        rc, _, err = finish(start(line, env={"TMPDIR": tmp}), timeout=60)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertIn("hosting rdzvd", err)
        # rdzvd exits once its last agent is gone: a moment after this one.
        deadline = time.monotonic() + 15
        while os.listdir(tmp) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(os.listdir(tmp), [], err[-2000:])

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


class TestRerunOnALongRunningRdzvd(AgentTestCase):
    """A job ends on an rdzvd that serves many runs (started by hand, as under
    systemd). The same line started again after the end is a new run, with a job of its own
    from generation 1, as on the rdzvd an agent hosts: with --rdzv-id dup, and with no id (the
    default id "none" of a torchrun-style line). Before, it was refused for --keep-ended (an
    hour): "job 'dup' has ended ... start a new run with a new --rdzv-id". An agent started
    before the end is still told it (rendezvous-bad-node: EndedJob)."""

    def run_twice(self, d, idargs):
        out = self.outdir()
        code = os.path.join(out, "code")
        line = [AGENT, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{d.port}",
                *idargs, "--nnodes", "1", "--nproc-per-node", "1", "--max-restarts", "0",
                "--nccl", "off", "--no-python", "/bin/sh", "-c",
                'echo "$TORCHELASTIC_RUN_ID $RDZV_GENERATION $TORCHELASTIC_RESTART_COUNT" '
                '>> "$OUT/runs"; exit "$(cat "$OUT/code")"']
        errs = []
        for run, rc in ((1, 1), (2, 0)):  # a bug, then the line again once it is fixed
            with open(code, "w") as f:
                f.write(f"{rc}\n")
            got, _, err = finish(start(line, env={"OUT": out}), timeout=60)
            self.assertEqual(got, rc, f"run {run}:\n{err[-3000:]}\nrdzvd:\n{d.log()[-3000:]}")
            self.assertNotIn("has ended", err)
            self.assertNotIn("hosting rdzvd", err)
            errs.append(err)
        with open(os.path.join(out, "runs")) as f:
            runs = [r.split() for r in f.read().splitlines()]
        run_id = idargs[1] if idargs else "none"
        self.assertEqual(runs, [[run_id, "1", "0"]] * 2, "each run is a job of its own")
        self.assertIn(f"job {run_id} failed (exit code 1)", errs[0])
        d.wait_log(rf"job '{run_id}' failed [\d.]+ s before this agent started: a new run")
        return run_id

    def test_the_same_line_after_the_end_runs_a_new_job(self):
        d = self.daemon()
        self.run_twice(d, ["--rdzv-id", "dup"])
        self.run_twice(d, [])  # torchrun's line without an id: the id "none"

    def test_a_new_run_has_its_own_record(self):
        """With --state-dir: the new run is recorded as a job of its own, and its end replaces
        the first run's in the job table, which a restarted rdzvd reads."""
        state = self.outdir()
        d = self.daemon("--state-dir", state)
        self.run_twice(d, ["--rdzv-id", "dup"])
        outcomes = [j["outcome"]["type"] for j in job_statuses(d.port, "dup")]
        self.assertEqual(sorted(outcomes), ["failed", "succeeded"], outcomes)
        port = d.port
        d.stop()
        d = self.daemon("--state-dir", state, "--port", str(port))
        outcomes = [j["outcome"]["type"] for j in job_statuses(d.port, "dup")]
        self.assertEqual(outcomes, ["succeeded"], "the newest run's end")


def job_statuses(port, run_id):
    """Every job of run_id in rdzvctl status --json, live and ended."""
    p = subprocess.run([RDZVCTL, "-e", f"127.0.0.1:{port}", "status", "--json"],
                       capture_output=True, text=True, timeout=10)
    if p.returncode != 0:
        raise AssertionError(f"rdzvctl status --json failed ({p.returncode}): {p.stderr}")
    return [j for j in json.loads(p.stdout)["jobs"] if j["run_id"] == run_id]

if __name__ == "__main__":
    main()
