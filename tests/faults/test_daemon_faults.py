# SPDX-License-Identifier: Apache-2.0
"""rdzvd SIGKILLed mid-run and started again on the same port: the agents keep their workers,
reconnect, and the new daemon rebuilds the job from them (same generation, same store port); no
worker is restarted and the job completes."""
import json
import signal
import socket
import threading
import time

from faulttest import HB, FaultTestCase, main, rdzvtest
from authtest import JOIN, Peer  # noqa: E402 (on the path faulttest sets up)

HEARTBEAT, EVENT, LEAVE, ROUND = 0xA7, 0xA9, 0xAA, 0xA4


class TestDaemonLoss(FaultTestCase):
    def test_daemon_sigkilled_and_restarted_on_the_same_port(self):
        d1 = self.start_daemon()
        port = d1.port
        ps = [self.agent("dkill", "--nnodes", "2", "--nproc", "2", "--max-restarts", "1")
              for _ in range(2)]
        gen1 = self.wait_starts(1, 4, agents=ps)
        store = int(self.env_of(1, 0)["MASTER_PORT"])
        t0 = time.monotonic()
        d1.kill()
        time.sleep(0.3)  # the agents see the connection drop and start reconnecting
        d2 = self.start_daemon("--port", str(port))
        self.assertEqual(d2.port, port)
        d2.wait_log(r"job=dkill gen=\d+ rebuilding generation 1 \(2 nodes\) "
                    r"from reconnecting agents",
                    timeout=15)
        d2.wait_log(r"job=dkill gen=\d+ generation 1 rebuilt; its workers never stopped",
                    timeout=15)
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

    def test_restarted_daemon_finds_the_store_port_taken(self):
        """The restarted rdzvd cannot have the generation's store port back (another process
        listens there): it says so, opens the store on another port from within the agent's
        JOIN (no nested loop run), and goes on serving; the workers are not restarted."""
        d1 = self.start_daemon()
        port = d1.port
        ps = [self.agent("dtaken", "--nnodes", "2", "--nproc", "1", "--max-restarts", "1")
              for _ in range(2)]
        gen1 = self.wait_starts(1, 2, agents=ps)
        store = int(self.env_of(1, 0)["MASTER_PORT"])
        d1.kill()
        squatter = socket.socket()
        self.addCleanup(squatter.close)
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", store))
        squatter.listen(1)
        d2 = self.start_daemon("--port", str(port))
        d2.wait_log(r"cannot reopen the store of generation 1 on port %d" % store, timeout=15)
        d2.wait_log(r"job=dtaken gen=\d+ generation 1 rebuilt; its workers never stopped",
                    timeout=15)
        with rdzvtest.Client(d2.port) as c:
            c.ping()
        self.release()
        self.finish_all(ps, 0)
        self.assertEqual({e.pid for e in self.events("start")}, {e.pid for e in gen1})
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
        time.sleep(HB * 2.5)  # the behaviour: silent past the agents' heartbeat timeout
        mark = d.mark()
        d.proc.send_signal(signal.SIGCONT)
        time.sleep(2.0)  # the window in which a wrong restart would begin
        self.release()
        self.finish_all(ps, 0)
        starts = self.events("start")
        self.assertEqual({e.pid for e in starts}, {e.pid for e in gen1},
                         "no worker restarted; rdzvd log:\n" + d.log()[mark:])
        d.wait_log(r"job=dstop gen=\d+ generation 1 succeeded")

    def test_daemon_sigstopped_past_the_heartbeat_timeout_with_a_spare(self):
        """As above with a third agent waiting as a spare: every agent, the spare too, gives up
        on the silent daemon and reconnects (maybe more than once) while it is stopped. Once it
        runs again, the closes of their old connections are not node losses: no restart, no
        job re-created at generation 0, no 'node id has already joined' refusal, and the job
        finishes with the spare told so."""
        d = self.start_daemon()
        ps = [self.agent("dstops", "--nnodes", "2", "--nproc", "1", "--max-restarts", "1",
                         "--heartbeat-timeout", str(HB)) for _ in range(3)]
        gen1 = self.wait_starts(1, 2, agents=ps)
        d.wait_log(r"job=dstops gen=1 node=\S+ joined .*waits for the next generation")
        d.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(d.proc.send_signal, signal.SIGCONT)
        time.sleep(HB * 2.5)  # the behaviour: silent past the agents' heartbeat timeout
        mark = d.mark()
        d.proc.send_signal(signal.SIGCONT)
        time.sleep(HB + 1.0)  # the window in which a wrong restart or refusal would be logged
        log = d.log()[mark:]
        self.assertIsNone(d.find_log(r"restarting generation"), "rdzvd log:\n" + log)
        self.assertNotIn("has already joined", log)
        self.release()
        self.finish_all(ps, 0)
        self.assertEqual({e.pid for e in self.events("start")}, {e.pid for e in gen1},
                         "no worker restarted; rdzvd log:\n" + log)
        d.wait_log(r"job=dstops gen=1 generation 1 succeeded")

    def test_heartbeats_queued_during_a_daemon_stall_keep_the_member(self):
        """rdzvd stopped a little past the heartbeat timeout while a member goes on sending
        heartbeats (they wait in the socket): on SIGCONT its timers are due before it has read
        them, and the member must not be dropped for silence. A raw peer plays the agent, so no
        agent-side silence detection reconnects and hides the daemon's decision."""
        d = self.start_daemon()
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(JOIN, {"run_id": "stall", "node_id": "raw-1", "host": "raw", "nproc": 1,
                      "node_rank": -1, "rank_hint": False, "min": 1, "max": 1,
                      "last_call_ms": 0, "max_restarts": 0, "nccl": "off", "nccl_ids": 1,
                      "heartbeat_timeout_ms": 1000, "join_timeout_ms": 60000,
                      "scale_up_now": False})
        frames = []
        while not any(op == ROUND for op, _ in frames):
            f = p.recv_json()
            self.assertIsNotNone(f, "rdzvd closed the connection before the ROUND")
            frames.append(f)
        gen = next(b for op, b in frames if op == ROUND)["generation"]
        stop = threading.Event()

        def beat():  # every 200 ms, as an agent with --heartbeat-timeout 1 does
            while not stop.is_set():
                p.send(HEARTBEAT, {"generation": gen})
                stop.wait(0.2)

        t = threading.Thread(target=beat)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(stop.set)
        time.sleep(0.5)  # past the ROUND's longer grace: the 1 s deadline is in force
        mark = d.mark()
        d.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(d.proc.send_signal, signal.SIGCONT)
        time.sleep(1.6)  # the behaviour: rdzvd stopped past the 1 s heartbeat deadline
        d.proc.send_signal(signal.SIGCONT)
        time.sleep(1.0)  # the window in which it would wrongly declare the node lost
        stop.set()
        t.join()
        self.assertIsNone(d.find_log(r"sent no heartbeat|lost", since=mark),
                          "a member whose heartbeats waited in its socket was dropped:\n" +
                          d.log()[mark:])
        p.send(LEAVE, {"generation": gen, "status": "succeeded"})
        deadline = time.monotonic() + 5
        while True:
            op, body = p.recv_json(timeout=max(0.1, deadline - time.monotonic()))
            if op != HEARTBEAT:
                break
        self.assertEqual((op, body.get("type")), (EVENT, "succeeded"), json.dumps(body))


if __name__ == "__main__":
    main()
