#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The 'meson test --wrapper' of tests/run-suite.sh, which runs the gcc build's tests and the
# sanitizer build's tests at the same time. Each test run by Python or a shell script holds one
# lock while it runs: shared for most, exclusive for those that work the CPUs hard (PyTorch jobs,
# the trainer, hundreds of agents, thousands of connections: over 0.9 s of CPU per second, as
# /usr/bin/time measured them in the gcc build), that bound a delay of a few seconds (a worker
# restarted within 5 s, a heartbeat answered within 2 s under attack), or that start a local
# Slurm.
# So those never share the machine with a test of the other build, as is_parallel : false keeps
# them alone in their own. An exclusive request goes first: it holds the turnstile while it
# waits, and a shared request passes the turnstile before it takes the lock. The C unit tests
# (seconds each) take no lock. A test run by hand, or by 'meson test' without this wrapper,
# takes none either.
# Usage: tests/suite-lock.sh COMMAND [ARGS...]
set -u
lock=${RDZV_SUITE_LOCK:-/tmp/rdzv-suite.lock}
mode=
for a in "$@"; do
  case "${a##*/}" in
    test_torch_inplace.py | test_inplace_faults.py | test_worker_faults.py | test_torchrun.py | \
    test_agents.py | test_ddp.py | test_train.py | test_train_inplace.py | test_load.py | \
    test_init_flood.py | test_storm.py | test_torchrun_cli.py | bench-smoke.sh | \
    test_attack_conn.py | test_node_faults.py | test_status.py | test_auth_agents.py | \
    test_schedulers.py | test_torchrun_slurm.py | test_doc_commands.py)
      mode=-x; break ;;
    *.py | *.sh)
      mode=-s ;;
  esac
done
case "$mode" in
  -x) exec flock -o -x "$lock.turn" flock -o -x "$lock" "$@" ;;
  -s) flock -x "$lock.turn" true && exec flock -o -s "$lock" "$@" ;;
esac
exec "$@"
