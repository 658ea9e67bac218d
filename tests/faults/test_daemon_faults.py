# SPDX-License-Identifier: Apache-2.0
"""rdzvd SIGKILLed mid-run and started again on the same port: the agents keep their workers,
reconnect, and the new daemon rebuilds the job from them (same generation, same store port); no
worker is restarted and the job completes."""
import signal
import time

from faulttest import HB, FaultTestCase, free_port, main, rdzvtest


class TestDaemonLoss(FaultTestCase):
    def test_daemon_sigkilled_and_restarted_on_the_same_port(self):
        port = free_port()
        d1 = self.start_daemon("--port", str(port))
        self.assertEqual(d1.port, port)
        ps = [self.agent("dkill", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1")
              for _ in range(2)]
        gen1 = self.wait_starts(1, 4, agents=ps)
        store = int(self.env_of(1, 0)["MASTER_PORT"])
        t0 = time.monotonic()
        d1.kill()
        time.sleep(0.3)  # the agents see the connection drop and start reconnecting
        d2 = self.start_daemon("--port", str(port))
        d2.wait_log(r"job=dkill gen=\d+ rebuilding generation 1 \(2 nodes\) from reconnecting agents",
                    timeout=15)
        d2.wait_log(r"job=dkill gen=\d+ generation 1 rebuilt; its workers never stopped", timeout=15)
        self.assertLess(time.monotonic() - t0, 10.0, "daemon restart -> job rebuilt")
        self.assertIsNone(d2.find_log(r"cannot reopen the store"), d2.log())
        # The generation's store is back on the port its workers know.
        with rdzvtest.Client(store) as c:
            c.ping()
        self.release()
        self.finish_all(ps, 0)
        starts = self.events("start")
        self.assertEqual(sorted((e.gen, e.rank) for e in starts), [(1, r) for r in range(4)],
                         "each rank's worker ran exactly once")
        self.assertEqual({e.pid for e in starts}, {e.pid for e in gen1})
        self.assertEqual(self.events("crash"), [])
        d2.wait_log(r"job=dkill gen=\d+ generation 1 succeeded")
        self.assertIsNone(d2.find_log(r"restarting generation"), d2.log())

    def test_daemon_sigstopped_past_the_heartbeat_timeout(self):
        """A daemon that stops answering (SIGSTOP) for longer than the heartbeat timeout: the
        agents notice the silence and reconnect; once it runs again the job goes on and no
        worker is restarted."""
        d = self.start_daemon()
        ps = [self.agent("dstop", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1",
                         "--heartbeat-timeout", str(HB)) for _ in range(2)]
        gen1 = self.wait_starts(1, 4, agents=ps)
        d.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(d.proc.send_signal, signal.SIGCONT)
        time.sleep(HB * 2.5)
        mark = d.mark()
        d.proc.send_signal(signal.SIGCONT)
        time.sleep(2.0)
        self.release()
        self.finish_all(ps, 0)
        starts = self.events("start")
        self.assertEqual({e.pid for e in starts}, {e.pid for e in gen1},
                         "no worker restarted; rdzvd log:\n" + d.log()[mark:])
        d.wait_log(r"job=dstop gen=\d+ generation 1 succeeded")


if __name__ == "__main__":
    main()
