#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# explore-deep.sh: run the job state machine's explorer (tests/unit/test-job-explore.c) deeper
# than the unit suite does: every variant to DEPTH events (default 9), for up to SECONDS of wall
# time (default 1800), going on past violations to print the shortest sequence of each.
# Usage: explore-deep.sh BUILD_DIR [DEPTH [SECONDS]]
set -u
exe=${1:?usage: explore-deep.sh BUILD_DIR [DEPTH [SECONDS]]}/tests/unit/test-job-explore
RDZV_EXPLORE_DEPTH=${2:-9} RDZV_EXPLORE_SECONDS=${3:-1800} RDZV_EXPLORE_KEEP_GOING=1 exec "$exe"
