# SPDX-License-Identifier: Apache-2.0
"""The network pre-flight in real jobs, many times (docs/BENCHMARKS.md, "The network pre-flight
in a job"). Four network namespaces, --nnodes 3, as rendezvous-preflight-job sets them up (root).
RUNS unshaped jobs with --preflight net (the default fraction): how many put a node aside (none
should), and how many checks a full probe cleared a node in. With SPARE_DELAY (s), the fourth
agent starts that late, so the first check is a trio, and each worker sleeps 2 s (the spare
joins before the job ends). Then COST_RUNS (default RUNS) pairs of jobs, all four agents at
once, without and with the check: when the first worker started, from the agents' start. Run
from the build directory's parent, as root:
  PYTHONPATH=tests/pylib:tests/rendezvous RUNS=20 COST_RUNS=10 SPARE_DELAY=0.5 \
    python3 tests/bench/preflight/preflight_bench.py
"""
import os
import re
import statistics

from test_preflight_job import PreflightJob

RUNS = int(os.environ.get("RUNS", "20"))
COST_RUNS = int(os.environ.get("COST_RUNS", str(RUNS)))
SPARE_DELAY = float(os.environ.get("SPARE_DELAY", "0"))


def main():
    t = PreflightJob("test_3_unshaped_puts_nobody_aside")
    t.setUp()
    try:
        aside = 0
        for k in range(RUNS):
            codes, outs, ran = t.job("bench%d" % k, sleep=2 if SPARE_DELAY else 0,
                                     spare_delay=SPARE_DELAY)
            aside += codes.count(69)
            if len(ran) != 3:
                print("run %d: %d workers ran" % (k, len(ran)), flush=True)
        with open(os.path.join(t.dir.name, "rdzvd.log")) as f:
            log = f.read()
        cleared = len(re.findall(r"put aside, [1-9]\d* cleared by a full probe", log))
        checks = re.findall(r"network pre-flight: (\d+) nodes, \d+ links, .* in (\d+) ms", log)
        print("unshaped with --preflight net: %d runs, %d nodes put aside; %d checks (%d of 3 "
              "nodes), %d cleared a node; the longest check %s ms" % (
                  RUNS, aside, len(checks), sum(n == "3" for n, _ in checks), cleared,
                  max((int(ms) for _, ms in checks), default=0)), flush=True)
        without, with_ = [], []
        for k in range(COST_RUNS):
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
