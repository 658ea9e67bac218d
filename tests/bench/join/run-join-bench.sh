#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-join-bench.sh: rdzv-join-bench at 100 (warm-up), 1000 and 10000 agents, each against a
# fresh rdzvd, then the resident memory of rdzv-agent and of torchrun's agent. Builds nothing.
set -u

usage() {
    cat <<EOF
Usage: run-join-bench.sh [OPTIONS] [BUILD_DIR]
1. For each size, starts a fresh BUILD_DIR/daemon/rdzvd (--port 0 -l warn), runs
   rdzv-join-bench against it (one job, min = max = N) and stops it.
2. Measures the VmRSS of rdzv-agent (--nnodes 1, --nproc 1 and 8, worker: sleep 3) and of
   torchrun's agent process (python3 -m torch.distributed.run --standalone, a script that
   sleeps 3 s) while their workers run.
Prints two markdown tables on stdout, progress on stderr. BUILD_DIR defaults to ./build.

  --sizes LIST     agents per run (default "100 1000 10000"; the first is a warm-up)
  --repeat R       run each size R times, each on a fresh rdzvd, keep the fastest (default 1)
  --lose K         then, at the largest size, R runs in which K agents drop their connections
                   once the round is in (nodes lost; the job's min is N - K): the time from
                   the first EVENT restart to the next generation's last ROUND (default 1; 0:
                   skip)
  --python PATH    interpreter with torch for the torchrun figure (default /usr/bin/python3)
  --no-torchrun    skip the torchrun figure
  --keep           keep the logs and raw results (their directory is printed)
  -h, --help       this help
EOF
}

sizes="100 1000 10000"
repeat=1
lose=1
python=/usr/bin/python3
torchrun=1
keep=0
build=./build
while [ $# -gt 0 ]; do
    case "$1" in
    --sizes) sizes=${2:?--sizes needs a list}; shift ;;
    --repeat) repeat=${2:?--repeat needs a value}; shift ;;
    --lose) lose=${2:?--lose needs a value}; shift ;;
    --python) python=${2:?--python needs a path}; shift ;;
    --no-torchrun) torchrun=0 ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run-join-bench.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) build=$1 ;;
    esac
    shift
done
if ! [[ "$lose" =~ ^[0-9]+$ ]]; then
    echo "run-join-bench.sh: bad --lose '$lose'" >&2
    exit 2
fi
if ! [[ "$repeat" =~ ^[1-9][0-9]*$ ]]; then
    echo "run-join-bench.sh: bad --repeat '$repeat'" >&2
    exit 2
fi
sizes=${sizes//,/ }
read -r -a size_list <<<"$sizes"
for n in "${size_list[@]}"; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
        echo "run-join-bench.sh: bad size '$n'" >&2
        exit 2
    fi
done

rdzvd=$build/daemon/rdzvd
bench=$build/tests/bench/join/rdzv-join-bench
agent=$build/agent/rdzv-agent
for f in "$rdzvd" "$bench" "$agent"; do
    if [ ! -x "$f" ]; then
        echo "run-join-bench.sh: $f not found:" \
            "build first (meson setup $build && ninja -C $build)" >&2
        exit 2
    fi
done
if command -v jq >/dev/null; then
    jget() { jq -r "$2 // \"\"" "$1"; }
elif [ -x "$python" ]; then
    jget() {
        "$python" -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].lstrip(".").split("."):
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"
    }
else
    echo "run-join-bench.sh: needs jq or python3 to read the bench's JSON" >&2
    exit 2
fi

tmp=$(mktemp -d /tmp/rdzv-join-bench.XXXXXX)
pids=() # every process this script started and may still have to stop

# The direct children of pid (the workers of an agent).
children_of() {
    cat "/proc/$1/task/$1/children" 2>/dev/null
}

stop_pid() {
    local pid=$1 c
    kill -0 "$pid" 2>/dev/null || return 0
    for c in $(children_of "$pid"); do
        kill -TERM "$c" 2>/dev/null
    done
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    forget_pid "$pid"
}

# A reaped pid may be reused by anyone: never signal it again.
forget_pid() {
    local i
    for i in "${!pids[@]}"; do
        [ "${pids[$i]}" = "$1" ] && unset 'pids[i]'
    done
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${pids[@]}"; do
        stop_pid "$p"
    done
    if [ "$keep" = 1 ]; then
        echo "run-join-bench.sh: logs and raw results kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start a fresh rdzvd; sets dpid and dport.
start_rdzvd() {
    local pf=$tmp/rdzvd.port
    rm -f "$pf"
    "$rdzvd" --port 0 --port-file "$pf" -l warn >>"$tmp/rdzvd.log" 2>&1 &
    dpid=$!
    pids+=("$dpid")
    for _ in $(seq 200); do
        [ -s "$pf" ] && break
        kill -0 "$dpid" 2>/dev/null || break
        sleep 0.05
    done
    if [ ! -s "$pf" ]; then
        echo "run-join-bench.sh: rdzvd did not start (see below)" >&2
        tail -5 "$tmp/rdzvd.log" >&2
        exit 1
    fi
    dport=$(cat "$pf")
}

stop_rdzvd() {
    stop_pid "$dpid"
}

load() {
    cut -d' ' -f1 /proc/loadavg
}

mib() {
    [ -n "$1" ] && awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }' || echo "-"
}

echo "run-join-bench.sh: $(uname -n), $(nproc) CPUs, $(uptime | sed 's/.*load/load/')" >&2

# 1. Round formation ----------------------------------------------------------------------------
rows=()
worst=0 # 1 when any run failed
best_10k=
for n in "${size_list[@]}"; do
    best=
    for r in $(seq "$repeat"); do
        out=$tmp/join-$n-$r.json
        start_rdzvd
        l=$(load)
        echo "run-join-bench.sh: N=$n run $r/$repeat (rdzvd pid $dpid, port $dport, load $l)" >&2
        "$bench" --endpoint "127.0.0.1:$dport" -n "$n" --pid "$dpid" --json >"$out" \
            2>>"$tmp/bench.log"
        rc=$?
        stop_rdzvd
        if [ "$rc" != 0 ] || [ "$(jget "$out" .ok)" != true ]; then
            echo "run-join-bench.sh: N=$n failed (exit $rc): $(jget "$out" .error)" >&2
            worst=1
            continue
        fi
        key=$(jget "$out" .last_join_to_round_s)
        if [ -z "$best" ] || awk -v a="$key" -v b="$(jget "$best" .last_join_to_round_s)" \
            'BEGIN { exit !(a < b) }'; then
            best=$out
            best_load=$l
        fi
    done
    if [ -z "$best" ]; then
        rows+=("| $n | failed | | | | | | | $l |")
        continue
    fi
    note=
    [ "$n" = "${size_list[0]}" ] && [ "${#size_list[@]}" -gt 1 ] && note=" (warm-up)"
    before=$(jget "$best" .rss_kb.before)
    after=$(jget "$best" .rss_kb.round)
    rows+=("$(printf '| %s%s | %.3f s | %.3f s | %.3f s | **%.3f s** | %s | %s | %.2f kB | %s |' \
        "$n" "$note" "$(jget "$best" .connect_s)" "$(jget "$best" .join_send_s)" \
        "$(jget "$best" .last_join_to_joined_s)" "$(jget "$best" .last_join_to_round_s)" \
        "$(mib "$before")" "$(mib "$after")" "$(jget "$best" .rss_per_agent_kb)" "$best_load")")
    [ "$n" = 10000 ] && best_10k=$(jget "$best" .last_join_to_round_s)
done

echo "### rdzvd: N agents join one job (min = max = N), one TCP connection each"
echo
[ "$repeat" -gt 1 ] && echo "Best of $repeat runs, each on a fresh rdzvd." && echo
echo "| N | connect all (TCP + HELLO) | first -> last JOIN sent | last JOIN -> all JOINED" \
    "| last JOIN -> round complete | rdzvd RSS before | rdzvd RSS after round | RSS per agent" \
    "| load (1 min) |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
if [ -n "$best_10k" ]; then
    if awk -v t="$best_10k" 'BEGIN { exit !(t < 1.0) }'; then
        echo "Target (< 1 s from last join to round complete at 10,000 agents):" \
            "met ($(printf "%.3f" "$best_10k") s)."
    else
        echo "Target (< 1 s from last join to round complete at 10,000 agents):" \
            "NOT met ($(printf "%.3f" "$best_10k") s)."
    fi
    echo
fi

# 1b. Recovery: K nodes lost at the largest size --------------------------------------------------
if [ "$lose" -gt 0 ]; then
    n=${size_list[${#size_list[@]} - 1]}
    runs=
    for r in $(seq "$repeat"); do
        out=$tmp/lose-$n-$r.json
        start_rdzvd
        l=$(load)
        echo "run-join-bench.sh: N=$n, $lose lost, run $r/$repeat (load $l)" >&2
        "$bench" --endpoint "127.0.0.1:$dport" -n "$n" --lose "$lose" --json >"$out" \
            2>>"$tmp/bench.log"
        rc=$?
        stop_rdzvd
        if [ "$rc" != 0 ] || [ "$(jget "$out" .ok)" != true ]; then
            echo "run-join-bench.sh: N=$n, $lose lost: failed (exit $rc): $(jget "$out" .error)" >&2
            worst=1
            runs="$runs${runs:+; }failed"
            continue
        fi
        runs="$runs${runs:+; }$(printf '%.3f s after %.3f s (load %s)' \
            "$(jget "$out" .event_to_round_s)" "$(jget "$out" .lost_to_event_s)" "$l")"
    done
    echo "### rdzvd: $lose of $n agents lost once the round is in; the rest re-form"
    echo
    echo "Each run on a fresh rdzvd: the first EVENT restart -> the next generation's last ROUND" \
        "at the $((n - lose)) others (each answers READY at once), after the loss -> the first" \
        "EVENT restart (a dropped connection is seen at once): $runs."
    echo
fi

# 2. Agent resident memory ---------------------------------------------------------------------
# Start "$@" in the background, wait until it has `want` children matching `match` (a pattern on
# their command line), let it settle, then read its own VmRSS. Sets rss_kb, anon_kb, hwm_kb and
# agent_rc.
measure_agent() {
    local want=$1 match=$2 log=$3 pid c n
    shift 3
    rss_kb='' anon_kb='' hwm_kb='' agent_rc=''
    "$@" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 600); do
        kill -0 "$pid" 2>/dev/null || break
        n=0
        for c in $(children_of "$pid"); do
            tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q -- "$match" && n=$((n + 1))
        done
        [ "$n" -ge "$want" ] && break
        sleep 0.1
    done
    if [ "${n:-0}" -ge "$want" ]; then
        sleep 0.5 # let it finish its own start-up work after the spawns
        rss_kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
        anon_kb=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
        hwm_kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    else
        echo "run-join-bench.sh: $1 never had its $want worker(s) running; see $log" >&2
    fi
    wait "$pid"
    agent_rc=$?
    forget_pid "$pid"
}

arows=()
# The default (--nccl auto) node-rank-0 agent dlopens libnccl for ncclGetUniqueId and keeps it
# loaded (the bootstrap root lives in it); --nccl off shows the agent without it.
for v in "1 auto" "8 auto" "1 off"; do
    read -r np nccl <<<"$v"
    start_rdzvd
    l=$(load)
    echo "run-join-bench.sh: rdzv-agent --nproc $np --nccl $nccl (load $l)" >&2
    measure_agent "$np" "^sleep 3" "$tmp/agent-$np-$nccl.log" \
        "$agent" --endpoint "127.0.0.1:$dport" --rdzv-id rss --nnodes 1 --nproc "$np" \
        --nccl "$nccl" -- sleep 3
    stop_rdzvd
    [ "$agent_rc" = 0 ] || { echo "run-join-bench.sh: rdzv-agent exited $agent_rc" >&2; worst=1; }
    arows+=("| rdzv-agent --nccl $nccl | $np | $(mib "$rss_kb") | $(mib "$anon_kb") |"\
" $(mib "$hwm_kb") | $agent_rc | $l |")
    [ "$v" = "1 auto" ] && agent_rss=$rss_kb
done

torch_rss=
if [ "$torchrun" = 1 ]; then
    if ! "$python" -c 'import torch' 2>/dev/null; then
        echo "run-join-bench.sh: $python has no torch: torchrun skipped" >&2
    else
        tver=$("$python" -c 'import torch, sys
print(torch.__version__, "Python %d.%d" % sys.version_info[:2])')
        script=$tmp/sleep3.py
        printf 'import time\ntime.sleep(3)\n' >"$script"
        for np in 1 8; do
            # --standalone always takes localhost:29400; if another job holds it, use the same
            # c10d rendezvous on a free port rather than join that job's store.
            if [ -n "$(ss -Hltn 'sport = :29400' 2>/dev/null)" ]; then
                port=$("$python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
                rdzv=(--nnodes 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port"
                      --rdzv_id rss)
            else
                rdzv=(--standalone)
            fi
            l=$(load)
            echo "run-join-bench.sh: torchrun ${rdzv[*]} --nproc_per_node $np (load $l)" >&2
            measure_agent "$np" "$script" "$tmp/torchrun-$np.log" \
                "$python" -m torch.distributed.run "${rdzv[@]}" --nproc_per_node "$np" \
                --redirects 1 --tee 1 "$script"
            if [ "$agent_rc" != 0 ]; then
                echo "run-join-bench.sh: torchrun exited $agent_rc" >&2
                worst=1
            fi
            arows+=("| torchrun ($tver) | $np | $(mib "$rss_kb") | $(mib "$anon_kb") |"\
" $(mib "$hwm_kb") | $agent_rc | $l |")
            [ "$np" = 1 ] && torch_rss=$rss_kb
        done
    fi
fi

echo "### Agent process resident memory (VmRSS of the agent itself, workers running)"
echo
echo "| agent | workers | RSS (VmRSS) | of which anonymous (RssAnon) | peak (VmHWM) | exit" \
    "| load (1 min) |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${arows[@]}"
echo
if [ -n "${agent_rss:-}" ]; then
    if [ "$agent_rss" -lt 5120 ]; then
        echo -n "Target (rdzv-agent < 5 MiB VmRSS, default --nccl auto, 1 worker):" \
            "met ($(mib "$agent_rss"))"
    else
        echo -n "Target (rdzv-agent < 5 MiB VmRSS, default --nccl auto, 1 worker):" \
            "NOT met ($(mib "$agent_rss"))"
    fi
    if [ -n "$torch_rss" ]; then
        awk -v a="$agent_rss" -v t="$torch_rss" \
            'BEGIN { printf "; torchrun uses %.0fx as much.\n", t / a }'
    else
        echo "."
    fi
fi
echo
echo "Machine: $(nproc) CPUs; $(uptime | sed 's/.*load/load/') at the end."
exit "$worst"
