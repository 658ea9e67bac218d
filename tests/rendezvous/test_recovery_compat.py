#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_recovery_compat.py: --recovery (protocol 1.1, proto/RENDEZVOUS.md "Versions") between
# peers of different revisions and agents that disagree. An agent of 1.0 is played by raw frames
# (a JOIN without "recovery", as the 1.0 codec wrote it); an rdzvd of 1.0 by a socket that answers
# HELLO and JOINED as 1.0 did (no "recovery"): no build of an older rdzv is at hand in CI.
import json
import socket
import struct
import threading

import agenttest
from agenttest import AgentTestCase, agent_cmd, finish, start
from authtest import ERROR, HELLO, JOIN, JOINED, Peer

JOIN_10 = {"run_id": "compat", "node_id": "old", "host": "old", "nproc": 1, "node_rank": -1,
           "min": 2, "max": 2, "last_call_ms": 100, "max_restarts": 0, "nccl": "off",
           "nccl_ids": 1, "rank_hint": False, "heartbeat_timeout_ms": 60000,
           "join_timeout_ms": 600000, "scale_up_now": False}


def peer_join(testcase, d, body):
    p = Peer(d.port)
    testcase.addCleanup(p.close)
    p.hello()
    p.send(JOIN, body)
    return p, p.recv_json()


class Compat(AgentTestCase):
    def test_new_daemon_echoes_the_job_recovery(self):
        d = self.daemon()
        _, (op, body) = peer_join(self, d, JOIN_10)
        self.assertEqual(op, JOINED, body)
        self.assertEqual(body["recovery"], "restart", "a 1.0 JOIN is a restart job")
        _, (op, body) = peer_join(self, d, dict(JOIN_10, run_id="c2", recovery="inplace"))
        self.assertEqual(op, JOINED, body)
        self.assertEqual(body["recovery"], "inplace")

    def test_old_agent_refused_by_an_inplace_job(self):
        d = self.daemon()
        _, (op, body) = peer_join(self, d, dict(JOIN_10, node_id="new", recovery="inplace"))
        self.assertEqual(op, JOINED, body)
        p, (op, body) = peer_join(self, d, JOIN_10)
        self.assertEqual(op, ERROR, body)
        self.assertIn("--recovery inplace", body["error"])
        self.assertIn("older than recovery in place", body["error"])
        self.assertTrue(p.closed_within())

    def test_bad_recovery_value_closes_the_connection(self):
        d = self.daemon()
        p, (op, body) = peer_join(self, d, dict(JOIN_10, recovery="sometimes"))
        self.assertEqual(op, ERROR, body)
        self.assertIn("recovery", body["error"])
        d.wait_log(r"recovery")

    def test_agents_that_disagree(self):
        d = self.daemon()
        ep = "127.0.0.1:%d" % d.port
        a = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "mixed", "--recovery", "inplace",
                            worker=["/bin/true"]))
        d.wait_log(r"job=mixed .*created .*recovery inplace")
        b = start(agent_cmd(ep, "--nnodes", "2", "--rdzv-id", "mixed", worker=["/bin/true"]))
        rc, _, err = finish(b, timeout=30)
        self.assertNotEqual(rc, 0)
        self.assertIn("--recovery inplace", err)
        self.assertIn("start every agent with the same --recovery", err)
        a.kill()
        finish(a, timeout=30)

    def test_inplace_agent_refuses_an_old_daemon(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)
        seen = {}

        def old_rdzvd():
            c, _ = srv.accept()
            with c:
                def frame(op, obj):
                    b = json.dumps(obj).encode()
                    c.sendall(struct.pack("<BBHI", op, 1, 0, len(b)) + b)

                buf = b""
                while len(seen) < 2:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                    while len(buf) >= 8:
                        op, _, _, n = struct.unpack("<BBHI", buf[:8])
                        if len(buf) < 8 + n:
                            break
                        body, buf = json.loads(buf[8:8 + n]), buf[8 + n:]
                        seen[op] = body
                        if op == HELLO:
                            frame(HELLO, {"magic": "rdzv", "version": 1, "peer": "rdzvd 0.0.9"})
                        elif op == JOIN:
                            frame(JOINED, {"run_id": body["run_id"], "waiting": 1,
                                           "spare": False, "resumed": False, "generation": 0})
                c.recv(1)  # until the agent closes

        t = threading.Thread(target=old_rdzvd, daemon=True)
        t.start()
        ep = "127.0.0.1:%d" % srv.getsockname()[1]
        a = start(agent_cmd(ep, "--rdzv-id", "old", "--recovery", "inplace", "--connect-timeout",
                            "5", worker=["/bin/true"]))
        rc, _, err = finish(a, timeout=30)
        self.assertEqual(rc, 1, err)
        self.assertEqual(seen[JOIN]["recovery"], "inplace")
        self.assertIn("cannot recover in place", err)
        self.assertIn("--recovery restart", err)


if __name__ == "__main__":
    agenttest.main()
