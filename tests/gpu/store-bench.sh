#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# store-bench.sh BUILD_DIR OUT_DIR [LIB_DIR]: rdzvd against the TCPStore server PyTorch users run
# (the libuv backend of a pip torch >= 2.4) and the null responder, on a machine that has one
# (the lent GPU machines: 16 CPUs, pip's PyTorch 2.11). Runs tests/bench/run-bench.sh twice,
# then run-front-bench.sh:
#   1. every mode (memory, throughput, barriers 1k-16k), clients from one process, 3 rounds;
#   2. the barriers 4k-16k again with the ranks spread over 8 client processes, 3 rounds,
#      so that one client process is not what the barrier measures;
#   3. run-front-bench.sh: a start of 16,000 and 100,000 ranks (FRONT_RANKS), 8 a node, 2
#      rounds, through the nodes' store fronts and directly, and directly to PyTorch's server.
# STEPS (default "1 2 3") picks the steps: a lent machine's 10 minutes a call may not hold all.
# Writes OUT_DIR/store-bench-1.md, -8.md and front-bench.md (the tables) and their progress
# logs. BUILD_DIR holds a release build made elsewhere; LIB_DIR the libraries it links that such
# a machine may lack (tests/gpu/carry-libs.sh makes it). PYTHON names the interpreter (default
# python3); RUN_BENCH_ARGS is added to the first two runs (--quick to try the script out),
# FRONT_BENCH_ARGS to the third.
set -u
build=$(cd "$1" && pwd); out=$2; libs=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
[ -z "$libs" ] || export LD_LIBRARY_PATH=$(cd "$libs" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "store-bench.sh: $py has no torch (set PYTHON)" >&2
    exit 2
fi
"$py" -c 'import torch; print("torch", torch.__version__)'
nproc; uname -r
rc=0
step() { case " ${STEPS:-1 2 3} " in *" $1 "*) return 0 ;; esac; return 1; }
if step 1; then
    bash "$here/../bench/run-bench.sh" --python "$(command -v "$py")" --somaxconn 65535 \
        --rounds 3 ${RUN_BENCH_ARGS:-} "$build" \
        >"$out/store-bench-1.md" 2>"$out/store-bench-1.log" || rc=1
    cat "$out/store-bench-1.md"
fi
if step 2; then
    bash "$here/../bench/run-bench.sh" --python "$(command -v "$py")" --somaxconn 65535 \
        --modes barrier --barriers 4000,8000,16000 --procs 8 --rounds 3 ${RUN_BENCH_ARGS:-} \
        "$build" >"$out/store-bench-8.md" 2>"$out/store-bench-8.log" || rc=1
    cat "$out/store-bench-8.md"
fi
# 3. A start of N ranks, 8 a node: through the nodes' store fronts (one a node) and directly,
#    against PyTorch's server directly (what does not fit a process's open files is said). Each
#    barrier's line is in front-bench.log as it comes, should the call be cut short.
if step 3; then
    bash "$here/../bench/run-front-bench.sh" --python "$(command -v "$py")" --somaxconn 65535 \
        --ranks "${FRONT_RANKS:-16000 100000}" --rounds 2 ${FRONT_BENCH_ARGS:-} "$build" \
        >"$out/front-bench.md" 2>"$out/front-bench.log" || rc=1
    cat "$out/front-bench.md"
fi
exit $rc
