#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-bench.sh: run rdzv-bench against rdzvd, PyTorch's own TCPStore server (1.13's classic one,
# or 2.4+'s libuv one under --python) and the null responder side by side, then print a markdown
# table. Builds nothing.
set -u

usage() {
    cat <<EOF
Usage: run-bench.sh [OPTIONS] [BUILD_DIR]
Runs every rdzv-bench mode against three servers in one run (idle memory on a fresh instance
of each; then all three up side by side, each size run against each server in turn):
rdzvd (BUILD_DIR/daemon/rdzvd -l warn), PyTorch's own TCPStore server (pytorch-server.py under
--python: the classic server up to 2.3, the libuv one from 2.4, named in the table) and the null
responder (the ceiling of client + machine). BUILD_DIR defaults to ./build and must already be
built. Prints a markdown table on stdout, progress on stderr.

  --quick            smoke run: one round, 1 s of throughput, barriers 1k and 4k, 2000 idle conns
  --rounds N         repeat throughput and barriers N times, keep the best (default 3; a
                     barrier that took over a quarter of its cap is not repeated)
  --modes LIST       comma-separated subset of: memory,throughput,barrier,storm (default all
                     but storm)
  --barriers LIST    barrier sizes, e.g. "16000" (default "1000 4000 8000 16000")
  --conns LIST       throughput connection counts, e.g. "50,1000" (default "1 50 1000")
  --storm-hosts LIST storm: hosts per run (default "2 4 8"); each host's ranks connect from
                     its own address, 127.0.0.2, .3, ..., and each rank is silent --silence
                     after its connect before its first request (PyTorch's, while it imports);
                     every run host after host (--stagger apart) and interleaved, and beside it
                     one host of as many ranks
  --storm-ranks LIST storm: ranks per host (default "1000 2000")
  --stagger SEC      storm: between two hosts' starts (default 0.1)
  --silence SEC      storm: a rank's silence after its connect (default 0.5)
  --procs P          barriers and storms: the ranks spread over P client processes started
                     together (default 1); on a machine of many CPUs one client process can be
                     what a barrier of 16,000 measures
  --rdzvd PATH       the rdzvd to run (default BUILD_DIR/daemon/rdzvd; e.g. an older build's)
  --somaxconn N      raise net.core.somaxconn to N for the run (needs root; restored at exit)
  --python PATH      interpreter with torch (default /usr/bin/python3)
  --dialect D        what every client speaks: 2.0 (PyTorch 1.x numbering), 2.1, or modern
                     (VALIDATE and PING first, as PyTorch >= 2.5's clients). Default: modern
                     when --python's torch is 2.2 or later (its server answers nothing else),
                     else 2.0
  --only LIST        comma-separated subset of: rdzvd,pytorch,null
  --keep             keep the logs and raw results (their directory is printed)
  -h, --help         show this help
EOF
}

quick=0
rounds=
modes=memory,throughput,barrier
barriers_opt=
conns_opt=
somaxconn=
python=/usr/bin/python3
only=rdzvd,pytorch,null
keep=0
build=./build
storm_hosts="2 4 8"
storm_ranks="1000 2000"
stagger=0.1
silence=0.5
rdzvd=
dialect=
procs=1
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift ;;
    --modes) modes=${2:?--modes needs a list}; shift ;;
    --barriers) barriers_opt=${2:?--barriers needs a list}; shift ;;
    --conns) conns_opt=${2:?--conns needs a list}; shift ;;
    --somaxconn) somaxconn=${2:?--somaxconn needs a value}; shift ;;
    --python) python=${2:?--python needs a path}; shift ;;
    --only) only=${2:?--only needs a list}; shift ;;
    --storm-hosts) storm_hosts=${2:?--storm-hosts needs a list}; shift ;;
    --storm-ranks) storm_ranks=${2:?--storm-ranks needs a list}; shift ;;
    --stagger) stagger=${2:?--stagger needs seconds}; shift ;;
    --silence) silence=${2:?--silence needs seconds}; shift ;;
    --rdzvd) rdzvd=${2:?--rdzvd needs a path}; shift ;;
    --procs) procs=${2:?--procs needs a number}; shift ;;
    --dialect) dialect=${2:?--dialect needs 2.0, 2.1 or modern}; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run-bench.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) build=$1 ;;
    esac
    shift
done

srcdir=$(cd "$(dirname "$0")" && pwd)
rdzvd=${rdzvd:-$build/daemon/rdzvd}
bench=$build/tests/bench/rdzv-bench
nullresp=$build/tests/bench/null-responder
for f in "$rdzvd" "$bench" "$nullresp"; do
    if [ ! -x "$f" ]; then
        echo "run-bench.sh: $f not found: build first (meson setup $build && ninja -C $build)" >&2
        exit 2
    fi
done

if [ "$quick" = 1 ]; then
    tp_conns="1 50 1000"; duration=1; warmup=0.2
    barriers="1000 4000"; barrier_cap=20
    mem_conns=2000; rounds=${rounds:-1}
else
    tp_conns="1 50 1000"; duration=2; warmup=0.5
    barriers="1000 4000 8000 16000"; barrier_cap=60
    mem_conns=10000; rounds=${rounds:-3}
fi
[ -z "$barriers_opt" ] || barriers=${barriers_opt//,/ }
[ -z "$conns_opt" ] || tp_conns=${conns_opt//,/ }
storm_hosts=${storm_hosts//,/ }
storm_ranks=${storm_ranks//,/ }
for n in $barriers $tp_conns $storm_hosts $storm_ranks; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
        echo "run-bench.sh: bad barrier or connection count '$n'" >&2
        exit 2
    fi
done
want() { case ",$modes," in *",$1,"*) return 0 ;; esac; return 1; }
want throughput || tp_conns=
want barrier || barriers=
want storm || storm_hosts=
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
    echo "run-bench.sh: --rounds needs a positive number" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-bench.XXXXXX")
declare -A spid      # spid[server] = pid of the running instance
declare -A portfile  # portfile[server] = its port file
declare -A res       # res[server:metric] = value
old_somaxconn=

stop_server() {
    local name=$1 pid=${spid[$1]:-} n=0
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && [ $n -lt 50 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    unset "spid[$name]"
}

cleanup() {
    local s
    for s in "${!spid[@]}"; do
        stop_server "$s"
    done
    if [ -n "$old_somaxconn" ]; then
        sysctl -qw net.core.somaxconn="$old_somaxconn" 2>/dev/null
    fi
    if [ "$keep" = 1 ]; then
        echo "run-bench.sh: logs and raw results kept in $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "run-bench: $*" >&2; }

if [ -n "$somaxconn" ]; then
    old_somaxconn=$(cat /proc/sys/net/core/somaxconn)
    if sysctl -qw net.core.somaxconn="$somaxconn" 2>/dev/null; then
        log "net.core.somaxconn raised from $old_somaxconn to $somaxconn for this run"
    else
        log "cannot raise net.core.somaxconn (not permitted?); going on with $old_somaxconn"
        old_somaxconn=
    fi
fi

servers=()
for s in rdzvd pytorch null; do
    case ",$only," in *",$s,"*) servers+=("$s") ;; esac
done

torch_version=
if [[ " ${servers[*]} " == *" pytorch "* ]]; then
    torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
    if [ -z "$torch_version" ]; then
        log "no torch under $python: skipping the PyTorch column"
        res[pytorch:skip]="no torch under $python"
    fi
fi
# PyTorch >= 2.2's server answers only clients that open with VALIDATE.
if [ -z "$dialect" ]; then
    dialect=2.0
    IFS=. read -r tmaj tmin _ <<<"${torch_version:-1.0}"
    [ "$tmaj" -gt 2 ] 2>/dev/null || { [ "$tmaj" = 2 ] && [ "${tmin:-0}" -ge 2 ]; } &&
        dialect=modern
fi
case "$dialect" in
2.0 | 2.1 | modern) ;;
*) echo "run-bench.sh: --dialect must be 2.0, 2.1 or modern" >&2; exit 2 ;;
esac
backend= # the PyTorch server's backend, from its first line

# Start server $1 on a free port (0) and wait for its port file. Returns non-zero if it does not
# come up.
start_server() {
    local name=$1 pf=$work/$1.port n=0 pid
    rm -f "$pf"
    case "$name" in
    rdzvd) "$rdzvd" --port 0 --port-file "$pf" -l warn >>"$work/$name.log" 2>&1 & ;;
    pytorch) "$python" "$srcdir/pytorch-server.py" --port-file "$pf" >>"$work/$name.log" 2>&1 & ;;
    null) "$nullresp" --port-file "$pf" >>"$work/$name.log" 2>&1 & ;;
    esac
    pid=$!
    spid[$name]=$pid
    portfile[$name]=$pf
    while [ ! -s "$pf" ]; do
        if ! kill -0 "$pid" 2>/dev/null || [ $n -ge 600 ]; then
            log "$name did not start; its log:"
            sed 's/^/  /' "$work/$name.log" >&2
            stop_server "$name"
            res[$name:skip]="did not start"
            return 1
        fi
        sleep 0.1
        n=$((n + 1))
    done
    [ "$name" != pytorch ] || [ -n "$backend" ] ||
        backend=$(sed -n 's/.*TCPStore (\([a-z]*\) backend).*/\1/p' "$work/$name.log" | head -1)
}

# kv LINE KEY: the value of KEY=... in a result line.
kv() { sed -n "s/^\(.* \)\{0,1\}$2=\([^ ]*\).*/\2/p" <<<"$1"; }

# run_bench SERVER CAP ARGS...: one rdzv-bench run against SERVER, after every running server
# has gone idle; prints its result line (empty if rdzv-bench crashed or was killed).
run_bench() {
    local name=$1 cap=$2 out rc s idle=()
    shift 2
    for s in "${!spid[@]}"; do
        idle+=(--idle-pid "${spid[$s]}")
    done
    out=$(timeout -k 5 $((cap + 60)) "$bench" --dialect "$dialect" \
        --port-file "${portfile[$name]}" --pid "${spid[$name]}" "${idle[@]}" "$@" \
        2>>"$work/$name.bench.log")
    rc=$?
    echo "$name $* -> rc=$rc $out" >>"$work/raw.txt"
    log "$name: ${out:-rdzv-bench exited $rc}"
    echo "$out"
}

num() { [[ "$1" =~ ^[0-9.]+$ ]]; }

alive() { [ -n "${spid[$1]:-}" ] && kill -0 "${spid[$1]}" 2>/dev/null; }

log "build $build; $(nproc) CPUs; somaxconn $(cat /proc/sys/net/core/somaxconn);" \
    "open files $(ulimit -Hn); $([ "$quick" = 1 ] && echo quick || echo full) run"
t_start=$(date +%s)

# 1. Idle memory, each server alone on a fresh instance: allocator state left by earlier runs
#    would hide the growth.
for s in "${servers[@]}"; do
    want memory || break
    [ -z "${res[$s:skip]:-}" ] || continue
    start_server "$s" || continue
    out=$(run_bench "$s" 60 -c "$mem_conns" -t 60 memory)
    res[$s:mem]=$(kv "$out" bytes_per_conn)
    [ -n "${res[$s:mem]}" ] || res[$s:mem]=FAIL
    stop_server "$s"
done

# 2. Throughput and barriers: all servers up side by side, each size run against each server in
#    turn, so background load drifting over the run hits every column alike.
for s in "${servers[@]}"; do
    [ -z "${res[$s:skip]:-}" ] && start_server "$s"
done
# best OLD NEW max|min: the better of two figures, either possibly empty or not a number.
best() {
    if ! num "$1"; then echo "$2"; return; fi
    if ! num "$2"; then echo "$1"; return; fi
    awk -v a="$1" -v b="$2" -v m="$3" \
        'BEGIN { x = (m == "max") ? (b > a) : (b < a); print (x ? b : a) }'
}

for round in $(seq "$rounds"); do
    for c in $tp_conns; do
        for s in "${servers[@]}"; do
            alive "$s" || continue
            out=$(run_bench "$s" 60 -c "$c" -d "$duration" -w "$warmup" -t 60 throughput)
            res[$s:tp$c]=$(best "${res[$s:tp$c]:-}" "$(kv "$out" best_window_per_s)" max)
            [ -n "${res[$s:tp$c]}" ] || res[$s:tp$c]=FAIL
            # The server's own CPU time per reply over the whole measured window: on 2 cores
            # the client saturates first, so replies/s alone cannot tell servers apart.
            cpu=$(kv "$out" server_cpu_ns_per_reply)
            res[$s:cpu$c]=$(best "${res[$s:cpu$c]:-}" "$cpu" min)
            res[$s:cpus$c]="${res[$s:cpus$c]:-}${cpu:-n/a} "
        done
        res[loads$c]="${res[loads$c]:-}$(cut -d' ' -f1 /proc/loadavg) "
    done
done
for n in $barriers; do
    for round in $(seq "$rounds"); do
        for s in "${servers[@]}"; do
            [ -z "${res[$s:skip]:-}" ] || continue
            if [ -n "${res[$s:barfailed]:-}" ]; then
                [ -n "${res[$s:bar$n]:-}" ] || res[$s:bar$n]="SKIP"
                continue
            fi
            # Don't repeat a barrier that took a quarter of the cap: the cap is for one run.
            [ -z "${res[$s:bar$n:slow]:-}" ] || continue
            alive "$s" || start_server "$s" || continue
            out=$(run_bench "$s" "$barrier_cap" -c "$n" -t "$barrier_cap" --procs "$procs" barrier)
            res[$s:bar$n:runs]=$((${res[$s:bar$n:runs]:-0} + 1))
            if [ "$(kv "$out" ok)" = 1 ]; then
                secs=$(kv "$out" seconds)
                res[$s:bars$n]="${res[$s:bars$n]:-}$secs "
                ph="$(kv "$out" opened_s)/$(kv "$out" go_s)/$secs"
                res[$s:phases$n]="${res[$s:phases$n]:-}$ph "
                awk -v x="$secs" -v c="$barrier_cap" 'BEGIN { exit !(x > c / 4) }' &&
                    res[$s:bar$n:slow]=1
                if [ "$(best "${res[$s:bar$n]:-}" "$secs" min)" = "$secs" ]; then
                    res[$s:bar$n]=$secs
                    res[$s:bar$n:retries]=$(kv "$out" retries)
                fi
                continue
            fi
            res[$s:bar$n:fails]=$((${res[$s:bar$n:fails]:-0} + 1))
            if ! num "${res[$s:bar$n]:-}"; then
                res[$s:bar$n:retries]=$(kv "$out" retries)
                res[$s:bar$n:lost]=$(kv "$out" lost)
                res[$s:bar$n:done]=$(kv "$out" done)
                if ! alive "$s"; then
                    res[$s:bar$n]="FAIL:died"
                elif [ "$(kv "$out" timedout)" = 1 ]; then
                    res[$s:bar$n]="FAIL:timeout"
                else
                    res[$s:bar$n]="FAIL"
                fi
            fi
            # A bigger barrier will not do better: don't spend the cap on it again. Restart the
            # server so it does not keep a CPU busy with the failed run's connections.
            res[$s:barfailed]=$n
            stop_server "$s"
        done
    done
done
# Storms: per size, each arrangement against each server in turn, rounds x; the best time, and
# any run's resets (a lost rank fails its barrier: rdzv-bench stops once the rest all wait).
# Keys: H.R.s (host after host), H.R.i (interleaved), 1.HR.s (one host of as many ranks).
storms=()
for r in $storm_ranks; do
    for h in $storm_hosts; do
        storms+=("$h.$r.s" "$h.$r.i")
        [[ " ${storms[*]} " == *" 1.$((h * r)).s "* ]] || storms+=("1.$((h * r)).s")
    done
done
for _ in $(seq "$rounds"); do
    for k in "${storms[@]}"; do
        IFS=. read -r h r arr <<<"$k"
        for s in "${servers[@]}"; do
            [ -z "${res[$s:skip]:-}" ] || continue
            alive "$s" || start_server "$s" || continue
            st=0
            [ "$arr" = s ] && st=$stagger
            out=$(run_bench "$s" "$barrier_cap" -c $((h * r)) -t "$barrier_cap" --hosts "$h" \
                --procs "$procs" \
                --stagger "$st" --silence "$silence" barrier)
            res[$s:bar$k:runs]=$((${res[$s:bar$k:runs]:-0} + 1))
            res[$s:bar$k:n]=$((h * r))
            if [ "$(kv "$out" ok)" = 1 ]; then
                secs=$(kv "$out" seconds)
                [ "$(best "${res[$s:bar$k]:-}" "$secs" min)" = "$secs" ] && res[$s:bar$k]=$secs
                continue
            fi
            res[$s:bar$k:fails]=$((${res[$s:bar$k:fails]:-0} + 1))
            lost=$(kv "$out" lost)
            [ "${lost:-0}" -gt "${res[$s:bar$k:lost]:-0}" ] && res[$s:bar$k:lost]=$lost
            num "${res[$s:bar$k]:-}" || res[$s:bar$k]=FAIL
            res[$s:bar$k:done]=$(kv "$out" "done")
            stop_server "$s" # its next run starts on a fresh one
        done
    done
done
for s in "${servers[@]}"; do
    stop_server "$s"
done

# ---- the table ----

fmt_rate() {
    if num "$1"; then awk -v v="$1" 'BEGIN { printf "%.1fk", v / 1000 }'; else echo "${1:-n/a}"; fi
}

fmt_bar() {
    local s=$1 n=$2 v=${res[$1:bar$2]:-} extra=
    local retries=${res[$s:bar$n:retries]:-0} lost=${res[$s:bar$n:lost]:-0}
    local done_=${res[$s:bar$n:done]:-0} fails=${res[$s:bar$n:fails]:-0} of=${res[$s:bar$n:n]:-$n}
    [ -n "$v" ] || { echo "n/a"; return; }
    [ "${retries:-0}" != 0 ] && extra="$retries connect retries"
    [ "${lost:-0}" != 0 ] && extra="${extra:+$extra, }$lost reset"
    num "$v" && [ "$fails" != 0 ] &&
        extra="${extra:+$extra, }$fails of ${res[$s:bar$n:runs]} runs failed"
    case "$v" in
    FAIL:timeout) echo "FAIL: ${done_}/$of done in ${barrier_cap} s${extra:+, $extra}" ;;
    FAIL:died) echo "FAIL: server died" ;;
    FAIL*) echo "FAIL: ${done_}/$of done${extra:+, $extra}" ;;
    SKIP) echo "not run (failed at $((${res[$s:barfailed]} / 1000))k)" ;;
    *) awk -v v="$v" -v e="$extra" 'BEGIN { printf "%.3f%s", v, e == "" ? "" : " (" e ")" }' ;;
    esac
}

fmt_ns() {
    if num "$1"; then awk -v v="$1" 'BEGIN { printf "%.0f ns", v }'; else echo "${1:-n/a}"; fi
}

fmt_mem() {
    if num "$1"; then printf "%s" "$1"; else echo "${1:-n/a}"; fi
}

ratio() {
    if num "$1" && num "$2" && awk -v b="$2" 'BEGIN { exit !(b > 0) }'; then
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
    else
        echo "n/a"
    fi
}

cell() {
    local s=$1 kind=$2 key=$3
    if [ -n "${res[$s:skip]:-}" ]; then
        echo "n/a"
        return
    fi
    case "$kind" in
    tp) fmt_rate "${res[$s:$key]:-}" ;;
    cpu) fmt_ns "${res[$s:$key]:-}" ;;
    bar) fmt_bar "$s" "$key" ;;
    mem) fmt_mem "${res[$s:$key]:-}" ;;
    esac
}

row() {
    local label=$1 kind=$2 key=$3 k
    [ "$kind" = bar ] && k=bar$key || k=$key
    printf '| %s | %s | %s | %s | %s | %s |\n' "$label" \
        "$(cell rdzvd "$kind" "$key")" "$(cell pytorch "$kind" "$key")" \
        "$(cell null "$kind" "$key")" \
        "$(ratio "${res[rdzvd:$k]:-}" "${res[pytorch:$k]:-}")" \
        "$(ratio "${res[rdzvd:$k]:-}" "${res[null:$k]:-}")"
}

echo
echo "rdzv-bench: $(nproc) CPUs, $(uname -r), somaxconn $(cat /proc/sys/net/core/somaxconn)," \
    "PyTorch ${torch_version:-n/a}${backend:+ ($backend backend)}, clients speak $dialect," \
    "barriers from $procs client process$([ "$procs" = 1 ] || echo es)," \
    "$([ "$quick" = 1 ] && echo "quick run" || echo "full run"), $rounds round(s)," \
    "$(($(date +%s) - t_start)) s"
echo
echo "| metric | rdzvd | PyTorch${torch_version:+ $torch_version}${backend:+ ($backend)}" \
    "| ceiling | rdzvd/PyTorch | rdzvd/ceiling |"
echo "|---|---|---|---|---|---|"
for c in $tp_conns; do
    row "ADD+GET, $c conn$([ "$c" = 1 ] || echo s), replies/s (higher is better)" tp "tp$c"
done
for c in $tp_conns; do
    row "ADD+GET, $c conn$([ "$c" = 1 ] || echo s), server's own CPU per reply (lower is better)" \
        cpu "cpu$c"
done
for n in $barriers; do
    [ $((n % 1000)) = 0 ] && label=$((n / 1000))k || label=$n
    row "init barrier, $label conns, s (lower is better)" bar "$n"
done
want memory &&
    row "memory per idle conn ($mem_conns conns), bytes of VmRSS (lower is better)" mem mem
for k in "${storms[@]}"; do
    IFS=. read -r h r arr <<<"$k"
    case "$h.$arr" in
    1.*) what="one host" ;;
    *.s) what="host after host, ${stagger} s apart" ;;
    *) what="interleaved" ;;
    esac
    row "storm, $h host$([ "$h" = 1 ] || echo s) x $r ranks, $what, s (lower is better)" bar "$k"
done
echo
echo "Throughput: closed loop of ADD+GET, one request in flight per connection; the best 0.5 s" \
    "window of ${duration} s (after ${warmup} s warm-up) over $rounds round(s). Barrier: first" \
    "connect() to last STOP_WAITING, capped at ${barrier_cap} s, best of $rounds round(s) (once" \
    "if it took over a quarter of the cap); connect retries are refused/reset connects tried" \
    "again. Best-of shields the figures" \
    "from other load on the machine; rounds interleave the servers. Memory:" \
    "server VmRSS growth only (kernel socket buffers are not counted). Every run starts once all" \
    "servers are idle. The ceiling is a do-nothing epoll responder (null-responder)."
[ ${#storms[@]} = 0 ] ||
    echo "Storm: a barrier of hosts x ranks, each host's ranks from its own address" \
        "(127.0.0.2, .3, ...), each rank silent ${silence} s after its connect before its ADD," \
        "best of $rounds round(s); a time: every rank passed, 0 reset; \"N reset\": the most" \
        "ranks a run lost (closed by the server), which fails its barrier."
if [ -n "$tp_conns" ]; then
    echo
    echo "Server CPU per reply: the server process's own CPU time (every thread's schedstat" \
        "run time, else utime+stime) over the measured window, divided by the replies counted" \
        "in it; the table takes each server's lowest. Every round, in ns (rdzvd/ceiling of the" \
        "round, its servers run back to back; 1-minute load after the round):"
    for c in $tp_conns; do
        read -r -a ra <<<"${res[rdzvd:cpus$c]:-}"
        read -r -a rn <<<"${res[null:cpus$c]:-}"
        read -r -a ld <<<"${res[loads$c]:-}"
        line=
        rs=()
        for i in "${!ld[@]}"; do
            r=$(ratio "${ra[$i]:-}" "${rn[$i]:-}")
            line="$line${line:+; }${ra[$i]:-n/a} / ${rn[$i]:-n/a} ($r, load ${ld[$i]})"
            [ "$r" = n/a ] || rs+=("${r%x}")
        done
        med=n/a
        [ ${#rs[@]} = 0 ] ||
            med=$(printf '%s\n' "${rs[@]}" | sort -g | awk '{ v[NR] = $1 } END {
                if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2
                printf "%.2fx (from %.2fx to %.2fx)", m, v[1], v[NR] }')
        echo "- $c conns, rdzvd / ceiling, median of the rounds' ratios $med: $line"
    done
fi
if [ -n "$barriers" ]; then
    echo
    echo "Init barrier, every round in s: rdzvd / PyTorch${backend:+ $backend} / ceiling" \
        "(rdzvd/PyTorch of the round), the worst round's ratio last:"
    for n in $barriers; do
        read -r -a ra <<<"${res[rdzvd:bars$n]:-}"
        read -r -a rp <<<"${res[pytorch:bars$n]:-}"
        read -r -a rc <<<"${res[null:bars$n]:-}"
        line=
        worst=
        for i in "${!ra[@]}"; do
            r=$(ratio "${ra[$i]}" "${rp[$i]:-}")
            line="$line${line:+; }${ra[$i]} / ${rp[$i]:-n/a} / ${rc[$i]:-n/a} ($r)"
            [ "$r" = n/a ] || worst=$(best "$worst" "${r%x}" max)
        done
        [ -n "$worst" ] && worst=${worst}x
        echo "- $n conns: ${line:-n/a}; worst ${worst:-n/a}"
        for s in "${servers[@]}"; do
            [ -n "${res[$s:phases$n]:-}" ] &&
                echo "  - $s, each round's last connection open / go SET / last woken:" \
                    "${res[$s:phases$n]% }"
        done
    done
fi
for s in "${servers[@]}"; do
    [ -n "${res[$s:skip]:-}" ] && echo "$s: skipped (${res[$s:skip]})"
done
exit 0
