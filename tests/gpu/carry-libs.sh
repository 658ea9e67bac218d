#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# carry-libs.sh BUILD_DIR LIB_DIR: copy the shared libraries rdzv-train, rdzvd, rdzv-agent and
# rdzvctl link that are not part of glibc, libstdc++ or CUDA (libgloo, its hiredis/ibverbs/netlink,
# libpng; libuv, libjansson, libraft and its liblz4, zlib) into LIB_DIR, for a GPU machine without
# Debian's packages (tests/gpu/gpu-check.sh's third argument).
set -eu
mkdir -p "$2"
for b in train/rdzv-train daemon/rdzvd agent/rdzv-agent ctl/rdzvctl; do
  [ -x "$1/$b" ] && ldd "$1/$b"
done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -E 'libgloo|libhiredis|libibverbs|libnl-|libpng|libuv|libjansson|libraft|liblz4|libz\.' |
  while read -r l; do cp -L "$l" "$2/"; done
ls "$2"
