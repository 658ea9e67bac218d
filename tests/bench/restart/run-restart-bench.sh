#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-restart-bench.sh BUILD_DIR [--crashes N] [--trials N] [--cap SEC] [--no-torchrun] [--keep]:
# how fast rdzv recovers from a worker crash, a lost agent (SIGKILL), a silent agent (SIGSTOP) and
# a restarted rdzvd, beside torchrun 1.13 (c10d backend) measured the same way in the same run.
# 2 agents x 2 workers (tests/faults/fault-worker) on this machine. Prints a markdown table on
# stdout, progress on stderr. Not a timed test: run it by hand on a quiet machine.
set -eu
build=${1:?usage: run-restart-bench.sh BUILD_DIR [options]}
shift
[ -x "$build/tests/faults/fault-worker" ] || {
  echo "run-restart-bench.sh: build first (ninja -C $build)" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/restart_bench.py" "$build" "$@"
