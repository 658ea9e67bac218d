# SPDX-License-Identifier: Apache-2.0
# authtest.py: a raw rdzv peer (frames, the HELLO/AUTH handshake with Python's own hmac,
# independent of the C code under test), token files, and the bodies an agent sends (JOIN, its
# resume), for the tests that speak the rendezvous protocol without rdzv-agent.
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
ROUND, HEARTBEAT, WORKER_EXIT, EVENT, LEAVE, READY = 0xA4, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB
STATUS, STATUS_REPLY = 0xB0, 0xB1


def join_body(run_id, node_id, mx=2, resume=None, *, mn=1, host=None, last_call_ms=50,
              max_restarts=3, heartbeat_timeout_ms=60000, secret=None):
    """The JOIN an rdzv-agent sends for node node_id of job run_id (--nnodes mn:mx, one process,
    no NCCL id, no rank hint); resume and secret are added when given."""
    body = {"run_id": run_id, "node_id": node_id,
            "host": "host-" + node_id if host is None else host, "nproc": 1,
            "node_rank": -1, "min": mn, "max": mx, "last_call_ms": last_call_ms,
            "max_restarts": max_restarts, "nccl": "off", "nccl_ids": 1, "rank_hint": False,
            "heartbeat_timeout_ms": heartbeat_timeout_ms, "join_timeout_ms": 600000,
            "scale_up_now": False}
    if resume is not None:
        body["resume"] = resume
    if secret:
        body["secret"] = secret
    return body


def resume(generation=1, node_rank=0, nnodes=1, rank_offset=0, world_size=1, restart_count=0,
           master_port=0):
    """A JOIN's resume: the generation an agent says its workers run."""
    return {"generation": generation, "node_rank": node_rank, "nnodes": nnodes,
            "rank_offset": rank_offset, "world_size": world_size,
            "restart_count": restart_count, "master_port": master_port, "left": False}


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
