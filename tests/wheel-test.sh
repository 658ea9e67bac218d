#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pip install, as PyTorch users install a launcher: README.md's lines ("pip, in a virtual
# environment"), read from README.md and run as written in a copy of this tree: a venv that sees
# Debian's packages (torch, meson-python), and pip building the wheel offline with Debian's
# meson-python (--no-index --no-build-isolation: no package registry is asked), then README's
# job (python -m rdzv.run, an unmodified DDP script). Then it checks what the venv got (the
# binaries, the rdzv package, the man pages, the wheel's metadata) and runs a 2-worker job from
# the venv's binaries only: rdzv-agent --standalone (its embedded rdzvd) with a Python worker, then
# the same through `python -m rdzv.run`, and rdzvd and rdzvctl from the venv. PATH holds no other
# rdzv (a Debian package or `meson install` may have put one in /usr).
# Prints "ok"/"FAIL" lines; exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/.."
src=$PWD
fail=0
check() {  # what, command...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
py=/usr/bin/python3
if ! "$py" -c 'import mesonpy, venv, pip' 2>/dev/null; then
  echo "wheel-test.sh: needs Debian's python3-mesonpy, python3-venv and python3-pip" >&2
  exit 2
fi
work=$(mktemp -d /tmp/rdzv-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
bash "$src/tests/copy-tree.sh" "$src" "$work/src" || { echo "FAIL: copy the tree"; exit 1; }
t0=$SECONDS
# README's block: the lines between the fence after "**pip, in a virtual environment**" and its end.
readme=$(awk '/^\*\*pip, in a virtual environment\*\*/ { f = 1 }
              f && /^```sh$/ { b = 1; next }
              b && /^```$/ { exit }
              b' "$src/README.md")
check "README.md has the pip lines" grep -q 'pip install --no-index' <<<"$readme"
echo "== README's lines, in a copy of the tree (log: $work/readme.log):"
echo "$readme" | sed 's/^/   /'
(cd "$work/src" && find . -type f | sort) >"$work/before.txt"
# At nice 10: run-suite.sh runs this beside the tests, whose CPU it must not take.
if (cd "$work/src" && env PATH=/usr/local/bin:/usr/bin:/bin nice -n 10 bash -e -c "$readme") \
    >"$work/readme.log" 2>&1; then
  echo "ok: README's pip lines ran as written ($((SECONDS - t0)) s): build, install, a DDP job"
else
  tail -30 "$work/readme.log"; echo "FAIL: README's pip lines"; exit 1
fi
# What the build left in the tree besides the venv: nothing git would show (meson-python
# 0.12 writes .mesonpy-native-file.ini into the source tree, which .gitignore names).
(cd "$work/src" && find . -type f -not -path './VENV/*' | sort) >"$work/after.txt"
left=$(comm -13 "$work/before.txt" "$work/after.txt" | sed 's|^\./||' |
  while read -r f; do git -C "$src" check-ignore -q --no-index "$f" || echo "$f"; done)
check "the pip build leaves nothing in the tree that git would show${left:+ (left: $left)}" \
  test -z "$left"
grep -q '"event": "done"' "$work/readme.log" ||
  { echo "FAIL: README's job did not finish"; fail=1; }
v=$work/src/VENV/bin
for b in rdzv-agent rdzvd rdzvctl; do
  check "the wheel installs $b into the venv" test -x "$v/$b"
done
"$v/pip" show -f rdzv >"$work/show.txt" 2>&1
if grep -q 'bin/rdzv-train$' "$work/show.txt"; then
  check "the wheel's rdzv-train is in the venv" test -x "$v/rdzv-train"
else
  echo "ok: this build has no rdzv-train (no trainer: -Dtrainer, g++, libgloo-dev): none installed"
fi
for m in rdzv/__init__.py rdzv/torch.py rdzv/run.py rdzv/standby.py rdzv/_hooks.py \
         rdzv/hooks/sitecustomize.py; do
  check "the wheel holds $m" grep -q " $m\$" "$work/show.txt"
done
check "the wheel's metadata: a summary" grep -q '^Summary: ..' "$work/show.txt"
check "the wheel's metadata: the licence" grep -q '^License: Apache-2.0' "$work/show.txt"
check "rdzvd --version from the venv" "$v/rdzvd" --version
# The man pages: in VENV/share/man (the wheel's data dir is the venv's prefix), found by man with
# -M and, as for the binaries, with the venv's bin on PATH (man-db looks in BIN/../share/man).
mandir=$work/src/VENV/share/man
for p in man1/rdzv-agent.1 man1/rdzvctl.1 man1/rdzv-train.1 man8/rdzvd.8; do
  check "the wheel installs the man page $p into the venv" test -s "$mandir/$p"
  check "the wheel lists $p" grep -q "/share/man/$p\$" "$work/show.txt"
done
check "man -M VENV/share/man rdzv-agent finds the venv's page" \
  sh -c "man -M '$mandir' -w rdzv-agent | grep -qx '$mandir/man1/rdzv-agent.1'"
check "man rdzvd, the venv's bin on PATH, finds the venv's page" \
  sh -c "env -i PATH='$v:/usr/bin:/bin' man -w rdzvd | grep -qx '$mandir/man8/rdzvd.8'"
check "man -M VENV/share/man rdzvctl renders the page" \
  sh -c "MANWIDTH=80 man -M '$mandir' rdzvctl 2>/dev/null | grep -q 'rdzvctl'"

# The worker: a Python script that reports progress through the venv's rdzv and writes what it
# was given. Run from / with a PATH of the venv and the system's basic tools only.
cat >"$work/worker.py" <<'PY'
import json, os, sys
import rdzv
rdzv.progress(1)
out = os.path.join(os.environ["WHEEL_TEST_OUT"], "rank%s.json" % os.environ["RANK"])
with open(out, "w") as f:
    json.dump({k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                               "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
              | {"python": sys.executable, "rdzv": rdzv.__file__,
                 "hooks": "rdzv._hooks" in sys.modules}, f)
PY
job() {  # name, command...
  local name=$1; shift
  local out=$work/out-$name
  mkdir "$out"
  if (cd / && env -i PATH="$v:/usr/bin:/bin" HOME=/tmp WHEEL_TEST_OUT="$out" \
      timeout 120 "$@" >"$work/$name.log" 2>&1); then
    echo "ok: $name: the job exited 0"
  else
    echo "FAIL: $name: the job exited non-zero"; tail -20 "$work/$name.log"; fail=1; return
  fi
  "$py" - "$out" "$v" "$name" <<'PY' || fail=1
import json, os, sys
out, venv, name = sys.argv[1:]
ranks = sorted(os.listdir(out))
got = [json.load(open(os.path.join(out, r))) for r in ranks]
ok = (ranks == ["rank0.json", "rank1.json"] and all(g["WORLD_SIZE"] == "2" for g in got) and
      got[0]["MASTER_PORT"] == got[1]["MASTER_PORT"] and
      all(g["rdzv"].startswith(os.path.dirname(venv)) and g["hooks"] for g in got))
print("%s: %s: 2 workers, world 2, one store port, rdzv and its Python hooks from the venv (%s)"
      % ("ok" if ok else "FAIL", name, got[0]["rdzv"] if got else "no worker wrote"))
sys.exit(0 if ok else 1)
PY
}
job agent "$v/rdzv-agent" --standalone --nproc-per-node 2 "$work/worker.py"
# The venv not activated, nor on PATH: rdzv-agent runs the script with the venv's interpreter
# (as torchrun runs its own), and says so.
job agent-venv-not-on-path env PATH=/usr/bin:/bin "$v/rdzv-agent" --standalone --nproc-per-node 2 \
  "$work/worker.py"
check "rdzv-agent from a venv not on PATH: its workers ran with the venv's python" \
  grep -q "\"python\": \"$v/python" "$work/out-agent-venv-not-on-path/rank0.json"
check "rdzv-agent from a venv not on PATH: it named the venv's python" \
  grep -q "workers run Python with $v/python3 (this virtual environment's" \
  "$work/agent-venv-not-on-path.log"
job python-m-rdzv.run "$v/python" -m rdzv.run --standalone --nproc-per-node 2 "$work/worker.py"
check "python -m rdzv.run's workers ran with the venv's python" \
  grep -q "\"python\": \"$v/python" "$work/out-python-m-rdzv.run/rank0.json"
check "rdzv-agent --help through python -m rdzv.run" \
  sh -c "'$v/python' -m rdzv.run --help | grep -q -- --nnodes"
# rdzvd and rdzvctl from the venv: a daemon on a free port, asked for its status.
"$v/rdzvd" --bind 127.0.0.1 --port 0 --port-file "$work/rdzvd.port" 2>"$work/rdzvd.log" &
dpid=$!
for _ in $(seq 50); do [ -s "$work/rdzvd.port" ] && break; sleep 0.1; done
port=$(head -1 "$work/rdzvd.port")
check "rdzvctl status against the venv's rdzvd (port ${port:-none})" \
  sh -c "[ -n '$port' ] && '$v/rdzvctl' --endpoint 127.0.0.1:$port status >/dev/null"
kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null
exit $fail
