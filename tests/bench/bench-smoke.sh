#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench-smoke.sh: start rdzvd on a free port, run rdzv-bench briefly (directly, and through the
# nodes' store fronts: rdzv-front-farm beside RDZV_BENCH), check the figures are non-zero; with
# BUILD_ROOT, also one trial of the recovery benchmark without torchrun (it fails when rdzv does
# not recover from a worker's SIGKILL or SIGSTOP).
# Usage: bench-smoke.sh RDZVD RDZV_BENCH [BUILD_ROOT]
set -u
rdzvd=$1
bench=$2
build=${3:-}
tmp=$(mktemp -d)
pid=
fpid=
cleanup() {
    [ -n "$fpid" ] && kill "$fpid" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

"$rdzvd" --port 0 --port-file "$tmp/port" -l warn >"$tmp/rdzvd.log" 2>&1 &
pid=$!
fail() {
    echo "not ok: $*"
    sed 's/^/# rdzvd: /' "$tmp/rdzvd.log"
    exit 1
}

for _ in $(seq 100); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || { pid=; fail "rdzvd exited at start"; }
    sleep 0.1
done
[ -s "$tmp/port" ] || fail "rdzvd wrote no port file in 10 s"

out=$("$bench" --port-file "$tmp/port" --pid "$pid" -c 4 -w 0.1 -d 1 -t 20 throughput) ||
    fail "throughput: $out"
echo "# $out"
rate=$(sed -n 's/.*replies_per_s=\([0-9]*\).*/\1/p' <<<"$out")
[ "${rate:-0}" -gt 0 ] || fail "throughput reported no replies"
# rdzvd's own CPU time over the window: some, and less than 1 ms per reply.
cpu=$(sed -n 's/.* server_cpu_ns_per_reply=\([0-9.]*\).*/\1/p' <<<"$out")
awk -v c="${cpu:-0}" 'BEGIN { exit !(c > 0 && c < 1000000) }' ||
    fail "throughput reported no plausible server CPU per reply: '${cpu}'"

out=$("$bench" --port-file "$tmp/port" -c 200 -t 20 barrier) || fail "barrier: $out"
echo "# $out"
grep -q ' ok=1 ' <<<"$out" || fail "barrier did not complete"
# The same as PyTorch >= 2.5's clients: VALIDATE, a PING echoed, then the barrier.
out=$("$bench" --port-file "$tmp/port" --dialect modern -c 200 -t 20 barrier) ||
    fail "barrier, modern: $out"
echo "# $out"
grep -q ' dialect=modern .* ok=1 ' <<<"$out" || fail "the modern barrier did not complete"

# Through the nodes' store fronts (rdzv-front-farm: the agent's own front, 25 nodes' in one
# process), 8 ranks a node: the barrier completes, and the fronts forwarded each rank's ADD and
# the go key's SET (of 601 requests: a PING, an ADD and a WAIT a rank, the SET), answered the
# PINGs, and sent the 200 WAITs as a few upstream.
farm=$(dirname "$bench")/rdzv-front-farm
if [ -x "$farm" ]; then
    mkfifo "$tmp/feed"
    "$farm" 127.0.0.1 "$(cat "$tmp/port")" 25 <"$tmp/feed" >"$tmp/fronts" 2>"$tmp/farm.err" &
    fpid=$!
    exec 9>"$tmp/feed"
    for _ in $(seq 100); do
        [ "$(grep -c . "$tmp/fronts")" -ge 25 ] && break
        sleep 0.1
    done
    out=$("$bench" --fronts "$tmp/fronts" --dialect modern -t 20 barrier) ||
        fail "barrier through fronts: $out"
    echo "# $out"
    grep -q ' ok=1 .* nodes=25 per_node=8' <<<"$out" ||
        fail "the barrier through fronts did not complete"
    exec 9>&-
    wait "$fpid" || fail "rdzv-front-farm: $(cat "$tmp/farm.err")"
    fpid=
    st=$(tail -1 "$tmp/fronts")
    echo "# fronts: $st"
    grep -q '"conns": 200, "requests": 601, "forwarded": 201, .*"waits": 200,' <<<"$st" ||
        fail "the fronts' counts: $st"
    up=$(sed -n 's/.*"upstream_waits": \([0-9]*\).*/\1/p' <<<"$st")
    [ "${up:-0}" -ge 25 ] && [ "$up" -le 50 ] ||
        fail "upstream WAITs for 200 ranks through 25 fronts: $up"
fi

out=$("$bench" --port-file "$tmp/port" --pid "$pid" --settle 0.2 -c 200 -t 20 memory) ||
    fail "memory: $out"
echo "# $out"
kill -0 "$pid" 2>/dev/null || fail "rdzvd died"

if [ -n "$build" ] && [ -x /usr/bin/python3 ]; then
    out=$("$(dirname "$0")/recovery/run-recovery-bench.sh" "$build" --trials 1 --no-torchrun \
        --ckpt-every 10 --cap 20 2>"$tmp/recovery.err") || {
        sed 's/^/# recovery: /' "$tmp/recovery.err"
        fail "recovery benchmark: $out"
    }
    echo "$out" | sed 's/^/# /'
    grep -q '^| SIGKILL (crash) | rdzv-train, `--recovery restart`[^|]*| [0-9]' <<<"$out" ||
        fail "recovery benchmark: no figure for the restart row"
fi
echo "ok"
