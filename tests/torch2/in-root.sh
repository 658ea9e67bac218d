#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Run COMMAND inside the Debian 13 test root (tests/torch2/make-root.sh), in this directory and
# environment: its /usr/bin/python3 is Debian 13's, with PyTorch 2.6. The mounts it needs (proc,
# sys, dev, this machine's /tmp, /etc/hosts, the source and build trees at the same paths) are
# made in a private mount namespace that ends with the command, so nothing stays mounted and
# the root can be removed with rm -rf at any time. Loopback is shared: its processes reach
# those outside. Exits 77 (skipped) without the root, or when not run as root.
# Usage: tests/torch2/in-root.sh COMMAND [ARGS...]
root=${RDZV_TORCH2_ROOT:-/var/cache/rdzv-test/trixie-torch2}
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "in-root: the torch 2.6 root needs root (mount, chroot): skipped"; exit 77
fi
if [ ! -f "$root/.rdzv-root" ]; then
  echo "in-root: no Debian 13 root at $root (tests/torch2/make-root.sh makes it): skipped"; exit 77
fi
binds="$src ${RDZV_BUILD_ROOT:-} ${MESON_BUILD_ROOT:-}"
exec unshare --mount --propagation private /bin/sh -ec '
root=$1 binds=$2 wd=$3; shift 3
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind /tmp "$root/tmp"
mount --bind /etc/hosts "$root/etc/hosts"
for b in $binds; do
  [ -d "$b" ] || continue
  mkdir -p "$root$b"
  mount --bind "$b" "$root$b"
done
exec chroot "$root" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$wd" "$@"
' in-root "$root" "$binds" "$PWD" "$@"
