# SPDX-License-Identifier: Apache-2.0
"""rdzvd --state-dir SIGKILLed and restarted while a spare waits. The spare
reconnects first (its members are SIGSTOPped); the new daemon must not create the job anew from
the spare's plain JOIN: the members' resume finds their generation, no worker restarts, and the
store of the generation keeps counting where it was (counters 1 and 2, two worker starts)."""
import os
import signal
import tempfile

from faulttest import BUILD, FaultTestCase, kill_quietly, main
from rdzvtest import wait_until

RDZVCTL = os.environ.get("RDZVCTL", os.path.join(BUILD, "daemon", "rdzvctl"))
SLEEP = 12  # how long each worker runs after counting its start


class TestDaemonRestartWithSpare(FaultTestCase):
    def starts(self):
        try:
            with open(os.path.join(self.dir, "starts")) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def test_spare_reconnecting_first_does_not_restart_the_job(self):
        state = tempfile.TemporaryDirectory(prefix="rdzvtest-state-")
        self.addCleanup(state.cleanup)
        sdir = os.path.join(state.name, "state")
        d1 = self.start_daemon("--state-dir", sdir)
        port = d1.port
        worker = ["sh", "-c",
                  f'"{RDZVCTL}" -e "$MASTER_ADDR:$MASTER_PORT" add starts 1 >> "$FAULT_DIR/starts"'
                  f' && echo "gen=$RDZV_GENERATION restart=$TORCHELASTIC_RESTART_COUNT"'
                  f' >> "$FAULT_DIR/gens" && sleep {SLEEP}']
        args = ("--nnodes", "2", "--nproc", "1", "--max-restarts", "0")
        members = [self.agent("dspare", *args, worker=worker) for _ in range(2)]
        wait_until(lambda: len(self.starts()) >= 2,
                   lambda: "2 workers did not start:\n" + d1.log(), timeout=30)
        spare = self.agent("dspare", *args, worker=worker)
        d1.wait_log(r"job=dspare gen=1 node=.* joined .*waits for the next generation", timeout=15)
        for p in members:
            os.kill(p.pid, signal.SIGSTOP)
        for p in members:
            self.addCleanup(kill_quietly, p.pid, signal.SIGCONT)
        d1.kill()
        d2 = self.start_daemon("--port", str(port), "--state-dir", sdir)
        d2.wait_log(r"job=dspare gen=\d+ node=\S+ joined \(", timeout=15)  # the spare, first
        for p in members:
            os.kill(p.pid, signal.SIGCONT)
        self.finish_all(members + [spare], 0, timeout=SLEEP + 30)
        with open(os.path.join(self.dir, "gens")) as f:
            gens = f.read().split("\n")
        self.assertEqual(sorted(self.starts()), ["1", "2"],
                         f"worker starts {gens}; rdzvd log:\n{d2.log()}")
        self.assertIsNone(d2.find_log(r"restarting generation|told to stop"), d2.log())
        d2.wait_log(r"job=dspare gen=1 generation 1 rebuilt; its workers never stopped")
        d2.wait_log(r"job=dspare gen=1 generation 1 succeeded")


if __name__ == "__main__":
    main()
