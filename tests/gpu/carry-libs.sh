#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# carry-libs.sh BUILD_DIR LIB_DIR: copy the shared libraries rdzv-train links that are not part
# of glibc, libstdc++ or CUDA (libgloo, its hiredis/ibverbs/netlink, libpng) into LIB_DIR, for a
# GPU machine without Debian's packages (tests/gpu/gpu-check.sh's third argument).
set -eu
mkdir -p "$2"
ldd "$1/train/rdzv-train" | awk '$3 ~ /^\// {print $3}' |
  grep -E 'libgloo|libhiredis|libibverbs|libnl-|libpng' | while read -r l; do cp -L "$l" "$2/"; done
ls "$2"
