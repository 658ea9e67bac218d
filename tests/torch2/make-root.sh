#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Make (or reuse) the Debian 13 root in which the suite runs its torch-facing tests under
# Debian 13's PyTorch 2.6: debootstrap from Debian's archive with python3-torch, plus
#  - the runtime libraries rdzvd (built on Debian 12) needs: libuv1t64 and liblz4-1 from Debian
#    13, and this machine's libraft.so.2 (Debian 13 ships libraft0, another ABI), copied in;
#  - a test-only shim for Debian 13's torch, which is built without libuv yet asks for it by
#    default (TCPStore(use_libuv=True); the c10d rendezvous backend and the agent-store path
#    ignore USE_LIBUV): every TCPStore it makes is made with use_libuv=False. pip's torch has
#    libuv and needs nothing. docs/guide/from-torchrun.md ("PyTorch 2.x") says so for users of
#    that package.
# The root is reused while its stamp matches ROOT_VERSION. Needs root and debootstrap.
# Usage: tests/torch2/make-root.sh [DIR]   (default $RDZV_TORCH2_ROOT, else
# /var/cache/rdzv-test/trixie-torch2). Prints the root's torch version; exit 0 when it is ready.
set -eu
ROOT_VERSION=1
dir=${1:-${RDZV_TORCH2_ROOT:-/var/cache/rdzv-test/trixie-torch2}}
mirror=${RDZV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)
torch_in() {  # the torch version of the root $1
  chroot "$1" /usr/bin/python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null |
    tail -1
}

if [ "$(id -u)" != 0 ]; then
  echo "make-root: needs root (debootstrap, chroot); the torch 2.6 tests are skipped" >&2
  exit 77
fi
if [ -f "$dir/.rdzv-root" ] && [ "$(cat "$dir/.rdzv-root")" = "$ROOT_VERSION" ]; then
  echo "make-root: reusing $dir ($(torch_in "$dir"))"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  echo "make-root: debootstrap is not installed (apt-get install debootstrap)" >&2
  exit 1
fi
t0=$(date +%s)
new="$dir.new"
# A half-made root from an interrupted run: nothing is mounted there (mounts are only ever made
# in the private namespaces of tests/torch2/in-root.sh), so it can simply go.
rm -rf --one-file-system "$new"
mkdir -p "$(dirname "$dir")"
if ! debootstrap --variant=minbase --include=python3-torch,python3-numpy,libuv1t64,liblz4-1,procps \
    trixie "$new" "$mirror" >"$dir.log" 2>&1; then
  tail -20 "$dir.log" >&2
  echo "make-root: debootstrap of Debian 13 from $mirror failed (log: $dir.log)" >&2
  exit 1
fi
for lib in /usr/lib/x86_64-linux-gnu/libraft.so.2*; do
  [ -e "$lib" ] && cp -a "$lib" "$new/usr/local/lib/"
done
chroot "$new" /sbin/ldconfig
site="$new/usr/local/lib/python3.13/dist-packages"
mkdir -p "$site"
cp "$here/rdzv_test_torch_shim.py" "$site/"
echo "import rdzv_test_torch_shim" > "$site/rdzv-test-torch-shim.pth"
echo "$ROOT_VERSION" > "$new/.rdzv-root"
rm -rf --one-file-system "$dir"
mv "$new" "$dir"
echo "make-root: made $dir in $(( $(date +%s) - t0 )) s ($(torch_in "$dir"))"
