# SPDX-License-Identifier: Apache-2.0
"""The network pre-flight in real jobs, many times (docs/BENCHMARKS.md, "The network pre-flight
in a job"). Four network namespaces, --nnodes 3, as rendezvous-preflight-job sets them up (root).
RUNS unshaped jobs with --preflight net: how many put a node aside (none should). Then RUNS
pairs of jobs, without and with the check: when the first worker started, from the agents'
start. Run from the build directory's parent, as root:
  PYTHONPATH=tests/pylib:tests/rendezvous RUNS=20 \
    python3 tests/bench/preflight/preflight_bench.py
"""
import os
import statistics

from test_preflight_job import PreflightJob

RUNS = int(os.environ.get("RUNS", "20"))


def main():
    t = PreflightJob("test_3_unshaped_puts_nobody_aside")
    t.setUp()
    try:
        aside = 0
        for k in range(RUNS):
            codes, outs, ran = t.job("bench%d" % k)
            aside += codes.count(69)
            if len(ran) != 3:
                print("run %d: %d workers ran" % (k, len(ran)), flush=True)
        print("unshaped with --preflight net: %d runs, %d nodes put aside" % (RUNS, aside))
        without, with_ = [], []
        for k in range(RUNS):
            without.append(min(t.job("off%d" % k, preflight=False)[2].values()))
            with_.append(min(t.job("on%d" % k)[2].values()))
        for name, xs in (("without", without), ("with", with_)):
            print("first worker %s the check: median %.2f s, max %.2f s" % (
                name, statistics.median(xs), max(xs)))
        print("the check's cost: median %+.2f s" % (statistics.median(with_) -
                                                   statistics.median(without)))
    finally:
        t.doCleanups()


if __name__ == "__main__":
    main()
