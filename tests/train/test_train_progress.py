# SPDX-License-Identifier: Apache-2.0
"""rdzv-train's progress reports: with RDZV_PROGRESS_FD set it writes "step N
compute_ms M\\n" (M the step's time not blocked in its collectives) once per step, in
order, each in one write; without it, or with a bad value, training is unchanged."""
import os
import subprocess
import time
import unittest

import test_train as tt


class ProgressTest(unittest.TestCase):
    def run_train(self, steps, env_extra, pass_fds=()):
        p = subprocess.Popen([tt.TRAIN] + tt.SMALL + ["--steps", str(steps)],
                             env=tt.clean_env(env_extra), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             pass_fds=pass_fds)
        return tt.finish(p)

    def test_reports_every_step(self):
        rfd, wfd = os.pipe()
        try:
            os.set_inheritable(wfd, True)
            rc, out, err = self.run_train(7, {"RDZV_PROGRESS_FD": str(wfd)}, (wfd,))
            os.close(wfd)
            wfd = -1
            got = b""
            while True:
                b = os.read(rfd, 4096)
                if not b:
                    break
                got += b
        finally:
            os.close(rfd)
            if wfd >= 0:
                os.close(wfd)
        self.assertEqual(rc, 0, err)
        # Each step with its compute time: its wall time less its collectives'.
        lines = got.decode().splitlines()
        self.assertEqual([ln.split(" compute_ms ")[0] for ln in lines],
                         ["step %d" % i for i in range(1, 8)])
        for ln in lines:
            self.assertRegex(ln, r"^step \d+ compute_ms (0|[1-9]\d{0,6})$")
            self.assertLessEqual(int(ln.split()[-1]), 3600000)
        done = [e for e in tt.events(out) if e.get("event") == "done"]
        self.assertEqual(done[0]["steps"], 7)

    def test_bad_fd_is_ignored(self):
        rc, out, err = self.run_train(3, {"RDZV_PROGRESS_FD": "77"})
        self.assertEqual(rc, 0, err)
        self.assertIn("ignoring RDZV_PROGRESS_FD='77'", err)
        self.assertEqual([e for e in tt.events(out) if e.get("event") == "done"][0]["steps"], 3)

    def test_closed_reader_does_not_kill_training(self):
        rfd, wfd = os.pipe()
        os.close(rfd)  # the agent is gone: EPIPE, not SIGPIPE
        try:
            os.set_inheritable(wfd, True)
            rc, out, err = self.run_train(3, {"RDZV_PROGRESS_FD": str(wfd)}, (wfd,))
        finally:
            os.close(wfd)
        self.assertEqual(rc, 0, err)
        self.assertIn("no more reports", err)

    def test_step_lines_carry_wall_clock_time(self):
        t0 = time.time()
        p = subprocess.Popen([tt.TRAIN] + tt.SMALL + ["--steps", "5", "--log-every", "1"],
                             env=tt.clean_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rc, out, err = tt.finish(p)
        t1 = time.time()
        self.assertEqual(rc, 0, err)
        ts = [e["t"] for e in tt.events(out) if "event" not in e]
        self.assertEqual(len(ts), 5, out)
        self.assertEqual(ts, sorted(ts))
        self.assertTrue(t0 <= ts[0] and ts[-1] <= t1, (t0, ts, t1))


if __name__ == "__main__":
    unittest.main()
