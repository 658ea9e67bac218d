#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scale-agents.sh [BUILD_DIR] [N]: N (default 256) real rdzv-agent processes on this machine join
# one rdzvd with --nnodes N --nproc 1; each worker records when it started. Prints the time from
# the first agent's launch to the last worker's start (target: under 3 s for 256), best of 3.
set -eu
build=${1:-build}
n=${2:-256}
agent="$build/agent/rdzv-agent"
rdzvd="$build/daemon/rdzvd"
[ -x "$agent" ] && [ -x "$rdzvd" ] || { echo "scale-agents.sh: build first (ninja -C $build)" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"
best=""
for round in 1 2 3; do
  dir=$(mktemp -d)
  "$rdzvd" --port 0 --port-file "$dir/port" -l warn 2>"$dir/rdzvd.log" & dpid=$!
  for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.02; done
  ep=127.0.0.1:$(cat "$dir/port")
  mkdir "$dir/out"
  t0=$EPOCHREALTIME
  for i in $(seq "$n"); do
    RDZV_TEST_OUT="$dir/out" "$agent" --endpoint "$ep" --nnodes "$n" --nproc 1 --rdzv-id scale \
      --log-level warn ${SCALE_AGENT_ARGS:-} -- /bin/bash -c 'echo $EPOCHREALTIME > "$RDZV_TEST_OUT/$RANK"' >/dev/null 2>&1 &
  done
  t1=$EPOCHREALTIME
  wait $(jobs -p | grep -vx "$dpid")
  kill "$dpid"; wait "$dpid" 2>/dev/null || true
  got=$(ls "$dir/out" | wc -l)
  last=$(cat "$dir/out"/* | sort -n | tail -1)
  first=$(cat "$dir/out"/* | sort -n | head -1)
  res=$(echo "$t0 $t1 $first $last" | awk '{printf "%.3f %.3f %.3f", $2-$1, $3-$1, $4-$1}')
  read -r launch firstw lastw <<<"$res"
  echo "round $round: $got/$n workers; launching all agents took ${launch} s; first worker at ${firstw} s, last at ${lastw} s after the first launch"
  if [ -z "$best" ] || awk "BEGIN{exit !($lastw < $best)}"; then best=$lastw; fi
  rm -rf "$dir"
done
echo "best: last of $n workers started ${best} s after the first agent was launched (load: $(cut -d' ' -f1-3 /proc/loadavg))"
