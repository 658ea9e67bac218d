#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what rdzv needs (Debian 12), build it twice (gcc -Dwerror, then ASan+UBSan) and run the
# whole test suite in both builds; as root, the torch-facing tests run again under PyTorch 2.6 in a
# Debian 13 root (tests/torch2/). Builds the wheel and runs jobs from it (tests/wheel-test.sh), and
# (as root) the Debian package, installed and a job run from it (tests/package-test.sh). Ends with
# its time and one line "N passed, N failed, N skipped"; exits non-zero when anything failed.
# Usage: tests/run-suite.sh [--no-install] [--no-asan] [--no-package]
set -u
cd "$(dirname "$0")/.."
root=$PWD
install=1 asan=1 package=1
for a in "$@"; do
  case "$a" in
    --no-install) install=0 ;;
    --no-asan) asan=0 ;;
    --no-package) package=0 ;;
    *) echo "run-suite.sh: unknown option $a (use --no-install, --no-asan, --no-package)" >&2
       exit 2 ;;
  esac
done

if [ "$install" = 1 ]; then
  bash tests/install-deps.sh || exit 1
  # Optional: mandoc lints the manual pages (integration-manpages skips that part without it).
  if ! command -v mandoc >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mandoc \
      >/dev/null 2>&1 || echo "run-suite.sh: mandoc not installed; man page lint skipped"
  fi
fi

# The Debian 13 root with PyTorch 2.6 in which the torch-facing tests run a second time
# (tests/torch2/make-root.sh; made once, about 70 s and 1 GB, then reused). As root only: it
# needs debootstrap and chroot. A root that cannot be made is a failure, not a skip. It is made
# in the background while the two builds compile (mostly download and unpacking beside their
# compiling) and waited for before the tests start: the '-torch2.6' tests need it.
torch2_result=SKIP torch2_pid=
if [ "$(id -u)" = 0 ]; then
  echo "== torch 2.6 root: tests/torch2/make-root.sh (in the background; log: torch2-root.log)"
  bash tests/torch2/make-root.sh >torch2-root.log 2>&1 &
  torch2_pid=$!
else
  echo "== torch 2.6 root: skipped (not root); the '-torch2.6' tests skip too"
fi

# Each test gets its own files; 16k-connection tests need the whole open-file limit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export PATH="/usr/bin:$PATH"

builds=()
build() {  # name, meson setup args...
  local name=$1; shift
  echo "== build $name: meson setup $*"
  if [ -d "$name" ]; then meson setup --reconfigure "$name" "$@" >"$name.setup.log" 2>&1
  else meson setup "$name" "$@" >"$name.setup.log" 2>&1; fi || { cat "$name.setup.log"; return 1; }
  grep -iE "trainer|cuda|nvcc" "$name.setup.log" | sed 's/^/   /' || true
  ninja -C "$name" || return 1
  builds+=("$name")
}
# The two builds' tests run at the same time, in two phases: first every test that shares the
# machine (tests/suite-lock.sh gives it the shared lock), both builds side by side; then, once
# both builds' are done, the tests that hold the machine alone (tests/suite-lock.list; the lock
# runs them one at a time). Before, a build that reached its exclusive tests first held the other
# build's tests at the lock's turnstile, one lane idle while the other drained, at each of its
# exclusive tests. Each build's output goes to NAME.test.log (printed when it ends), its results
# to NAME/meson-logs/tests-shared*.json and tests-exclusive*.json (with --wrapper, meson adds the
# wrapper's name). A test may still wait for the other build's, hence the timeout multiplier.
test_names() {  # build, shared|exclusive: that phase's test names, one a line
  /usr/bin/python3 - "$1" "$2" "$root/tests/suite-lock.list" <<'PY'
import json, subprocess, sys
build, phase, listed = sys.argv[1:]
scripts = {ln.strip() for ln in open(listed) if ln.strip() and not ln.startswith("#")}
tests = json.loads(subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                                  capture_output=True, text=True).stdout)
for t in tests:
    alone = any(a.rsplit("/", 1)[-1] in scripts for a in t["cmd"])
    if alone == (phase == "exclusive"):
        print(t["name"])
PY
}
# The gcc build has a third more shared tests than the sanitized one (the unsanitized-only ones,
# the accept-thread reruns): with two at a time each, the sanitized build's ended 3.7 minutes
# before the gcc build's, and one lane of the machine stood idle that long (a clean-clone run,
# 2026-11-28: 577 s against 801 s). The gcc build runs three at a time in the shared phase.
run_tests() {  # name, shared|exclusive
  local name=$1 phase=$2 names jobs=2
  names=$(test_names "$name" "$phase") ||
    { echo "run-suite.sh: cannot list $name's tests"; return 1; }
  [ -n "$names" ] || return 0 # none: 'meson test' with no name would run them all
  [ "$name" = build-ci ] && [ "$phase" = shared ] && jobs=3
  # shellcheck disable=SC2086 # one test name a word
  meson test -C "$name" --no-rebuild --logbase "tests-$phase" --print-errorlogs \
    --num-processes "$jobs" --timeout-multiplier 4 --wrapper "$root/tests/suite-lock.sh" $names \
    >>"$name.test.log" 2>&1 || true
}

build_failed=0
CC=gcc build build-ci -Dwerror=true -Dbuildtype=debugoptimized -Db_coverage=true ||
  build_failed=$((build_failed+1))
if [ "$asan" = 1 ]; then
  CC=gcc build build-asan -Db_sanitize=address,undefined -Dbuildtype=debug ||
    build_failed=$((build_failed+1))
fi
if [ -n "$torch2_pid" ]; then
  if wait "$torch2_pid"; then torch2_result=OK; else torch2_result=FAIL; fi
  echo "== torch 2.6 root: $torch2_result"
  cat torch2-root.log
fi
rm -f /tmp/rdzv-suite.lock /tmp/rdzv-suite.lock.turn

# The Debian package (built, installed, a job run from it, removed; needs root: skipped
# otherwise), then pip install (tests/wheel-test.sh: the wheel built with meson-python, installed
# offline into a fresh venv, jobs run from the venv's binaries only; no root needed). They run
# beside the meson tests, one after the other, each under tests/suite-lock.sh's shared lock (so
# never beside a test that needs the machine to itself; each compiles at nice 10, so that takes
# the CPU the tests leave idle), output in package-test.log and wheel-test.log, printed when the
# tests end. Results: OK, FAIL or SKIP in NAME.result.
rm -f package-test.result wheel-test.result
extra_tests() {
  if [ "$package" = 1 ] && [ "$(id -u)" = 0 ]; then
    if tests/suite-lock.sh bash tests/package-test.sh >package-test.log 2>&1; then
      echo OK >package-test.result
    else
      echo FAIL >package-test.result
    fi
  else
    echo SKIP >package-test.result
    [ "$package" = 1 ] && echo "skipped (not root)" >package-test.log
  fi
  if tests/suite-lock.sh bash tests/wheel-test.sh >wheel-test.log 2>&1; then
    echo OK >wheel-test.result
  else
    echo FAIL >wheel-test.result
  fi
}
echo "== package and wheel: tests/package-test.sh, tests/wheel-test.sh (beside the tests)"
extra_tests &
extra_pid=$!
logs=()
for b in "${builds[@]}"; do
  find "$b" -name '*.gcda' -delete  # coverage of this run only
  rm -f "$b"/meson-logs/tests*.json "$b.test.log"
  echo "== test $b (log: $b.test.log)"
  logs+=("$b")
done
for phase in shared exclusive; do
  # The package and wheel tests hold the shared lock, so no exclusive test can start before
  # they end; waiting here keeps that wait out of the exclusive tests' timeouts (on a busy
  # machine the wheel's build outlasted the shared tests by minutes).
  [ "$phase" = exclusive ] && wait "$extra_pid"
  echo "== $phase tests, both builds ($(date -u +%H:%M:%S))"
  pids=()
  for b in "${builds[@]}"; do
    run_tests "$b" "$phase" &
    pids+=($!)
  done
  wait "${pids[@]}"
done
for b in "${builds[@]}"; do
  echo "== test $b"
  cat "$b.test.log"
done
[ "$package" = 1 ] && { echo "== package: tests/package-test.sh"; cat package-test.log; }
echo "== wheel: tests/wheel-test.sh"
cat wheel-test.log
pkg_result=$(cat package-test.result 2>/dev/null || echo FAIL)
wheel_result=$(cat wheel-test.result 2>/dev/null || echo FAIL)
# Line and branch coverage per directory of the gcc build's tests (reported, not gated).
[ -d build-ci/meson-logs ] && { /usr/bin/python3 tests/coverage.py . build-ci || true; }

# Count results from meson's JSON logs (meson's own summary is not read by CI).
/usr/bin/python3 - "$SECONDS" "$build_failed" "$pkg_result" "$torch2_result" "$wheel_result" \
  "${logs[@]}" <<'PY'
import glob, json, sys
took = int(sys.argv.pop(1))
build_failed = int(sys.argv[1])
passed = failed = skipped = 0
for name, res in (("package-test", sys.argv[2]), ("torch2-root", sys.argv[3]),
                  ("wheel-test", sys.argv[4])):
    if res == "OK":
        passed += 1
    elif res == "SKIP":
        skipped += 1
    else:
        failed += 1
        print("FAILED " + name)
for b in sys.argv[5:]:
    found = glob.glob(f"{b}/meson-logs/tests-*.json")
    if not found:
        failed += 1
        print(f"{b}: no test log (meson-logs/tests-*.json)")
        continue
    lines = [ln for f in found for ln in open(f).read().splitlines()]
    for line in lines:
        t = json.loads(line)
        res = t["result"]
        if t["name"].endswith("test-job-sim"):  # its count: "simulated N events over ..."
            print("".join(f"[{b}] {ln[2:]}\n" for ln in (t.get("stdout") or "").splitlines()
                          if ln.startswith("# simulated ")), end="")
        if res in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif res == "SKIP":
            skipped += 1
        else:
            failed += 1
            # CI keeps only the end of what the suite printed: the failed test's own last
            # lines go here, beside its name.
            tail = ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()[-40:]
            print(f"--- the last {len(tail)} lines of [{b}] {t['name']}")
            print("\n".join(line[:300] for line in tail))
            print(f"FAILED [{b}] {t['name']}: {res}")
failed += build_failed
print(f"run-suite.sh took {took // 60} min {took % 60} s")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
