# SPDX-License-Identifier: Apache-2.0
# authtest.py: helpers for the authentication tests: token files, and a raw rdzv peer that does
# the HELLO/AUTH handshake with Python's own hmac (independent of the C code under test).
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import tempfile
import time

from rdzvtest import HOST, T_REPLY

HELLO, JOIN, JOINED, AUTH, AUTH_OK, STORE, ERROR = 0xA0, 0xA2, 0xA3, 0xAC, 0xAD, 0xAE, 0xAF


def token_file(testcase, secret=None, mode=0o600):
    """A token file (random 64 hex digits unless secret is given); removed after the test."""
    d = tempfile.mkdtemp(prefix="rdzv-token-")
    path = os.path.join(d, "token")
    with open(path, "w") as f:
        f.write((secret if secret is not None else secrets.token_hex(32)) + "\n")
    os.chmod(path, mode)
    testcase.addCleanup(lambda: (os.unlink(path), os.rmdir(d)))
    return path


def read_token(path):
    with open(path, "rb") as f:
        return f.read().rstrip()


def mac(secret, who, sn, cn):
    return hmac.new(secret, b"rdzv-auth-v1 " + who.encode() + sn + cn, hashlib.sha256).digest()


def frame(op, body):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return struct.pack("<BBHI", op, 1, 0, len(body)) + body


class Peer:
    """A raw rendezvous connection."""

    def __init__(self, port, timeout=T_REPLY, source=None):
        self.sock = socket.create_connection((HOST, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.local_port = self.sock.getsockname()[1]
        self.peer_tag = r"\(127\.0\.0\.1:%d\)" % self.local_port

    def close(self):
        self.sock.close()

    def send(self, op, body):
        self.sock.sendall(frame(op, body))

    def recv(self, timeout=T_REPLY):
        """One frame: (op, body bytes); None when the daemon closed the connection."""
        hdr = self._exact(8, timeout)
        if hdr is None:
            return None
        op, ver, res, n = struct.unpack("<BBHI", hdr)
        body = self._exact(n, timeout) if n else b""
        return op, body

    def recv_json(self, timeout=T_REPLY):
        f = self.recv(timeout)
        return None if f is None else (f[0], json.loads(f[1]))

    def _exact(self, n, timeout):
        buf = b""
        deadline = time.monotonic() + timeout
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for a frame (got %r)" % buf)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def closed_within(self, timeout=T_REPLY):
        """True if the daemon closes the connection (EOF/reset) within timeout, ignoring data."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
        return False

    def hello(self):
        self.send(HELLO, {"magic": "rdzv", "version": 1, "peer": "authtest"})
        op, body = self.recv_json()
        assert op == HELLO, (op, body)
        return body

    def authenticate(self, secret):
        """HELLO + AUTH with secret; returns the AUTH_OK body after checking the daemon's mac."""
        h = self.hello()
        assert h.get("auth") == "hmac-sha256", h
        sn = bytes.fromhex(h["nonce"])
        cn = secrets.token_bytes(32)
        self.send(AUTH, {"nonce": cn.hex(), "mac": mac(secret, "client", sn, cn).hex()})
        op, body = self.recv_json()
        assert op == AUTH_OK, (op, body)
        assert hmac.compare_digest(bytes.fromhex(body["mac"]), mac(secret, "server", sn, cn))
        return body
