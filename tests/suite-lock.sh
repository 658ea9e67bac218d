#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The 'meson test --wrapper' of tests/run-suite.sh, which runs the gcc build's tests and the
# sanitizer build's tests at the same time. Each test run by Python or a shell script holds one
# lock while it runs: shared for most, exclusive for the scripts named in tests/suite-lock.list,
# those that work the CPUs hard (PyTorch jobs, the trainer, hundreds of agents, thousands of
# connections: over 0.9 s of CPU per second, as /usr/bin/time measured them in the gcc build),
# that bound a delay of a few seconds (a worker restarted within 5 s, a heartbeat answered within
# 2 s under attack), or that start a local Slurm (munged is one for the machine).
# So those never share the machine with a test of the other build, as is_parallel : false keeps
# them alone in their own. An exclusive request goes first: it holds the turnstile while it
# waits, and a shared request passes the turnstile before it takes the lock. The C unit tests
# (seconds each) take no lock, but for one listed (the simulator: a million events it must reach
# within its time, which five tests beside it on two CPUs cut short), which holds it alone. A
# test run by hand, or by 'meson test' without this wrapper, takes none either. run-suite.sh
# runs package-test.sh and wheel-test.sh under it too (shared), beside the tests, and the
# exclusive tests after every shared test of both builds and those two scripts (so no exclusive
# test's timeout runs while it waits at the turnstile).
# test_slurm_time_limit.py, a minute of waiting on Slurm's clock, is shared, so the other
# build's tests go on meanwhile: it starts its Slurm in the gcc build only, and no exclusive test
# runs beside it, so no two local Slurms start at once.
# Usage: tests/suite-lock.sh COMMAND [ARGS...]
set -u
lock=${RDZV_SUITE_LOCK:-/tmp/rdzv-suite.lock}
list=$(dirname "$0")/suite-lock.list
mode=
for a in "$@"; do
  if grep -qxF -- "${a##*/}" "$list"; then mode=-x; break; fi
  case "${a##*/}" in
    *.py | *.sh) mode=-s ;;
  esac
done
case "$mode" in
  -x) exec flock -o -x "$lock.turn" flock -o -x "$lock" "$@" ;;
  -s) flock -x "$lock.turn" true && exec flock -o -s "$lock" "$@" ;;
esac
exec "$@"
