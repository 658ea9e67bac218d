#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every shell block of the user docs runs as written (meson test docs-commands).

Reads README.md and docs/guide/*.md, takes each ```sh, ```bash and ```console fenced block (a
console block's commands are its lines that start with "$ ") and runs it with bash -e in a
scratch directory that holds the source tree's top-level entries as links, with the build's
binaries first on PATH and then the system's (so python3 is /usr/bin/python3, with Debian's
torch). A block fails when it exits non-zero or runs past its time (60 s).

A comment on the line before a fence says how a block is run:
  <!-- doc-test: skip: REASON -->   not run; listed with its reason (apt-get, several hosts, ...)
  <!-- doc-test: slurm -->          run against a local three-node Slurm (tests/slurm/), started
                                    once for the blocks that need it; listed as not run, with why,
                                    where it cannot start (not root, no Slurm packages).
No block may run `exit` in the shell itself (pasted into a terminal, it closes it), run or not.
docs/BENCHMARKS.md's blocks are benchmarks: they are listed as not run. Every relative link of
README.md, NEWS.md, HACKING.md and docs/ must name a file. As root, the blocks run
in a network namespace of their own, so the fixed ports the docs use (29400) meet no other
process of this machine. Each block's process group is killed when it ends.

Environment: RDZV_BUILD_ROOT, RDZV_SOURCE_ROOT (set by meson); RDZV_DOC_BLOCKS=FILE[:LINE],...
runs only those blocks."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("RDZV_SOURCE_ROOT",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("RDZV_BUILD_ROOT", os.path.join(SRC, "build"))
BLOCK_TIMEOUT = 60
# A Debian user's PATH: python3 is Debian's, whose torch the docs' examples import.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
SHELLS = ("sh", "bash", "console")


def doc_files():
    guide = os.path.join(SRC, "docs", "guide")
    names = ["README.md"] + sorted(os.path.join("docs", "guide", f) for f in os.listdir(guide)
                                   if f.endswith(".md"))
    return names


def blocks(path):
    """[(line, language, mark, text)] of the fenced blocks of PATH (line: the opening fence's)."""
    out, lines = [], open(os.path.join(SRC, path), encoding="utf-8").read().split("\n")
    i, prev = 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            if lines[i].strip():
                prev = lines[i]
            i += 1
            continue
        indent, lang, start = len(m.group(1)), m.group(2), i + 1
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        if i == len(lines):
            out.append((start, lang, "unclosed", ""))
        mk = MARK.match(prev)
        out.append((start, lang, mk.group(1) if mk else None, "\n".join(body) + "\n"))
        prev, i = "", i + 1
    return out


def needs(script):
    """Why SCRIPT cannot run with this build and machine, or None."""
    if re.search(r"(^|[\s;&|(])rdzv-train\b", script) and \
            not os.path.exists(os.path.join(BUILD, "train", "rdzv-train")):
        return "needs rdzv-train, which this build has not built (-Dtrainer)"
    if "examples/autoencoder.py" in script and not have_torch():
        return "needs PyTorch for /usr/bin/python3 (python3-torch)"
    return None


_torch = []


def have_torch():
    if not _torch:
        _torch.append(subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                     capture_output=True).returncode == 0)
    return _torch[0]


def script_of(lang, text):
    if lang != "console":
        return text
    return "".join(ln[2:] + "\n" for ln in text.splitlines() if ln.startswith("$ "))


class Slurm:
    """The local Slurm of tests/slurm/local-slurm.sh, started on first use."""

    def __init__(self):
        self.dir, self.env, self.why_not = None, None, None

    def start(self):
        if self.env or self.why_not:
            return self.env
        if os.geteuid() != 0:
            self.why_not = "the local Slurm needs root"
            return None
        if not shutil.which("slurmctld") or not shutil.which("sbatch"):
            self.why_not = "Slurm is not installed (slurmctld, slurm-client)"
            return None
        self.dir = tempfile.mkdtemp(prefix="rdzv-doc-slurm-")
        r = subprocess.run(["bash", os.path.join(SRC, "tests", "slurm", "local-slurm.sh"),
                            "start", self.dir], capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            self.why_not = "cannot start a local Slurm: " + (r.stderr or r.stdout)[-300:]
            return None
        # sbatch --wait polls its job after 2, 8 and 32 s unless MinJobAge is short: with 4 s,
        # every 2 s (this Slurm is the test's own; a job's record then lives 4 s after its end).
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "a") as f:
            f.write("MinJobAge=4\n")
        r = subprocess.run(["scontrol", "reconfigure"], env={**os.environ, "SLURM_CONF": conf},
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            print("scontrol reconfigure failed (sbatch --wait polls slowly): " + r.stderr[-200:])
        # The template's binaries are the build's; its workers per node as written: no GPU
        # here, so 1 (the line runs as written on a CPU-only cluster).
        self.env = {"SLURM_CONF": conf,
                    "RDZV_BIN": os.path.join(BUILD, "agent"),
                    "RDZVD_BIN": os.path.join(BUILD, "daemon")}
        print("local Slurm started (%s); its blocks run with RDZV_BIN, RDZVD_BIN = the build's"
              % self.dir, flush=True)
        return self.env

    def stop(self):
        if self.dir:
            subprocess.run(["bash", os.path.join(SRC, "tests", "slurm", "local-slurm.sh"),
                            "stop", self.dir], timeout=60)
            shutil.rmtree(self.dir, ignore_errors=True)


def scratch():
    """A directory with the source tree's top-level entries as links (the docs' relative paths)."""
    d = tempfile.mkdtemp(prefix="rdzv-doc-")
    for name in os.listdir(SRC):
        if name == ".git" or name.startswith("build"):
            continue
        os.symlink(os.path.join(SRC, name), os.path.join(d, name))
    return d


def kill_left(pgid, d):
    """SIGKILL what the block left: its process group, and what it started in a session of its
    own (the rdzvd an agent hosts outlives it by its --exit-when-idle): every process whose
    environment holds TMPDIR=D."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    mark = ("TMPDIR=" + d).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if mark in env:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_block(script, extra_env):
    d = scratch()
    bins = [os.path.join(BUILD, b) for b in ("agent", "daemon", "ctl", "train")]
    env = {**os.environ, "PATH": ":".join(bins + [SYSTEM_PATH]),
           "HOME": d, "TMPDIR": d, "RDZV_TOKEN_DIR": os.path.join(d, "tokens"), **extra_env}
    t0 = time.monotonic()
    # Output to a file, not a pipe: what the block leaves in the background keeps a pipe open.
    with tempfile.TemporaryFile(mode="w+") as log:
        p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=d, env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = "timeout (%d s)" % BLOCK_TIMEOUT
        kill_left(p.pid, d)
        p.wait()
        log.seek(0)
        out = log.read()
    shutil.rmtree(d, ignore_errors=True)
    return rc, out, time.monotonic() - t0


def closes_shell(script):
    """The first line of script that runs `exit` in the shell itself (not in a subshell, a
    quoted `sh -c` or a heredoc's script): pasted into a terminal, it closes it. None
    when there is none."""
    tag = None
    for line in script.split("\n"):
        if tag is not None:
            tag = None if line.strip() == tag else tag
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        bare = re.sub(r"'[^']*'|\"(\\.|[^\"\\])*\"", "''", line)
        for x in re.finditer(r"(^|[;&|{]\s*)exit\b", bare):
            before = bare[:x.start()]
            if before.count("(") - before.count(")") <= 0:
                return line
        if m:
            tag = m.group(1)
    return None


def own_netns():
    """As root: re-run this test in a network namespace of its own, loopback up."""
    if os.geteuid() != 0 or os.environ.get("RDZV_DOC_NETNS") or not shutil.which("unshare"):
        return
    os.environ["RDZV_DOC_NETNS"] = "1"
    # An address beside loopback's: getaddrinfo's AI_ADDRCONFIG (slurmctld's listen) needs one.
    cmd = ("ip link set lo up && ip addr add 10.254.0.1/32 dev lo && "
           "exec /usr/bin/python3 \"$0\" \"$@\"")
    r = subprocess.run(["unshare", "--net", "sh", "-c", cmd, os.path.abspath(__file__)]
                       + sys.argv[1:])
    sys.exit(r.returncode)


def broken_links():
    """The relative links of the docs (README, NEWS, HACKING, docs/) that name no file."""
    names = ["README.md", "NEWS.md", "HACKING.md"]
    for top, _, files in os.walk(os.path.join(SRC, "docs")):
        names += [os.path.relpath(os.path.join(top, f), SRC) for f in files if f.endswith(".md")]
    bad = []
    for name in sorted(names):
        text = open(os.path.join(SRC, name), encoding="utf-8").read()
        for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", text):
            if not re.match(r"[a-z]+:", m.group(1)) and not os.path.exists(
                    os.path.join(SRC, os.path.dirname(name), m.group(1))):
                bad.append("%s: %s" % (name, m.group(1)))
    return bad


def main():
    own_netns()
    want = [w for w in os.environ.get("RDZV_DOC_BLOCKS", "").split(",") if w]
    t_start = time.monotonic()
    failed, ran, not_run, seen = [], 0, [], {}
    slurm = Slurm()
    for link in broken_links():
        failed.append(link)
        print("FAIL: a link to no file: " + link)
    try:
        for path in doc_files():
            for line, lang, mark, text in blocks(path):
                if lang not in SHELLS:
                    continue
                where = "%s:%d" % (path, line)
                if want and not any(where == w or path == w for w in want):
                    continue
                extra = {}
                closes = closes_shell(script_of(lang, text))
                if closes:
                    failed.append(where)
                    print("FAIL: %s: `exit` closes the terminal the block is pasted into (use "
                          "`false`, or a subshell): %s" % (where, closes))
                if mark == "unclosed":
                    failed.append(where)
                    print("FAIL: %s: the fence is never closed" % where)
                    continue
                if mark is not None and mark.startswith("skip:") and mark[5:].strip():
                    not_run.append((where, mark[5:].strip()))
                    continue
                if mark == "slurm":
                    extra = slurm.start()
                    if extra is None:
                        not_run.append((where, "needs Slurm: " + slurm.why_not))
                        continue
                elif mark is not None:
                    failed.append(where)
                    print("FAIL: %s: unknown doc-test mark %r (skip: REASON, or slurm)"
                          % (where, mark))
                    continue
                script = script_of(lang, text)
                missing = needs(script)
                if missing:
                    not_run.append((where, missing))
                    continue
                if script in seen:
                    print("ok: %s: the same block as %s, run there" % (where, seen[script]))
                    continue
                seen[script] = where
                rc, out, secs = run_block(script, extra)
                ran += 1
                if rc == 0:
                    print("ok: %s (%.1f s)" % (where, secs), flush=True)
                else:
                    failed.append(where)
                    print("FAIL: %s: exit %s after %.1f s\n--- the block:\n%s--- its output "
                          "(last 3000 characters):\n%s" % (where, rc, secs, script, out[-3000:]),
                          flush=True)
        for line, lang, mark, _ in blocks(os.path.join("docs", "BENCHMARKS.md")):
            if lang in SHELLS and not want:
                not_run.append(("docs/BENCHMARKS.md:%d" % line,
                                "a benchmark (minutes of load): not run by this test"))
    finally:
        slurm.stop()
    print("\nnot run:")
    for where, why in not_run:
        print("  %s: %s" % (where, why))
    total = time.monotonic() - t_start
    print("\n%d block(s) run, %d failed, %d not run, %.1f s" % (ran, len(failed), len(not_run),
                                                               total))
    if not want and ran == 0:
        print("FAIL: no block ran")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
