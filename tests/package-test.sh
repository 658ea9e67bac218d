#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the Debian package from this tree (dpkg-buildpackage, in a scratch copy so nothing lands
# beside the checkout), install it, check that the binaries, man pages, scheduler templates and
# systemd unit are where packagers expect them, run a standalone job from the installed binaries
# (rdzv-agent --standalone with its default worker, rdzv-train, on CPU), then remove the package.
# Prints "ok"/"FAIL" lines; exits non-zero when anything failed. Needs root (apt-get, dpkg -i).
set -u
cd "$(dirname "$0")/.."
src=$PWD
fail=0
check() {  # what, command...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
[ "$(id -u)" = 0 ] || { echo "package-test.sh: needs root (dpkg -i)" >&2; exit 2; }
for p in dpkg-dev debhelper fakeroot; do
  dpkg -s "$p" >/dev/null 2>&1 && continue
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" \
    >/tmp/rdzv-pkg-apt.log 2>&1 ||
    { tail -5 /tmp/rdzv-pkg-apt.log; echo "FAIL: install $p"; exit 1; }
done
if dpkg-query -W -f='${Status}' rdzv 2>/dev/null | grep -q ' installed$'; then
  echo "package-test.sh: a package named rdzv is installed already;" \
    "remove it first (dpkg -r rdzv)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/rdzv-pkg.XXXXXX)
trap 'dpkg --purge rdzv >/dev/null 2>&1; rm -rf "$work"' EXIT
bash "$src/tests/copy-tree.sh" "$src" "$work/rdzv" || { echo "FAIL: copy the tree"; exit 1; }
echo "== dpkg-buildpackage -us -uc -b (log: $work/build.log)"
# At nice 10: run-suite.sh runs this beside the tests, whose CPU it must not take.
if ! (cd "$work/rdzv" && nice -n 10 dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1); then
  tail -30 "$work/build.log"; echo "FAIL: dpkg-buildpackage"; exit 1
fi
deb=$(ls "$work"/rdzv_*.deb 2>/dev/null | head -1)
check "dpkg-buildpackage made rdzv_*.deb" test -n "$deb"
[ -n "$deb" ] || exit 1
echo "== apt-get install $(basename "$deb")"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" \
  >"$work/install.log" 2>&1 ||
  { tail -10 "$work/install.log"; echo "FAIL: install the package"; exit 1; }
for f in /usr/bin/rdzvd /usr/bin/rdzv-agent /usr/bin/rdzvctl /usr/share/rdzv/rdzv.sbatch \
         /usr/share/rdzv/rdzv.pbs /usr/share/rdzv/rdzv.sge /usr/share/man/man8/rdzvd.8.gz \
         /usr/share/man/man1/rdzv-agent.1.gz; do
  check "installed $f" test -e "$f"
done
unit=$(dpkg -L rdzv | grep '/rdzvd.service$' | head -1)
check "installed rdzvd.service ($unit)" test -n "$unit"
[ -n "$unit" ] &&
  check "rdzvd.service runs /usr/bin/rdzvd" grep -qx 'ExecStart=/usr/bin/rdzvd' "$unit"
check "rdzv.sbatch defaults to /usr/bin" \
  grep -q 'RDZV_BIN=${RDZV_BIN:-/usr/bin}' /usr/share/rdzv/rdzv.sbatch
check "rdzvd --version from the package" /usr/bin/rdzvd --version
if [ -x /usr/bin/rdzv-train ]; then
  # A real job from the installed binaries: the agent, its embedded daemon and the default worker
  # (rdzv-train found beside the agent), 2 ranks on CPU with gloo.
  out=$(cd / && RDZV_TRAIN_STEPS=40 RDZV_TRAIN_LOG_EVERY=20 timeout 120 /usr/bin/rdzv-agent \
        --standalone --nproc 2 2>&1)
  rc=$?
  echo "$out" | tail -5
  check "standalone job from the installed package exits 0" test "$rc" = 0
  check "its trainer finished 40 steps on 2 ranks" \
    grep -q '"event":"done","steps":40' <<<"$out"
else
  echo "FAIL: the package has no rdzv-train (this machine lacks gloo or a C++ compiler?)"; fail=1
fi
dpkg --purge rdzv >/dev/null 2>&1
check "package removed (purged: a later run starts clean)" test ! -e /usr/bin/rdzvd
exit $fail
