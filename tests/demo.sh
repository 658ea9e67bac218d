#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install, build, and run a real job on this machine: rdzv-agent with its embedded rdzvd
# (--standalone) starts 2 workers running an unmodified PyTorch DDP script (the autoencoder,
# gloo on CPU), which rendezvous through the generation's store on the embedded daemon.
set -eu
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== rdzv-agent --standalone --nproc 2 -- python3 autoencoder_ddp.py"
EPOCHS=${EPOCHS:-5} ./build/agent/rdzv-agent --standalone --nproc 2 -- \
  /usr/bin/python3 tests/rendezvous/scripts/autoencoder_ddp.py "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
res = [json.load(open(os.path.join(sys.argv[1], f))) for f in sorted(os.listdir(sys.argv[1]))]
r0 = res[0]
print(f"== done: {len(res)} ranks, world size {r0['world']}, {r0['steps']} steps, "
      f"loss {r0['first']:.4f} -> {r0['last']:.4f}, replicas identical: "
      f"{len({r['params'] for r in res}) == 1}")
PY
