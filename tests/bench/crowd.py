#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A crowd from one address: the init barrier's shape when many ranks share a host and start
together. One process opens N TCPStore connections at once (every connect() is issued before any
byte is sent), then sends each one's VALIDATE and ADD of the barrier key (PyTorch >= 2.2's
numbering), as soon as it is connected, and reads each one's reply. The barrier completes when
every connection got its reply and one of them read N.

    crowd.py --port PORT [--host ADDR] [--conns N] [--key KEY] [--timeout SEC]

Prints one line of JSON: conns, ok (replies), lost (connections refused, reset or closed, or
without a reply in time), max (the largest count read), opened_s (every connect() issued),
sent_s (every ADD sent), done_s (the last reply or loss), first_loss. Exits 0 when the barrier
completed, 1 otherwise. Both rdzvd and the ceiling (tests/bench/null-responder, whose barrier
counter is an ADD of a key ending in "/cnt") answer it: tests/bench/run-crowd-bench.sh times
them side by side; tests/integration/test_init_flood.py runs it against rdzvd."""
import argparse
import errno
import json
import os
import resource
import select
import socket
import struct
import sys
import time

VALIDATE = b"\x00\xce\xf7\x85\x3c"  # VALIDATE (op 0) and its magic (proto/TCPSTORE.md)
ADD_MODERN = 4


def add_request(key):
    return VALIDATE + struct.pack("<BQ", ADD_MODERN, len(key)) + key + struct.pack("<q", 1)


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < n + 64:
        sys.exit("crowd.py: %d connections need more than the open-file limit %d" % (n, soft))


def crowd(host, port, n, key, timeout):
    raise_nofile(n)
    req = add_request(key)
    ep = select.epoll()
    socks, got = {}, {}
    res = {"conns": n, "ok": 0, "lost": 0, "max": 0, "first_loss": None}

    def lose(fd, why):
        res["lost"] += 1
        if res["first_loss"] is None:
            res["first_loss"] = why
        try:
            ep.unregister(fd)
        except OSError:
            pass
        got.pop(fd, None)

    t0 = time.monotonic()
    for _ in range(n):
        c = socket.socket()
        c.setblocking(False)
        while True:
            err = c.connect_ex((host, port))
            if err in (0, errno.EINPROGRESS):
                break
            if err not in (errno.EAGAIN, errno.EADDRNOTAVAIL):
                sys.exit("crowd.py: connect: %s" % os.strerror(err))
            time.sleep(0.001)  # the kernel's ports to that destination ran short: retry
        socks[c.fileno()] = c
        got[c.fileno()] = b""
        ep.register(c.fileno(), select.EPOLLOUT)
    res["opened_s"] = time.monotonic() - t0
    deadline = t0 + timeout
    sent = set()
    while res["ok"] + res["lost"] < n and time.monotonic() < deadline:
        for fd, ev in ep.poll(min(1.0, max(0.0, deadline - time.monotonic())), 4096):
            c = socks[fd]
            if fd not in sent:
                err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    lose(fd, "connect: " + os.strerror(err))
                    continue
                try:
                    c.send(req)  # a few dozen bytes into an empty send buffer: all of it
                except OSError as e:
                    lose(fd, "send: %s" % e)
                    continue
                sent.add(fd)
                if len(sent) == n:
                    res["sent_s"] = time.monotonic() - t0
                ep.modify(fd, select.EPOLLIN)
                continue
            try:
                b = c.recv(8 - len(got[fd]))
            except BlockingIOError:
                continue
            except OSError as e:
                lose(fd, "recv: %s" % e)
                continue
            if not b:
                lose(fd, "closed by the server")
                continue
            got[fd] += b
            if len(got[fd]) == 8:
                res["ok"] += 1
                res["max"] = max(res["max"], struct.unpack("<q", got[fd])[0])
                ep.unregister(fd)
                del got[fd]
    res["lost"] = n - res["ok"]
    if res["lost"] and res["first_loss"] is None:
        res["first_loss"] = "no reply within %.0f s" % timeout
    res["done_s"] = time.monotonic() - t0
    res.setdefault("sent_s", None)
    # Closed with a reset: thousands of ports left in TIME_WAIT would slow the next connects.
    linger = struct.pack("ii", 1, 0)
    for c in socks.values():
        try:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        except OSError:
            pass
        c.close()
    ep.close()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, default=16000)
    ap.add_argument("--key", default="/crowd-%d/cnt" % os.getpid())
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    res = crowd(a.host, a.port, a.conns, a.key.encode(), a.timeout)
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] == a.conns and res["max"] == a.conns else 1


if __name__ == "__main__":
    sys.exit(main())
