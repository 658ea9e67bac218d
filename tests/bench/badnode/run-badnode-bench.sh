#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-badnode-bench.sh BUILD_DIR [--trials N] [--cap SEC] [--no-torchrun] [--rows R,...] [--keep]
#                      [--worker rdzv-train|torch] [--torchrun-monitor-interval SEC]:
# a bad node is put aside, not restarted into. Three agents (bad, good, spare) of a
# job of --nnodes 2 --nproc 1 --max-restarts 4 on this machine, gloo, CPU; the bad node's worker
# dies at start-up. From its first failure to training on the spare, under rdzv --recovery
# restart and inplace, beside rdzv with --bad-node-failures 0 (the behaviour before) and
# torchrun 1.13, in one run. Prints a markdown table on stdout, progress on stderr. Not a timed
# test: run it by hand on a quiet machine (badnode_bench.py says how the figures are taken).
set -eu
build=${1:?usage: run-badnode-bench.sh BUILD_DIR [options]}
shift
[ -x "$build/agent/rdzv-agent" ] || {
  echo "run-badnode-bench.sh: build first (ninja -C $build)" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/badnode_bench.py" "$build" "$@"
