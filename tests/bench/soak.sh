#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# soak.sh: the long fault soak (tests/faults/soak.py) as a benchmark: rdzv-train under three
# rdzv-agents (one a spare) against rdzvd --state-dir while worker, agent and rdzvd kills and
# stops are injected for SECONDS (default 300), from a seed that is printed (and can be given).
# Builds nothing. Exit status: the soak's (0: every check held).
set -u

usage() {
    cat <<EOF
Usage: soak.sh [OPTIONS] [BUILD_DIR]
  --seconds N   seconds of faults (default 300; RDZV_SOAK_SECONDS)
  --seed N      the schedule's seed (default: from the clock; RDZV_SOAK_SEED)
  --steps N     trainer steps (default: 60 per second of faults; RDZV_SOAK_STEPS)
  --faults LIST comma-separated subset of the fault kinds (RDZV_SOAK_FAULTS; see soak.py)
  --replicas N  run rdzvd as N replicas (RDZV_SOAK_REPLICAS; 3): leader and follower faults
  --keep        keep the run's directory (rdzvd and agent logs, the workers' record)
  -h, --help    show this help
BUILD_DIR defaults to ./build and must already be built.
EOF
}

build=./build
export RDZV_SOAK_SECONDS=${RDZV_SOAK_SECONDS:-300}
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) RDZV_SOAK_SECONDS=${2:?--seconds needs a value}; shift ;;
    --seed) export RDZV_SOAK_SEED=${2:?--seed needs a value}; shift ;;
    --steps) export RDZV_SOAK_STEPS=${2:?--steps needs a value}; shift ;;
    --faults) export RDZV_SOAK_FAULTS=${2:?--faults needs a list}; shift ;;
    --replicas) export RDZV_SOAK_REPLICAS=${2:?--replicas needs a number}; shift ;;
    --keep) export RDZV_SOAK_KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "soak.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) build=$1 ;;
    esac
    shift
done

build=$(cd "$build" && pwd) || exit 2
src=$(cd "$(dirname "$0")/../.." && pwd)
for f in daemon/rdzvd ctl/rdzvctl agent/rdzv-agent train/rdzv-train; do
    if [ ! -x "$build/$f" ]; then
        echo "soak.sh: $build/$f not found: build first (meson setup $build && ninja -C $build)" >&2
        exit 2
    fi
done
export RDZV_BUILD_ROOT=$build RDZV_SOURCE_ROOT=$src RDZVD=$build/daemon/rdzvd \
    RDZVCTL=$build/ctl/rdzvctl RDZV_AGENT=$build/agent/rdzv-agent \
    RDZV_TRAIN=$build/train/rdzv-train PYTHONPATH=$src/tests/pylib
echo "soak.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$RDZV_SOAK_SECONDS s of faults" >&2
cd "$src/tests/faults" || exit 2
/usr/bin/python3 soak.py
rc=$?
echo "soak.sh: exit $rc, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit $rc
