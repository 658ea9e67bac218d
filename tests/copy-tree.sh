#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copy the source tree SRC to DEST as git sees it: tracked and untracked files that git does not
# ignore (so no build directories); outside a git checkout, everything but ./build*.
# Used by package-test.sh and wheel-test.sh. Usage: tests/copy-tree.sh SRC DEST
set -eu
src=$1 dest=$2
mkdir -p "$dest"
if git -C "$src" rev-parse >/dev/null 2>&1; then
  git -C "$src" ls-files -z -co --exclude-standard | (cd "$src" && xargs -0 cp --parents -t "$dest")
else
  tar -C "$src" --exclude='./build*' -cf - . | tar -C "$dest" -xf -
fi
