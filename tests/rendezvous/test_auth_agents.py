# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent with rdzvd --token-file: a job with the right token runs; a wrong or missing token
is refused at once with a clear message (no reconnect loop); jobs under different daemons and
tokens can't reach each other; the generation stores take TCPStore clients only from
--allow-store-from."""
import os
import time

from agenttest import AGENT, ENV_WORKER, AgentTestCase, agent_cmd, finish, main, read_envs, start
from authtest import AUTH, ERROR, JOIN, Peer, mac, read_token, token_file
from rdzvtest import Client

# Writes the generation store's port, then waits for the test to say go.
PORT_WORKER = ["/bin/sh", "-c", 'echo "$MASTER_PORT" > "$RDZV_TEST_OUT/port.tmp" && '
               'mv "$RDZV_TEST_OUT/port.tmp" "$RDZV_TEST_OUT/port"; i=0; '
               'while [ ! -e "$RDZV_TEST_OUT/go" ] && [ $i -lt 600 ]; do sleep 0.05; '
               'i=$((i+1)); done']


class TestAgentAuth(AgentTestCase):
    def setUp(self):
        self.tok = token_file(self)
        self.d = self.daemon("--token-file", self.tok)
        self.ep = f"127.0.0.1:{self.d.port}"

    def test_right_token_job_completes(self):
        out = self.outdir()
        ps = [start(agent_cmd(self.ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "tok-1",
                              "--token-file", self.tok, worker=ENV_WORKER),
                    env={"RDZV_TEST_OUT": out}),
              start(agent_cmd(self.ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "tok-1",
                              worker=ENV_WORKER),
                    env={"RDZV_TEST_OUT": out, "RDZV_TOKEN_FILE": self.tok})]
        for p in ps:
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        self.assert_contract(read_envs(out), 2, 2, "tok-1", self.ep)
        self.d.wait_log(r"job=tok-1 gen=\d+ generation 1 succeeded")

    def refused(self, args, env, message, log_re):
        mark = self.d.mark()
        t0 = time.monotonic()
        p = start(agent_cmd(self.ep, "--rdzv-id", "victim", "--connect-timeout", "30", *args,
                            worker=["/bin/true"]), env=env)
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, 1, err)
        # At once: no reconnect loop until --connect-timeout.
        self.assertLess(time.monotonic() - t0, 5, err)
        self.assertIn(message, err)
        self.assertNotIn("reconnecting", err)
        self.d.wait_log(log_re, since=mark, levels=("warn",))
        self.assertIsNone(self.d.find_log(r"job victim", since=mark))

    def test_wrong_token_is_refused_at_once(self):
        wrong = token_file(self)
        self.refused(["--token-file", wrong], {},
                     "rdzv-agent: job victim failed (exit code 1): authentication failed: rdzvd "
                     "refused the token (check --token-file)",
                     r"authentication failed: wrong token")

    def test_missing_token_is_refused_at_once(self):
        self.refused([], {}, "rdzvd requires a token: pass --token-file",
                     r"authentication failed: JOIN before AUTH")

    def test_unreadable_token_file_is_a_usage_error(self):
        loose = token_file(self, mode=0o640)
        p = start(agent_cmd(self.ep, "--rdzv-id", "x", "--token-file", loose,
                            worker=["/bin/true"]))
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, 2)
        self.assertIn("accessible by group or others", err)

    def test_token_against_a_tokenless_daemon_is_refused(self):
        d = self.daemon()
        p = start(agent_cmd(f"127.0.0.1:{d.port}", "--rdzv-id", "x", "--token-file", self.tok,
                            worker=["/bin/true"]))
        rc, _, err = finish(p, timeout=20)
        self.assertEqual(rc, 1)
        self.assertIn("does not ask for a token", err)

    def test_standalone_ignores_the_token(self):
        out = self.outdir()
        p = start([AGENT, "--standalone", "--nproc", "1", "--rdzv-id", "solo", "--", *ENV_WORKER],
                  env={"RDZV_TEST_OUT": out, "RDZV_TOKEN_FILE": self.tok})
        rc, _, err = finish(p)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(sorted(read_envs(out)), [0])


class TestIsolation(AgentTestCase):
    """Jobs that must not see each other run under their own rdzvd and token (the sbatch and PBS
    templates make one per job). An agent holding job A's token can't join job B's daemon, even
    naming B's run id; and on one daemon, every message after JOIN acts on the sender's own job."""

    def test_token_of_one_job_does_not_open_another(self):
        tok_a, tok_b = token_file(self), token_file(self)
        da = self.daemon("--token-file", tok_a)
        db = self.daemon("--token-file", tok_b)
        out = self.outdir()
        ep_b = f"127.0.0.1:{db.port}"
        # Job B forms with its two nodes, waiting on the second one.
        b0 = start(agent_cmd(ep_b, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "job-b",
                             "--token-file", tok_b, worker=ENV_WORKER),
                   env={"RDZV_TEST_OUT": out})
        db.wait_log(r"job=job-b gen=\d+ node=\S+ joined .*, 1 of 2")
        # An agent of job A (its token) tries to take B's second place.
        mark = db.mark()
        intruder = start(agent_cmd(ep_b, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "job-b",
                                   "--token-file", tok_a, worker=["/bin/true"]))
        rc, _, err = finish(intruder, timeout=20)
        self.assertEqual(rc, 1)
        self.assertIn("authentication failed", err)
        db.wait_log(r"authentication failed: wrong token", since=mark)
        self.assertIsNone(db.find_log(r"job=job-b gen=\d+ node=\S+ joined .*, 2 of 2", since=mark))
        # Nor can a raw peer with A's token get through B's handshake (to STORE or JOIN).
        p = Peer(db.port)
        h = p.hello()
        cn = os.urandom(32)
        p.send(AUTH, {"nonce": cn.hex(),
                      "mac": mac(read_token(tok_a), "client", bytes.fromhex(h["nonce"]), cn).hex()})
        op, body = p.recv_json()
        self.assertEqual((op, body["error"]), (ERROR, "authentication failed: wrong token (the "
                                                      "proof does not match)"))
        self.assertTrue(p.closed_within())
        p.close()
        # B's real second node completes the job; A's daemon never heard of B.
        b1 = start(agent_cmd(ep_b, "--nnodes", "2", "--nproc", "1", "--rdzv-id", "job-b",
                             "--token-file", tok_b, worker=ENV_WORKER),
                   env={"RDZV_TEST_OUT": out})
        for p in (b0, b1):
            rc, _, err = finish(p)
            self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(sorted(read_envs(out)), [0, 1])
        self.assertIsNone(da.find_log(r"job-b"))

    def test_messages_act_on_the_senders_job_only(self):
        tok = token_file(self)
        secret = read_token(tok)
        d = self.daemon("--token-file", tok)
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        # Job "victim" is running (waiting for its go file).
        v = start(agent_cmd(ep, "--nnodes", "1", "--nproc", "1", "--rdzv-id", "victim",
                            "--token-file", tok, worker=PORT_WORKER), env={"RDZV_TEST_OUT": out})
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(out, "port")):
            self.assertLess(time.monotonic(), deadline, "victim's worker never started")
            time.sleep(0.05)
        # An authenticated peer of another job sends everything that could hurt a job: they
        # reach only its own job (or are refused before JOIN).
        p = Peer(d.port)
        p.authenticate(secret)
        p.send(0xA8, {"generation": 1, "rank": 0, "local_rank": 0, "exit_code": 1, "signal": 0,
                      "time": 0.0, "host": "evil"})
        op, body = p.recv_json()
        self.assertEqual(op, ERROR)
        self.assertIn("before JOIN", body["error"])
        p.close()
        p = Peer(d.port)
        p.authenticate(secret)
        p.send(JOIN, {"run_id": "other", "node_id": "evil-1", "host": "evil", "nproc": 1,
                      "node_rank": -1, "min": 2, "max": 2, "last_call_ms": 0, "max_restarts": 0,
                      "nccl": "off", "nccl_ids": 1})
        op, _ = p.recv_json()
        self.assertEqual(op, 0xA3)  # JOINED job "other"
        for op, body in ((0xA8, {"generation": 1, "rank": 0, "local_rank": 0, "exit_code": 1,
                                 "signal": 0, "time": 0.0, "host": "evil"}),
                         (0xAA, {"generation": 1, "status": "failed"}),
                         (0xAB, {"generation": 1})):
            p.send(op, body)
        time.sleep(0.5)
        p.close()
        open(os.path.join(out, "go"), "w").close()
        rc, _, err = finish(v)
        self.assertEqual(rc, 0, err[-2000:])
        d.wait_log(r"job=victim gen=\d+ generation 1 succeeded")


class TestGenerationStoreAllowlist(AgentTestCase):
    def test_generation_store_refuses_disallowed_addresses(self):
        tok = token_file(self)
        d = self.daemon("--token-file", tok, "--allow-store-from", "127.0.0.1/32")
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        p = start(agent_cmd(ep, "--nnodes", "1", "--nproc", "1", "--rdzv-id", "gen",
                            "--token-file", tok, worker=PORT_WORKER), env={"RDZV_TEST_OUT": out})
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(out, "port")):
            self.assertLess(time.monotonic(), deadline, "worker never started")
            time.sleep(0.05)
        with open(os.path.join(out, "port")) as f:
            gport = int(f.read())
        mark = d.mark()
        c = Client(gport, validate=False, source="127.0.0.2")
        try:
            try:
                c.send(b"\x00\xce\xf7\x85\x3c" + b"\x0d" + b"\x01\x00\x00\x00")  # VALIDATE, PING
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed at accept already
            self.assertEqual(c.assert_closed(), b"")
        finally:
            c.close()
        d.wait_log(r"\(127\.0\.0\.2:\d+\): refused TCPStore client on job gen gen 1 listener",
                   since=mark, levels=("warn",))
        with Client(gport) as ok:
            ok.ping(5)
        open(os.path.join(out, "go"), "w").close()
        rc, _, err = finish(p)
        self.assertEqual(rc, 0, err[-2000:])


if __name__ == "__main__":
    main()
