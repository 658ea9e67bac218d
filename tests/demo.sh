#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install, build, and run two real jobs on this machine (as root, or as a user who may sudo):
#  1. rdzv's own: rdzv-agent with its embedded rdzvd (--standalone) starts 2 workers of the built-in
#     data-parallel trainer rdzv-train (gloo on CPU; NCCL when the machine has GPUs and the build
#     has CUDA);
#  2. an unmodified PyTorch DDP script (the autoencoder, gloo on CPU) under the same launcher: its 2
#     ranks rendezvous through the generation's store on the embedded daemon.
set -eu
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if [ -x build/train/rdzv-train ]; then
  echo "== rdzv-agent --standalone --nproc 2   (the default worker: rdzv-train, 200 steps)"
  ./build/agent/rdzv-agent --standalone --nproc 2 --log-level warn 2>&1 | tee "$out/train.log" |
    grep -E '"step":(50|100|150|200),|"event":"done"' || true
  if ! grep -q '"event":"done"' "$out/train.log"; then
    echo "demo: rdzv-train did not finish:"
    tail -20 "$out/train.log"
    exit 1
  fi
else
  echo "== rdzv-train was not built (see 'meson setup build' output): skipping rdzv's own job"
fi

mkdir "$out/ddp"
echo "== rdzv-agent --standalone --nproc 2 -- python3 autoencoder_ddp.py"
EPOCHS=${EPOCHS:-5} ./build/agent/rdzv-agent --standalone --nproc 2 --log-level warn -- \
  /usr/bin/python3 tests/rendezvous/scripts/autoencoder_ddp.py "$out/ddp"
/usr/bin/python3 - "$out/ddp" <<'PY'
import json, os, sys
res = [json.load(open(os.path.join(sys.argv[1], f))) for f in sorted(os.listdir(sys.argv[1]))]
r0 = res[0]
print(f"== done: {len(res)} ranks, world size {r0['world']}, {r0['steps']} steps, "
      f"loss {r0['first']:.4f} -> {r0['last']:.4f}, replicas identical: "
      f"{len({r['params'] for r in res}) == 1}")
PY
