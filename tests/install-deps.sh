#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install rdzv's build and test dependencies from Debian 12's packages (skips what is present).
set -u
pkgs=(gcc g++ libc6-dev meson ninja-build pkg-config libuv1-dev libjansson-dev libssl3
      python3-torch procps openmpi-bin chromium libgloo-dev libpng-dev zlib1g-dev gcovr
      libraft-dev iproute2 gdb strace debootstrap python3-mesonpy python3-venv python3-pip curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
echo "== installing: ${missing[*]}"
$sudo apt-get update -qq || { echo "install-deps: apt-get update failed" >&2; exit 1; }
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/tmp/rdzv-apt.log 2>&1; then
  tail -20 /tmp/rdzv-apt.log
  echo "install-deps: apt-get install failed" >&2
  exit 1
fi
