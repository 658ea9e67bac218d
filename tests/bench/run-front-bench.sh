#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-front-bench.sh: a start of N ranks through the nodes' store fronts and directly. Each rank
# connects, ADDs to a counter and WAITs on a key, as PyTorch's init does
# (rdzv-bench barrier); through the fronts, the ranks are nodes of --per-node workers, each node's
# connecting to its own front (rdzv-front-farm: the agent's front, many nodes' to a process), and
# the fronts to rdzvd; directly, every rank to rdzvd; with --python, every rank to PyTorch's own
# server too. Each size's arrangements run in turn, --rounds times. Prints a markdown table on
# stdout, progress on stderr. Builds nothing.
set -u

usage() {
    cat <<EOF2
Usage: run-front-bench.sh [OPTIONS] [BUILD_DIR]
  --ranks LIST     sizes, ranks in all (default "8000 16000")
  --per-node K     ranks a node, each node one front (default 8)
  --rounds N       each size's arrangements N times in turn (default 3)
  --procs P        client processes (default: enough for the open-file limit, at least 2)
  --farms F        front processes at least (default: the CPUs; more when the open-file
                   limit asks)
  --only LIST      comma-separated subset of: direct,fronts,pytorch (default direct,fronts;
                   pytorch with --python)
  --python PATH    interpreter with torch: its TCPStore server, ranks connecting directly
  --cap SEC        a barrier's cap (default 120)
  --rdzvd-args S   more options for rdzvd (words), e.g. "--max-handshaking 9968"
  --somaxconn N    raise net.core.somaxconn to N for the run (root; put back at exit): past
                   it, a storm's connections wait for SYN and data retransmissions, seconds
  --keep           keep the logs and raw results
An arrangement that needs more descriptors than a process may open here (the store: one a rank
directly, one a front through them) is not run, and the table says so.
EOF2
}

ranks_list="8000 16000"
per_node=8
rounds=3
procs=
farms=$(nproc)
only=
python=
rdzvd_args=
somaxconn=
old_somaxconn=
cap=120
keep=0
build=./build
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) ranks_list=${2:?--ranks needs a list}; shift ;;
    --per-node) per_node=${2:?--per-node needs a number}; shift ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --procs) procs=${2:?--procs needs a number}; shift ;;
    --farms) farms=${2:?--farms needs a number}; shift ;;
    --only) only=${2:?--only needs a list}; shift ;;
    --python) python=${2:?--python needs a path}; shift ;;
    --rdzvd-args) rdzvd_args=${2:?--rdzvd-args needs options}; shift ;;
    --somaxconn) somaxconn=${2:?--somaxconn needs a value}; shift ;;
    --cap) cap=${2:?--cap needs seconds}; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run-front-bench.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) build=$1 ;;
    esac
    shift
done
ranks_list=${ranks_list//,/ }
for n in $ranks_list $per_node $rounds $farms $cap ${procs:-1}; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
        echo "run-front-bench.sh: '$n' is not a positive number" >&2
        exit 2
    fi
done
[ -n "$only" ] || only=direct,fronts${python:+,pytorch}
srcdir=$(cd "$(dirname "$0")" && pwd)
rdzvd=$build/daemon/rdzvd
bench=$build/tests/bench/rdzv-bench
farm=$build/tests/bench/rdzv-front-farm
for f in "$rdzvd" "$bench" "$farm"; do
    if [ ! -x "$f" ]; then
        echo "run-front-bench.sh: $f not found: build first" \
            "(meson setup $build && ninja -C $build)" >&2
        exit 2
    fi
done
want() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }
log() { echo "run-front-bench: $*" >&2; }
kv() { sed -n "s/^\(.* \)\{0,1\}$2=\([^ ]*\).*/\2/p" <<<"$1"; }
jv() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" <<<"$1"; }
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
if [ "$nofile" -lt 2048 ]; then
    echo "run-front-bench.sh: the open-file limit is $nofile: 2048 or more, please" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-front-bench.XXXXXX")
declare -A res
spids=()
farm_pids=()
feeds=()
farms_ok=1

# stop_farms: their standard input closed, each prints its counts and exits; farms_ok=0 when
# one did not exit 0 (a store connection lost: said in farm.log).
stop_farms() {
    local p
    farms_ok=1
    for p in "${feeds[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${farm_pids[@]}"; do wait "$p" 2>/dev/null || farms_ok=0; done
    feeds=()
    farm_pids=()
}
cleanup() {
    local p
    stop_farms
    for p in "${spids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    [ -z "$old_somaxconn" ] || sysctl -qw net.core.somaxconn="$old_somaxconn" 2>/dev/null
    if [ "$keep" = 1 ]; then log "logs and raw results kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: a server on port 0; its port in $work/NAME.port; its pid in spid_NAME.
start() {
    local name=$1 n=0
    shift
    rm -f "$work/$name.port"
    "$@" >>"$work/$name.log" 2>&1 &
    spids+=($!)
    eval "spid_$name=$!"
    while [ ! -s "$work/$name.port" ]; do
        if ! kill -0 "$!" 2>/dev/null || [ $n -ge 600 ]; then
            log "$name did not start:"; sed 's/^/  /' "$work/$name.log" >&2
            return 1
        fi
        sleep 0.1; n=$((n + 1))
    done
}

if [ -n "$somaxconn" ]; then
    old_somaxconn=$(cat /proc/sys/net/core/somaxconn)
    sysctl -qw net.core.somaxconn="$somaxconn" 2>/dev/null ||
        { log "cannot raise net.core.somaxconn; it stays $old_somaxconn"; old_somaxconn=; }
fi
torch_version=
if want pytorch; then
    torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
    [ -n "$torch_version" ] || { log "no torch under ${python:-(no --python)}"; exit 2; }
fi
# Every client speaks the modern numbering (VALIDATE and PING first, as PyTorch >= 2.5's): the
# fronts take every numbering, and PyTorch >= 2.2's server answers nothing else; to an older
# PyTorch's server, its own (1.x's: it closes a connection that opens with VALIDATE).
dialect=modern
pt_dialect=modern
IFS=. read -r tmaj tmin _ <<<"${torch_version:-2.2}"
[ "$tmaj" -gt 2 ] 2>/dev/null || { [ "$tmaj" = 2 ] && [ "${tmin:-0}" -ge 2 ]; } || pt_dialect=2.0
# shellcheck disable=SC2086 # the options are words
start rdzvd "$rdzvd" --port 0 --port-file "$work/rdzvd.port" -l "${RDZVD_LOG_LEVEL:-warn}" \
    $rdzvd_args || exit 1
if want pytorch; then
    start pytorch "$python" "$srcdir/pytorch-server.py" --port-file "$work/pytorch.port" || exit 1
fi
backend=$(sed -n 's/.*TCPStore (\([a-z]*\) backend).*/\1/p' "$work/pytorch.log" 2>/dev/null |
    head -1)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
tick=$(getconf CLK_TCK)

# barrier ARR N: one barrier of N ranks in arrangement ARR; sets res[ARR:N:*].
barrier() {
    local arr=$1 n=$2 p=$procs port_args=() idle=() out nodes per farm_n i start=0 f0 f1 s d
    d=$dialect
    [ "$arr" = pytorch ] && d=$pt_dialect
    [ -n "$p" ] || p=$(( (n + nofile - 1025) / (nofile - 1024) ))
    [ "$p" -ge 2 ] || p=2
    case "$arr" in
    direct | pytorch)
        if [ $((n + 64)) -gt "$nofile" ]; then
            res[$arr:$n]="n/a"
            res[$arr:$n:why]="$n connections to one process: over its $nofile files"
            return
        fi
        port_args=(--port-file "$work/${arr/direct/rdzvd}.port")
        # Each node's ranks from an address of their own, as from their own host, up to 250
        # (127.0.0.2 ...): from one address, each connect() searches the ports in use to the
        # one destination, and the clients' kernel time, not the server, is what is measured
        # (16,000 ranks: 5.0 s from one address, 2.0 s from 250).
        nodes=$(( (n + per_node - 1) / per_node ))
        port_args+=(--hosts $(( nodes < 250 ? nodes : 250 )))
        s=${arr/direct/rdzvd}
        eval "idle=(--pid \$spid_$s)"
        ;;
    fronts)
        nodes=$(( (n + per_node - 1) / per_node ))
        if [ $((nodes + 64)) -gt "$nofile" ]; then
            res[$arr:$n]="n/a"
            res[$arr:$n:why]="$nodes fronts are $nodes store connections: over its $nofile files"
            return
        fi
        per=$(( (nofile - 64) / (per_node + 2) ))
        farm_n=$(( (nodes + per - 1) / per ))
        [ "$farm_n" -ge "$farms" ] || farm_n=$farms
        [ "$farm_n" -le "$nodes" ] || farm_n=$nodes
        : >"$work/fronts"
        for i in $(seq 0 $((farm_n - 1))); do
            local share=$(( nodes / farm_n + (i < nodes % farm_n ? 1 : 0) ))
            : >"$work/farm$i.out" # there before the farm's shell opens it (after its feed)
            mkfifo "$work/feed$i" 2>/dev/null
            sleep 100000 >"$work/feed$i" &
            feeds+=($!)
            # each front's store connection to an address of the store's (127.0.0.1-250), as
            # from a host of its own (rdzv-front-farm's SPREAD)
            "$farm" 127.0.0.1 "$(cat "$work/rdzvd.port")" "$share" "$per_node" 250 \
                <"$work/feed$i" >"$work/farm$i.out" 2>>"$work/farm.log" &
            farm_pids+=($!)
        done
        for i in $(seq 0 $((farm_n - 1))); do
            local share=$(( nodes / farm_n + (i < nodes % farm_n ? 1 : 0) )) k=0 got
            # whole lines only (a port cut by a buffer's end is not one yet)
            while got=$(wc -l <"$work/farm$i.out") && [ "${got:-0}" -lt "$share" ]; do
                if ! kill -0 "${farm_pids[$i]}" 2>/dev/null || [ $k -ge 600 ]; then
                    log "front farm $i did not start:"; sed 's/^/  /' "$work/farm.log" >&2
                    stop_farms
                    rm -f "$work"/farm*.out "$work"/feed*
                    res[$arr:$n:all]+="FAIL "
                    [ -n "${res[$arr:$n]:-}" ] || res[$arr:$n]=FAIL
                    return
                fi
                sleep 0.05; k=$((k + 1))
            done
            head -n "$share" "$work/farm$i.out" >>"$work/fronts"
        done
        port_args=(--fronts "$work/fronts" --per-node "$per_node")
        idle=(--pid "$spid_rdzvd")
        for i in "${farm_pids[@]:0:31}"; do idle+=(--idle-pid "$i"); done
        f0=0
        for i in "${farm_pids[@]}"; do f0=$((f0 + $(cpu_ticks "$i"))); done
        ;;
    esac
    out=$(timeout -k 5 $((cap + 60)) "$bench" --dialect "$d" "${port_args[@]}" "${idle[@]}" \
        -c "$n" -t "$cap" --procs "$p" barrier 2>>"$work/bench.log")
    echo "$arr $n -> $out" >>"$work/raw.txt"
    log "$arr $n: ${out:-rdzv-bench failed}"
    if [ "$arr" = fronts ]; then
        f1=0
        for i in "${farm_pids[@]}"; do f1=$((f1 + $(cpu_ticks "$i"))); done
        res[$arr:$n:fcpu]+="$(awk -v a="$f0" -v b="$f1" -v t="$tick" \
            'BEGIN { printf "%.2f", (b - a) / t }') "
        stop_farms
        local st fw=0 rq=0 b c
        for i in "$work"/farm*.out; do
            st=$(tail -1 "$i")
            b=$(jv "$st" forwarded); c=$(jv "$st" requests)
            if [ -z "$b" ] || [ -z "$c" ]; then
                log "a front farm said no counts ($i): its log:"; sed 's/^/  /' "$work/farm.log" >&2
                farms_ok=0
                continue
            fi
            fw=$((fw + b)); rq=$((rq + c))
        done
        rm -f "$work"/farm*.out "$work"/feed*
        if [ "$farms_ok" != 1 ]; then # a front lost its store, or died: the round failed
            out="${out/ ok=1 / ok=0 }"
            log "fronts $n: a front farm failed (farm.log); the round counts as failed"
        fi
        res[$arr:$n:conns]=$nodes # one a front: its waits are on it (TAG_WAIT)
        res[$arr:$n:fwd]="$fw of $rq"
    else
        res[$arr:$n:conns]=$n
    fi
    if [ "$(kv "$out" ok)" = 1 ]; then
        s=$(kv "$out" seconds)
        res[$arr:$n:all]+="$s "
        res[$arr:$n:cpu]+="$(kv "$out" server_cpu_s) "
        if [ -z "${res[$arr:$n]:-}" ] ||
            awk -v a="$s" -v b="${res[$arr:$n]}" 'BEGIN { exit !(a < b) }'; then
            res[$arr:$n]=$s
        fi
    else
        res[$arr:$n:all]+="FAIL "
        [ -n "${res[$arr:$n]:-}" ] || res[$arr:$n]=FAIL
    fi
}

arrs=()
for a in direct fronts pytorch; do want "$a" && arrs+=("$a"); done
log "build $build; $(nproc) CPUs; open files $nofile;" \
    "somaxconn $(cat /proc/sys/net/core/somaxconn); arrangements: ${arrs[*]};" \
    "rdzvd ${rdzvd_args:-with its defaults}"
for n in $ranks_list; do
    for r in $(seq "$rounds"); do
        for a in "${arrs[@]}"; do
            [ "${res[$a:$n]:-}" != n/a ] || continue
            barrier "$a" "$n"
        done
    done
done

ratio() {
    awk -v a="$1" -v b="$2" \
        'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'
}
# lo LIST: the least number of a list ("-" when none).
lo() {
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && (m == "" || $i + 0 < m + 0)) m = $i }
         END { print (m == "" ? "-" : m) }' <<<"$1"
}
echo "Start barrier of N ranks (connect, ADD, WAIT), $per_node ranks a node; $(nproc) CPUs;" \
    "best of $rounds; seconds (CPU: the least of the rounds); somaxconn" \
    "$(cat /proc/sys/net/core/somaxconn); rdzvd ${rdzvd_args:-as by default}"
echo
printf '| ranks | rdzvd directly | through %s-rank fronts | fronts/direct |' "$per_node"
want pytorch &&
    printf ' PyTorch %s (%s) directly | fronts/PyTorch |' "$torch_version" "${backend:-?}"
echo ' store connections directly / fronts | rdzvd CPU directly / fronts (s) | fronts CPU (s) |'
printf '|---|---|---|---|'; want pytorch && printf -- '---|---|'; echo '---|---|---|'
for n in $ranks_list; do
    printf '| %s | %s | %s | %s |' "$n" "${res[direct:$n]:--}" "${res[fronts:$n]:--}" \
        "$(ratio "${res[fronts:$n]:-}" "${res[direct:$n]:-}")"
    want pytorch && printf ' %s | %s |' "${res[pytorch:$n]:--}" \
        "$(ratio "${res[fronts:$n]:-}" "${res[pytorch:$n]:-}")"
    printf ' %s / %s | %s / %s | %s |\n' "${res[direct:$n:conns]:--}" \
        "${res[fronts:$n:conns]:--}" "$(lo "${res[direct:$n:cpu]:-}")" \
        "$(lo "${res[fronts:$n:cpu]:-}")" "$(lo "${res[fronts:$n:fcpu]:-}")"
done
echo
for n in $ranks_list; do
    for a in "${arrs[@]}"; do
        [ -z "${res[$a:$n:why]:-}" ] || echo "- $a at $n: not run (${res[$a:$n:why]})"
        [ -z "${res[$a:$n:all]:-}" ] || echo "- $a at $n, every round (s): ${res[$a:$n:all]% }"
    done
    [ -z "${res[fronts:$n:fwd]:-}" ] || echo "- fronts at $n: requests forwarded to the" \
        "store, of the workers': ${res[fronts:$n:fwd]} (last round)"
done
# Non-zero when an arrangement that was run failed a round.
! grep -q FAIL <<<"${res[*]}"
