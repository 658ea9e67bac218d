#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install rdzv's build and test dependencies from Debian 12's packages (skips what is present).
set -u
pkgs=(gcc g++ libc6-dev meson ninja-build pkg-config libuv1-dev libjansson-dev libssl3
      python3-torch procps openmpi-bin chromium libgloo-dev libpng-dev zlib1g-dev gcovr
      libraft-dev iproute2 gdb strace debootstrap python3-mesonpy python3-venv python3-pip curl
      gridengine-master gridengine-exec gridengine-client)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
echo "== installing: ${missing[*]}"
$sudo apt-get update -qq || { echo "install-deps: apt-get update failed" >&2; exit 1; }
# Grid Engine, for the tests' local cluster (tests/sge/local-sge.sh starts and stops it): its
# cell made for this host without a question, and its daemons not started as services.
for p in gridengine-common gridengine-master gridengine-exec gridengine-client; do
  printf '%s shared/gridenginemaster string %s\n' "$p" "$(hostname)"
  printf '%s shared/gridenginecell string default\n' "$p"
  printf '%s shared/gridengineconfig boolean true\n' "$p"
done | $sudo debconf-set-selections
policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  trap '$sudo rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy"
fi
status=0
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/tmp/rdzv-apt.log 2>&1 || status=$?
[ -n "$policy" ] && $sudo rm -f "$policy"
trap - EXIT
# Nor at the next boot, where systemd runs (tests/sge/local-sge.sh starts and stops them).
if [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now gridengine-master gridengine-exec >/dev/null 2>&1 || true
fi
if [ $status != 0 ]; then
  tail -20 /tmp/rdzv-apt.log
  echo "install-deps: apt-get install failed" >&2
  exit 1
fi
