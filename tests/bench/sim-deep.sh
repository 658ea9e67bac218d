#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# sim-deep.sh: run the job state machine's simulator (tests/unit/test-job-sim.c) deeper than the
# unit suite does: SEEDS seeds (default 2,000) of EVENTS events each (default 50,000: 100
# million in all), for up to SECONDS of wall time (default 3600), going on past violations to
# print the shortest trace of each check that fails. A seed's trace replays with
# RDZV_SIM_TRACE='seed=N ...' (printed with it); RDZV_SIM_SEED=N runs one seed.
# Usage: sim-deep.sh BUILD_DIR [SEEDS [EVENTS [SECONDS [FIRST_SEED]]]]
set -u
build=${1:?usage: sim-deep.sh BUILD_DIR [SEEDS [EVENTS [SECONDS [FIRST_SEED]]]]}
seeds=${2:-2000}
events=${3:-50000}
here=$(cd "$(dirname "$0")/.." && pwd)
export RDZV_SIM_TRACES=$here/unit/sim-traces RDZV_SIM_SEEDS=$seeds
export RDZV_SIM_EVENTS=$((seeds * events)) RDZV_SIM_SECONDS=${4:-3600} RDZV_SIM_KEEP_GOING=1
[ -n "${5:-}" ] && export RDZV_SIM_FIRST=$5
exec "$build/tests/unit/test-job-sim"
