#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-recovery-bench.sh BUILD_DIR [--trials N] [--cap SEC] [--no-torchrun] [--ckpt-every K]
#                       [--progress-timeout SEC] [--torchrun-monitor-interval SEC] [--keep]
#                       [--worker rdzv-train|torch]:
# from a worker's SIGKILL (crash) or SIGSTOP (hang) to the next training step, for rdzv-train in
# place, rdzv-train restarted from its checkpoint, and torchrun 1.13 running ddp_ckpt.py, in one run
# (--worker torch: examples/autoencoder.py with rdzv.torch in every row). 2 agents x 2 workers on
# this machine, gloo, CPU. Prints a markdown table on stdout, progress on stderr. Not a timed test:
# run it by hand on a quiet machine (recovery_bench.py says how the figures are taken).
set -eu
build=${1:?usage: run-recovery-bench.sh BUILD_DIR [options]}
shift
[ -x "$build/agent/rdzv-agent" ] || {
  echo "run-recovery-bench.sh: build first (ninja -C $build)" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/recovery_bench.py" "$build" "$@"
