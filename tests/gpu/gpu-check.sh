#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-check.sh BUILD_DIR OUT_DIR [LIB_DIR]: run tests/gpu/gpu_check.py on a GPU machine with the
# python3 that has PyTorch 2.x. BUILD_DIR holds a build made elsewhere (CI's machines have no
# GPU); LIB_DIR holds the shared libraries rdzv-train needs that such a machine may lack
# (libgloo and its dependencies: tests/gpu/carry-libs.sh makes it). NCCL, cuBLAS and the CUDA
# runtime are taken from the machine: /usr/local/cuda, then PyTorch's nvidia-* wheels.
set -eu
build=$(cd "$1" && pwd); out=$2; libs=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "gpu-check.sh: $py has no torch (set PYTHON)" >&2
  exit 2
fi
path=${libs:+$(cd "$libs" && pwd)}
for d in /usr/local/cuda/lib64 $("$py" - <<'PY'
import glob, os, site
for s in site.getsitepackages():
    for lib in ("nccl", "cublas", "cuda_runtime", "cu13"):
        for d in glob.glob(os.path.join(s, "nvidia", lib, "lib")):
            print(d)
PY
); do [ -d "$d" ] && path=${path:+$path:}$d; done
export LD_LIBRARY_PATH=${path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if ! ldd "$build/train/rdzv-train" | grep -q "not found"; then :; else
  ldd "$build/train/rdzv-train" | grep "not found" >&2; exit 2; fi
exec "$py" "$here/gpu_check.py" "$build" "$out"
