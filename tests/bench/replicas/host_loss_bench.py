#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# host_loss_bench.py BUILD_DIR [--trials N]: "leader-host loss -> training progressing
# again", in place and restart, side by side in one run. Each trial is the scenario of
# tests/faults/test_partition.py (Partition.host_loss): three hosts as network namespaces (root
# and iproute2 needed), one rdzvd replica and one rdzv-agent (rdzv-train, gloo, 1 worker) on each,
# a spare agent waiting; the host of the leading replica, of node rank 0's agent and so of the
# workers' store loses its link and every process in it is SIGKILLed. Measured: from the cut to
# the first training step of the next generation (the old rank 0 was on the lost host), with
# --heartbeat-timeout 2. The target: --heartbeat-timeout + 1 s. The anchor, torchrun (c10d), has
# its store on the lost host's agent: its job does not recover at all.
# Prints a markdown table on stdout, progress on stderr. Not a timed test: run by hand, as root.
import argparse
import os
import platform
import statistics
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(prog="host_loss_bench.py")
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("RDZVD", os.path.join(build, "daemon", "rdzvd"))
    os.environ.setdefault("RDZV_AGENT", os.path.join(build, "agent", "rdzv-agent"))
    os.environ.setdefault("RDZVCTL", os.path.join(build, "ctl", "rdzvctl"))
    os.environ.setdefault("RDZV_TRAIN", os.path.join(build, "train", "rdzv-train"))
    sys.path[:0] = [os.path.join(HERE, "..", "..", d) for d in ("faults", "pylib")]
    import test_partition  # noqa: E402 (after the environment it reads)

    t0 = time.monotonic()
    rows = []
    for mode in ("inplace", "restart"):
        took = []
        for i in range(a.trials):
            t = test_partition.Partition("test_host_loss_" + ("in_place" if mode == "inplace"
                                                                else "restart"))
            try:
                t.setUp()
                took.append(t.host_loss(mode, steps=600 if mode == "inplace" else 300)[0])
            except unittest.SkipTest as e:
                sys.exit("host_loss_bench.py: %s" % e)
            finally:
                t.doCleanups()
            print("%s trial %d: %.2f s" % (mode, i + 1, took[-1]), file=sys.stderr, flush=True)
        rows.append((mode, took))
    print("| leader + node rank 0 + store host lost, rdzv-train `--recovery` | training again "
          "after the cut: median (min - max) | target (`--heartbeat-timeout 2` + 1 s) |")
    print("|---|---|---|")
    for mode, took in rows:
        print("| %s | %.2f s (%.2f - %.2f) | %s |" % (
            mode, statistics.median(took), min(took), max(took),
            "met" if statistics.median(took) <= 3.0 else "not met"))
    print("\n(`host_loss_bench.py: %d trials each, 2 CPUs, %s, %.0f s, load %s`)" % (
        a.trials, platform.release(), time.monotonic() - t0,
        " ".join("%.2f" % x for x in os.getloadavg())))


if __name__ == "__main__":
    main()
