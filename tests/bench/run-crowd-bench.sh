#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-crowd-bench.sh: a crowd from one address (tests/bench/crowd.py: one process opens N
# connections at once, then sends each one's ADD of the barrier key) against rdzvd with its
# default limits and against the ceiling (null-responder, a do-nothing epoll server), in turn,
# --rounds times. Prints a markdown table on stdout (each round's time to the last reply, the
# part of it after the last connect() in brackets, and rdzvd's over the ceiling's) and the
# medians, progress on stderr. Exits 1 when a crowd did not complete or rdzvd's median is over
# --max-ratio times the ceiling's. Builds nothing. Another
# process's thousands of connections to 127.0.0.1 at the same time (another test or benchmark)
# leave the crowd's connects short of ports: they then take longer than --handshake-timeout.
set -u

usage() {
    cat <<EOF2
Usage: run-crowd-bench.sh [OPTIONS] [BUILD_DIR]
  --conns N        connections of the crowd (default 16000)
  --rounds N       rdzvd and the ceiling N times each, in turn (default 3)
  --rdzvd-args S   more options for rdzvd (words)
  --max-ratio R    exit 1 when rdzvd's median time is over R times the ceiling's (default 1.5)
EOF2
}

conns=16000
rounds=3
rdzvd_args=
max_ratio=1.5
build=./build
while [ $# -gt 0 ]; do
    case "$1" in
    --conns) conns=${2:?--conns needs a number}; shift ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --rdzvd-args) rdzvd_args=${2:?--rdzvd-args needs options}; shift ;;
    --max-ratio) max_ratio=${2:?--max-ratio needs a number}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) build=$1 ;;
    esac
    shift
done
srcdir=$(cd "$(dirname "$0")" && pwd)
rdzvd=$build/daemon/rdzvd
nullresp=$build/tests/bench/null-responder
for f in "$rdzvd" "$nullresp"; do
    [ -x "$f" ] || { echo "run-crowd-bench.sh: $f is not built" >&2; exit 2; }
done
work=$(mktemp -d /tmp/rdzv-crowd-bench.XXXXXX)
pid=
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# run SERVER ROUND: start it, run one crowd against it, stop it; prints the crowd's JSON line.
run() {
    local pf=$work/$1.port n=0
    rm -f "$pf"
    if [ "$1" = rdzvd ]; then
        # shellcheck disable=SC2086
        "$rdzvd" --port 0 --port-file "$pf" -l warn $rdzvd_args >"$work/$1.$2.log" 2>&1 &
    else
        "$nullresp" --port-file "$pf" >"$work/$1.$2.log" 2>&1 &
    fi
    pid=$!
    while [ ! -s "$pf" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    python3 "$srcdir/crowd.py" --port "$(cat "$pf")" --conns "$conns" --timeout 120
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
    [ "$1" = null ] || grep -m3 "closing connection" "$work/$1.$2.log" >&2
}

field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

failed=0
rows=()
times=("" "")
for r in $(seq 1 "$rounds"); do
    line=()
    tails=()
    for s in rdzvd null; do
        out=$(run "$s" "$r")
        echo "round $r, $s: $out" >&2
        if [ "$(field "$out" ok)" != "$conns" ]; then
            failed=1
            line+=("incomplete ($(field "$out" lost) lost, opened in $(printf '%.1f' \
                "$(field "$out" opened_s)") s)")
        else
            line+=("$(printf '%.2f' "$(field "$out" done_s)")")
            tails+=("$(python3 -c 'import json,sys; r = json.loads(sys.argv[1])
print("%.2f" % (r["done_s"] - r["opened_s"]))' "$out")")
        fi
    done
    ratio=$(python3 -c 'import sys
try: print("%.2fx" % (float(sys.argv[1]) / float(sys.argv[2])))
except ValueError: print("-")' "${line[0]}" "${line[1]}")
    rows+=("| $r | ${line[0]} (${tails[0]:--}) | ${line[1]} (${tails[1]:--}) | $ratio |")
    times[0]+=" ${line[0]}"
    times[1]+=" ${line[1]}"
    sleep 1
done
echo "| round | rdzvd, s (after the last connect) | ceiling (null-responder), s (after it) |" \
    "rdzvd / ceiling |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
# The medians of the completed rounds, and their ratio against --max-ratio.
python3 - "$max_ratio" "${times[0]}" "${times[1]}" <<'EOF2' || failed=1
import statistics, sys
med = []
for col in sys.argv[2:]:
    vals = [float(v) for v in col.split() if v.replace(".", "", 1).isdigit()]
    med.append(statistics.median(vals) if vals else None)
if None in med:
    sys.exit("no completed round to compare")
ratio = med[0] / med[1]
print("\nmedian: rdzvd %.2f s, ceiling %.2f s, rdzvd / ceiling %.2fx (at most %sx)"
      % (med[0], med[1], ratio, sys.argv[1]))
sys.exit(ratio > float(sys.argv[1]))
EOF2
exit $failed
