#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""store-big-values.py: what large values cost a TCPStore server, side by side: the server's CPU
time (user + system, from /proc) for N SET+GET pairs of one value size, one client (rdzvtest's),
the servers taken in turn, each round alternating. Servers: each --rdzvd BINARY, and PyTorch's
own TCPStore server (tests/bench/pytorch-server.py under /usr/bin/python3) with --pytorch.

Usage: store-big-values.py [--rdzvd BIN]... [--pytorch] [--rounds N]
Prints a markdown table: the median CPU seconds of each server and size, and the ratio to the
first server."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from rdzvtest import Client, fixed_port  # noqa: E402

SIZES = ((1500, 256 << 10), (200, 4 << 20))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(server):
    """The server's process and port, once it takes connections."""
    if server == "pytorch":
        pf = tempfile.mktemp()
        p = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "pytorch-server.py"),
                              "--port-file", pf], stdout=subprocess.DEVNULL)
        port = None
        for _ in range(600):
            if os.path.exists(pf) and open(pf).read().strip():
                port = int(open(pf).read())
                break
            time.sleep(0.05)
        os.unlink(pf)
    else:
        port = fixed_port()
        p = subprocess.Popen([server, "--port", str(port), "-l", "warn"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:  # 1.13's server speaks PyTorch 1.x's numbering
            return p, Client(port, dialect="2.0" if server == "pytorch" else "modern")
        except OSError:
            time.sleep(0.05)
    raise SystemExit("store-big-values: %s did not start" % server)


def run(server, n, size):
    p, c = start(server)
    v = b"v" * size
    t0 = cpu_s(p.pid)
    for i in range(n):
        c.set("k%d" % (i % 8), v)
        if len(c.get("k%d" % (i % 8))) != size:
            raise SystemExit("store-big-values: %s answered a short GET" % server)
    used = cpu_s(p.pid) - t0
    c.close()
    p.kill()
    p.wait()
    return used


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rdzvd", action="append", default=[])
    ap.add_argument("--pytorch", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    servers = a.rdzvd + (["pytorch"] if a.pytorch else [])
    if not servers:
        ap.error("name at least one server (--rdzvd BIN or --pytorch)")
    got = {(s, size): [] for s in servers for _, size in SIZES}
    for _ in range(a.rounds):
        for n, size in SIZES:
            for s in servers:
                got[(s, size)].append(run(s, n, size))
    print("| server | " + " | ".join("%d x %d KiB (s, ratio)" % (n, size >> 10)
                                      for n, size in SIZES) + " |")
    print("|---" * (len(SIZES) + 1) + "|")
    for s in servers:
        cells = []
        for _, size in SIZES:
            m, m0 = statistics.median(got[(s, size)]), statistics.median(got[(servers[0], size)])
            cells.append("%.2f (%.2f)" % (m, m / m0 if m0 else float("nan")))
        print("| %s | %s |" % (s, " | ".join(cells)))


if __name__ == "__main__":
    main()
