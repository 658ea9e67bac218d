#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""pytorch-server.py: run PyTorch's own TCPStore server for rdzv-bench: the classic backend in
1.13, the libuv one from 2.4 (pip's wheels; Debian's 2.6 is built without libuv).

Usage: /usr/bin/python3 pytorch-server.py --port-file FILE

Binds a free port (port 0), writes it to FILE, then sleeps until killed. The server is a
thread inside this process, so this process's VmRSS is the server's memory."""
import argparse
import datetime
import os
import resource
import signal
import socket
import sys


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()

    # One file descriptor per client: take the hard limit, as rdzvd does.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    import torch
    import torch.distributed as dist

    kw = dict(is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=300))
    try:
        store = dist.TCPStore("127.0.0.1", 0, **kw)
        port = store.port
    except (RuntimeError, TypeError):
        # Older releases may refuse port 0: pick a free one (a small race, fine for a benchmark).
        port = free_port()
        store = dist.TCPStore("127.0.0.1", port, **kw)
    if not port:
        sys.exit("pytorch-server: TCPStore reported port 0")

    tmp = "%s.tmp.%d" % (args.port_file, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, args.port_file)
    # run-bench.sh reads the backend from this line.
    backend = "libuv" if getattr(store, "libuvBackend", False) else "classic"
    print("pytorch-server: torch %s TCPStore (%s backend) on port %d"
          % (torch.__version__, backend, port), file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
