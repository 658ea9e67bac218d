#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_auth.py: rdzvd --token-file (HMAC challenge-response for rdzv peers and rdzvctl),
# --allow-store-from (PyTorch TCPStore clients by address) and --handshake-timeout.
import json
import os
import subprocess
import time
import unittest

from authtest import AUTH, ERROR, JOIN, STORE, Peer, mac, read_token, token_file
from rdzvtest import (RDZVCTL, RDZVD, Client, DaemonTestCase, fresh_client_works, main, s, u32)


def ctl(d, *args, env=None, token=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("RDZV")}
    e.update(env or {})
    cmd = [RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "-t", "5"]
    if token:
        cmd += ["--token-file", token]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=e, timeout=30)


class TokenFiles(DaemonTestCase):
    def test_group_readable_token_file_is_refused(self):
        tok = token_file(self, mode=0o644)
        r = subprocess.run([RDZVD, "--port", "0", "--token-file", tok], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 2)
        self.assertIn("accessible by group or others (mode 0644); run: chmod 600", r.stderr)
        self.assertNotIn(read_token(tok).decode(), r.stderr)
        d = self.daemon()
        r = ctl(d, "ping", token=tok)
        self.assertEqual(r.returncode, 2)
        self.assertIn("group or others", r.stderr)

    def test_short_token_is_refused(self):
        tok = token_file(self, secret="short")
        r = subprocess.run([RDZVD, "--port", "0", "--token-file", tok], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 2)
        self.assertIn("at least 16", r.stderr)

    def test_token_from_environment(self):
        tok = token_file(self)
        pf = os.path.join(os.path.dirname(tok), "port")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RDZVD_")}
        env["RDZVD_TOKEN_FILE"] = tok
        p = subprocess.Popen([RDZVD, "--port", "0", "--bind", "127.0.0.1", "--port-file", pf],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (p.kill(), p.wait(), os.path.exists(pf) and os.unlink(pf)))
        deadline = time.monotonic() + 10
        while not (os.path.exists(pf) and open(pf).read().endswith("\n")):
            self.assertLess(time.monotonic(), deadline, "no port file")
            time.sleep(0.02)
        peer = Peer(int(open(pf).read()))
        self.assertEqual(peer.hello().get("auth"), "hmac-sha256")
        peer.close()
        r = subprocess.run([RDZVD, "--help"], capture_output=True, text=True, timeout=10)
        for opt in ("--token-file", "--allow-store-from", "--handshake-timeout"):
            self.assertIn(opt, r.stdout)


class Rdzvctl(DaemonTestCase):
    def setUp(self):
        self.tok = token_file(self)
        # Nothing local may use TCPStore without the token: rdzvctl must authenticate.
        self.d = self.daemon("--token-file", self.tok, "--allow-store-from", "10.0.0.0/8")

    def test_right_token_works(self):
        r = ctl(self.d, "set", "k", "v1", token=self.tok)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = ctl(self.d, "get", "k", env={"RDZVCTL_TOKEN_FILE": self.tok})
        self.assertEqual((r.returncode, r.stdout), (0, "v1\n"), r.stderr)
        r = ctl(self.d, "ping", env={"RDZV_TOKEN_FILE": self.tok})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("pong", r.stdout)

    def test_wrong_token_is_refused(self):
        wrong = token_file(self)
        mark = self.d.mark()
        r = ctl(self.d, "get", "k", token=wrong)
        self.assertEqual(r.returncode, 4)
        self.assertEqual(r.stderr.strip(), "rdzvctl: authentication failed: rdzvd refused the "
                         "token (check --token-file)")
        self.d.wait_log(r"authentication failed: wrong token", since=mark, levels=("warn",))

    def test_missing_token_is_refused(self):
        mark = self.d.mark()
        r = ctl(self.d, "get", "k")
        self.assertEqual(r.returncode, 3)
        self.assertIn("pass --token-file", r.stderr)
        self.d.wait_log(r"refused TCPStore client on main listener: address not in "
                        r"--allow-store-from 10\.0\.0\.0/8", since=mark, levels=("warn",))

    def test_token_against_tokenless_daemon_is_refused(self):
        d = self.daemon()
        r = ctl(d, "ping", token=self.tok)
        self.assertEqual(r.returncode, 4)
        self.assertIn("does not ask for a token", r.stderr)


class RawHandshake(DaemonTestCase):
    """Hostile or broken rdzv peers: each is refused with ERROR and closed; others go on."""

    def setUp(self):
        self.tok = token_file(self)
        self.secret = read_token(self.tok)
        self.d = self.daemon("--token-file", self.tok)
        self.survivor = self.client(self.d)
        self.survivor.set("survivor", "here")

    def still_serving(self):
        self.survivor.ping(7)
        self.assertEqual(self.survivor.get("survivor"), b"here")
        fresh_client_works(self, self.d)
        p = Peer(self.d.port)
        try:
            p.authenticate(self.secret)
        finally:
            p.close()

    def refused(self, p, error_re, log_re, mark):
        f = p.recv_json()
        self.assertIsNotNone(f, "closed without an ERROR")
        self.assertEqual(f[0], ERROR, f)
        self.assertRegex(f[1]["error"], error_re)
        self.assertTrue(p.closed_within(), "the daemon kept the connection open")
        self.d.wait_log(p.peer_tag + ".*" + log_re, since=mark, levels=("warn",))
        p.close()
        self.still_serving()

    def test_hello_carries_a_challenge_and_nothing_else(self):
        p = Peer(self.d.port)
        h = p.hello()
        self.assertEqual(h["auth"], "hmac-sha256")
        self.assertRegex(h["nonce"], r"^[0-9a-f]{64}$")
        self.assertEqual(set(h), {"magic", "version", "peer", "auth", "nonce"})
        self.assertNotIn(self.secret.decode(), json.dumps(h))
        p2 = Peer(self.d.port)
        self.assertNotEqual(h["nonce"], p2.hello()["nonce"], "a fresh nonce per connection")
        p.close()
        p2.close()

    def test_right_token_gets_a_verifiable_auth_ok(self):
        p = Peer(self.d.port)
        p.authenticate(self.secret)
        # Now JOIN is served (a parse error proves it reached the job code, not the auth gate).
        p.send(JOIN, {"run_id": "x"})
        op, body = p.recv_json()
        self.assertEqual(op, ERROR)
        self.assertNotIn("authentication", body["error"])
        p.close()

    def test_skipping_auth(self):
        for op, body in ((JOIN, {"run_id": "victim"}), (STORE, {}), (0xA7, {"generation": 1})):
            p = Peer(self.d.port)
            p.hello()
            mark = self.d.mark()
            p.send(op, body)
            self.refused(p, r"^authentication required$", r"authentication failed: \w+ before "
                         r"AUTH", mark)

    def test_garbage_mac(self):
        p = Peer(self.d.port)
        p.hello()
        mark = self.d.mark()
        p.send(AUTH, {"nonce": "11" * 32, "mac": "00" * 32})
        self.refused(p, r"^authentication failed: wrong token", r"authentication failed: wrong "
                     r"token", mark)

    def test_replayed_proof(self):
        # A proof recorded on one connection is worthless on another (fresh server nonce).
        p = Peer(self.d.port)
        h = p.hello()
        cn = bytes(range(32))
        proof = {"nonce": cn.hex(), "mac": mac(self.secret, "client", bytes.fromhex(h["nonce"]),
                                                cn).hex()}
        p.send(AUTH, proof)
        self.assertEqual(p.recv()[0], 0xAD)
        p.close()
        p = Peer(self.d.port)
        p.hello()
        mark = self.d.mark()
        p.send(AUTH, proof)
        self.refused(p, r"wrong token", r"authentication failed", mark)

    def test_malformed_auth(self):
        for body in (b"{not json", b"[]", {"mac": "00" * 32}, {"nonce": "zz", "mac": "00"},
                     {"nonce": 5, "mac": "00" * 32}):
            p = Peer(self.d.port)
            p.hello()
            mark = self.d.mark()
            p.send(AUTH, body)
            self.refused(p, r"^authentication failed: ", r"authentication failed", mark)

    def test_auth_failures_are_rate_limited_in_the_log(self):
        mark = self.d.mark()
        for _ in range(30):
            p = Peer(self.d.port)
            p.hello()
            p.send(AUTH, {"nonce": "11" * 32, "mac": "00" * 32})
            self.assertEqual(p.recv_json()[0], ERROR)
            p.close()
        self.d.wait_log("authentication failed", since=mark)
        lines = [ln for ln in self.d.log_lines(mark) if "authentication failed" in ln]
        self.assertGreaterEqual(len(lines), 1)
        self.assertLessEqual(len(lines), 10, "\n".join(lines))
        self.still_serving()


class Allowlist(DaemonTestCase):
    def test_tcpstore_from_disallowed_address_is_closed(self):
        tok = token_file(self)
        d = self.daemon("--token-file", tok, "--allow-store-from", "127.0.0.1/32")
        ok = self.client(d)
        ok.set("k", "v")
        mark = d.mark()
        c = Client(d.port, source="127.0.0.2")
        try:
            c.req("GET", s("k"))
            self.assertEqual(c.assert_closed(), b"")
        finally:
            c.close()
        d.wait_log(r"\(127\.0\.0\.2:\d+\): refused TCPStore client on main listener: address "
                   r"not in --allow-store-from 127\.0\.0\.1/32", since=mark, levels=("warn",))
        # A legacy (no VALIDATE) client is refused the same way.
        c = Client(d.port, dialect="2.0", source="127.0.0.2")
        c.req("GET", s("k"))
        self.assertEqual(c.assert_closed(), b"")
        c.close()
        # rdzv peers from there may still authenticate (the token is their gate), and then use
        # the store through STORE.
        p = Peer(d.port, source="127.0.0.2")
        p.authenticate(read_token(tok))
        p.send(STORE, {})
        p.sock.sendall(bytes([3]) + s("k"))  # GET, modern numbering
        self.assertEqual(p._exact(8 + 1, 5), s("v"))
        p.close()
        self.assertEqual(ok.get("k"), b"v")

    def test_default_with_token_is_loopback(self):
        tok = token_file(self)
        d = self.daemon("--token-file", tok)
        d.wait_log(r"TCPStore clients from: 127\.0\.0\.0/8,::1")
        with Client(d.port, source="127.0.0.2") as c:
            c.ping(3)

    def test_allowlist_without_token(self):
        d = self.daemon("--allow-store-from", "127.0.0.1")
        with Client(d.port, source="127.0.0.2") as c:
            c.req("PING", u32(1))
            self.assertEqual(c.assert_closed(), b"")
        # Unauthenticated rdzv peers can't use STORE to get around it.
        p = Peer(d.port, source="127.0.0.2")
        p.hello()
        p.send(STORE, {})
        op, body = p.recv_json()
        self.assertEqual(op, ERROR)
        self.assertIn("not allowed", body["error"])
        p.close()

    def test_torch_client_from_allowed_address_works(self):
        tok = token_file(self)
        d = self.daemon("--token-file", tok, "--allow-store-from", "127.0.0.1/32")
        code = ("import datetime, torch.distributed as dist\n"
                "s = dist.TCPStore('127.0.0.1', %d, None, False, "
                "timeout=datetime.timedelta(seconds=10))\n"
                "s.set('torch', 'ok'); print(s.get('torch').decode())\n" % d.port)
        try:
            r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                               timeout=60)
        except FileNotFoundError:
            self.skipTest("no /usr/bin/python3")
        if "No module named 'torch'" in r.stderr:
            self.skipTest("torch not installed")
        self.assertEqual((r.returncode, r.stdout), (0, "ok\n"), r.stderr[-2000:])


class HandshakeTimeout(DaemonTestCase):
    def test_silent_connections_are_closed(self):
        tok = token_file(self)
        d = self.daemon("--token-file", tok, "--handshake-timeout", "1")
        # Handshaken and idle: kept.
        idle = self.client(d)
        idle.ping(1)
        legacy_idle = self.client(d, "2.0")
        legacy_idle.set("k", "v")
        authed = Peer(d.port)
        authed.authenticate(read_token(tok))
        t0 = time.monotonic()
        silent = Client(d.port, validate=False)          # not a byte
        half = Client(d.port, validate=False)
        half.send(b"\x00\xce\xf7")                        # part of VALIDATE
        partial = Client(d.port)                          # VALIDATE, then half a request:
        partial.send(b"\x03" + b"\x05")                  # VALIDATE counts as done
        hello_only = Peer(d.port)
        hello_only.hello()                                # HELLO, never AUTH
        for c in (silent, half):
            self.assertEqual(c.assert_closed(timeout=4), b"")
        self.assertTrue(hello_only.closed_within(4))
        took = time.monotonic() - t0
        self.assertGreater(took, 0.8)
        self.assertLess(took, 3.0)
        d.wait_log(r"no handshake within 1\.0 s \(--handshake-timeout\)", levels=("warn",))
        time.sleep(1.5)  # the behaviour: past the timeout, these stay open
        idle.ping(2)
        self.assertEqual(legacy_idle.get("k"), b"v")
        self.assertTrue(partial.is_open())
        self.assertFalse(authed.closed_within(0.1))
        for c in (silent, half, partial):
            c.close()
        authed.close()
        hello_only.close()

    def test_zero_disables(self):
        d = self.daemon("--handshake-timeout", "0")
        c = self.client(d, validate=False)
        time.sleep(1.2)  # the behaviour: silent past 1 s, it is not closed
        c.expect_nothing(0.2)
        c.send(b"\x00\xce\xf7\x85\x3c")
        c.ping(9)


if __name__ == "__main__":
    main()
