#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# limits.py: the size limits of the sources, checked rather than remembered:
#   - no line of C/C++/CUDA, Python or shell (by extension, or by a #! line naming sh, bash or
#     python) passes 100 columns (characters, tabs to 8), anywhere in the tree;
#   - no C/C++/CUDA source or header passes 900 lines, nor a Python file of python/ or
#     examples/; a Python file of tests/ may have 1500. The job machine's files (daemon/job/)
#     may have 1500: each holds one concept, and a concept may take that many lines.
#   - the tests call the job machine's private functions (those its private headers,
#     PRIVATE_HEADERS, declare and its public one does not) at most PRIVATE_CALLS times: they
#     drive its step (rdzvd_job_step) and read the Ready and its read-only views. A ratchet:
#     lower the ceiling as calls go.
# Each problem names FILE:LINE (or FILE and its length). A file that may stay longer for now is
# listed in EXCEPTIONS below with its present length, which it may not pass, and the reason; an
# exception whose file is gone or back within the limit is stale, and fails too.
#
# Not read: hidden folders (.git), debian/ (packaging, and a package build's trees), build
# folders (those holding meson-private/), __pycache__.
#
# Usage: limits.py [SOURCE_ROOT]   (default: the repository this file is in)
# It first checks itself on a small made-up tree with one problem of each kind, so that a
# checker that stopped finding anything fails too. Exit 0: clean; 1: problems (listed).

import os
import re
import sys
import tempfile

COLUMNS = 100
C_EXTS = (".c", ".h", ".cc", ".cu")
SHELL_EXTS = (".sh",)
PY_EXTS = (".py",)
C_LINES = 900
JOB_LINES = 1500
JOB_DIR = os.path.join("daemon", "job") + os.sep
PY_LINES = 900
PY_TEST_LINES = 1500
SKIP_DIRS = ("debian", "__pycache__")
PRIVATE_HEADERS = ("daemon/job/rdzvd-job-sm-int.h", "daemon/job/rdzvd-job-impl.h")
PUBLIC_HEADER = "daemon/job/rdzvd-job-sm.h"
# 37 of them are test-job-move.c's, whose point is the move table (issue 73 aims at 60).
PRIVATE_CALLS = 60

# path: (the most lines it may have, why it is longer than its limit). Split a file, then
# remove its line here.
EXCEPTIONS = {
    "tests/unit/test-journal.c": (1535, "one program for every record type's round trip and "
                                  "every torn tail; to be split by record type"),
    "tests/unit/test-store.c": (1100, "the store, its queues, its wait index and its budget; "
                                "to be split by what they test (the model check is apart)"),
    "tests/unit/test-msg.c": (1367, "one codec test per message of RENDEZVOUS.md; to be split "
                              "by message family"),
    "tests/unit/test-repl-net.c": (1116, "three replicas on one loop, one fixture for every "
                                   "case; to be split by case"),
    "tests/unit/test-repl.c": (953, "libraft's fixture for every case; to be split by case"),
    "agent/session/agent-session-sm.c": (1028, "the agent's session machine, one concept "
                                         "(issue 74: 1,500 at most). Split in two (a "
                                         "generation's life, the session's end), the walk of "
                                         "agent_session_step went from 2 rooms and 3 returns "
                                         "to 5 and 48"),
    "tests/unit/test-status.c": (913, "the status codec's bytes and bounds; to be split into "
                                 "encoder and decoder"),
}


def kind(path):
    """"c", "py", "sh" or None: what the limits of PATH are."""
    if path.endswith(C_EXTS):
        return "c"
    if path.endswith(PY_EXTS):
        return "py"
    if path.endswith(SHELL_EXTS):
        return "sh"
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").replace("/", " ").split()
    if any(w.startswith("python") for w in words):
        return "py"
    if any(w in ("sh", "bash", "dash") for w in words):
        return "sh"
    return None


def files(root):
    """[(relative path, kind)] of the files the limits apply to, sorted."""
    out = []
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and
                         not os.path.isdir(os.path.join(top, d, "meson-private")))
        for name in sorted(names):
            path = os.path.join(top, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            k = kind(path)
            if k:
                out.append((os.path.relpath(path, root), k))
    return out


def line_limit(rel, k):
    """The most lines REL may have, or None."""
    if k == "c":
        return JOB_LINES if rel.startswith(JOB_DIR) else C_LINES
    if k == "py":
        return PY_TEST_LINES if rel.startswith("tests" + os.sep) else PY_LINES
    return None


def check(root, exceptions=EXCEPTIONS):
    """A list of problems (strings); empty when the tree keeps its limits."""
    problems = []
    seen = set()
    for rel, k in files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for n, line in enumerate(lines, 1):
            width = len(line.expandtabs(8))
            if width > COLUMNS:
                problems.append("%s:%d: %d columns (at most %d)" % (rel, n, width, COLUMNS))
        limit = line_limit(rel, k)
        if limit is None:
            continue
        key = rel.replace(os.sep, "/")
        if key in exceptions:
            seen.add(key)
            most, _ = exceptions[key]
            if len(lines) <= limit:
                problems.append("%s: %d lines, within %d: remove its exception from %s"
                                % (rel, len(lines), limit, os.path.basename(__file__)))
            elif len(lines) > most:
                problems.append("%s: %d lines, more than the %d its exception allows (the limit "
                                "is %d): split it" % (rel, len(lines), most, limit))
        elif len(lines) > limit:
            problems.append("%s: %d lines (at most %d): split it" % (rel, len(lines), limit))
    for key in sorted(set(exceptions) - seen):
        problems.append("%s: has an exception but is not there: remove it from %s"
                        % (key, os.path.basename(__file__)))
    return problems


def declared(path):
    """The rdzvd_ functions the C header PATH declares (comments left out)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    return set(re.findall(r"\b(rdzvd_\w+)\s*\(", text))


def private_calls(root):
    """{name: calls} of the job machine's private functions in the files under tests/."""
    public = declared(os.path.join(root, PUBLIC_HEADER))
    names = set()
    for h in PRIVATE_HEADERS:
        names |= declared(os.path.join(root, h))
    names -= public
    if not names:
        return {}
    call = re.compile(r"\b(%s)\(" % "|".join(sorted(names)))
    counts = {}
    for top, dirs, fnames in os.walk(os.path.join(root, "tests")):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in fnames:
            with open(os.path.join(top, name), encoding="utf-8", errors="replace") as f:
                for m in call.finditer(f.read()):
                    counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def check_private(root, ceiling=PRIVATE_CALLS):
    """A problem when the tests call the machine's private functions more than ceiling times."""
    gone = [h for h in PRIVATE_HEADERS + (PUBLIC_HEADER,)
            if not os.path.isfile(os.path.join(root, h))]
    if gone:
        return ["%s: gone: name the job machine's headers in %s's PRIVATE_HEADERS"
                % (h, os.path.basename(__file__)) for h in gone]
    counts = private_calls(root)
    n = sum(counts.values())
    if n <= ceiling:
        return []
    most = ", ".join("%s %d" % (k, v) for k, v in
                     sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8])
    return ["tests/: %d calls of daemon/job's private functions (at most %d): drive the step "
            "(tests/unit/jobinput.h's jt_*) instead; most: %s" % (n, ceiling, most)]


def self_test_private():
    """Calls past the ceiling fail; a public function, a comment and a pointer do not count."""
    with tempfile.TemporaryDirectory(prefix="limits-") as d:
        tree = {
            PRIVATE_HEADERS[0]: "/* rdzvd_said(x) */\nvoid rdzvd_a(int x);\n"
                                "typedef void (*rdzvd_fn)(int);\n",
            PRIVATE_HEADERS[1]: "int rdzvd_b(void);\nvoid rdzvd_step(int);\n",
            PUBLIC_HEADER: "void rdzvd_step(int);\n",
            "tests/unit/t.c": "rdzvd_a(1); rdzvd_b(); rdzvd_step(2); rdzvd_said(3);\n",
            "tests/t.py": "rdzvd_a(2)\n",
        }
        for rel, text in tree.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        assert private_calls(d) == {"rdzvd_a": 2, "rdzvd_b": 1}, private_calls(d)
        assert check_private(d, 3) == [], "self-test: 3 calls within 3"
        bad = check_private(d, 2)
        assert len(bad) == 1 and bad[0].startswith("tests/: 3 calls"), bad
        os.remove(os.path.join(d, PRIVATE_HEADERS[1]))
        assert check_private(d, 3)[0].startswith(PRIVATE_HEADERS[1] + ": gone")


def self_test():
    """The checker finds a long line of each kind, a long file of each kind, a file past its
    exception and a stale exception; a clean tree passes."""
    long = "x" * (COLUMNS + 1)
    with tempfile.TemporaryDirectory(prefix="limits-") as d:
        tree = {
            "daemon/a.c": "int a;\n" * C_LINES,
            "common/b.h": "\tint b; /* %s */\n" % ("y" * (COLUMNS - 21)),
            "tests/t.py": "x = 1\n" * PY_TEST_LINES,
            "python/p.py": "x = 1\n" * PY_LINES,
            "deploy/job.sbatch": "#!/bin/bash\necho %s\n" % ("z" * (COLUMNS - 6)),
            "tests/big.c": "int t;\n" * (C_LINES + 5),
            "daemon/job/m.c": "int m;\n" * JOB_LINES,
            "README.md": long + "\n",
            "build/meson-private/x.c": long + "\n",
            "debian/rules.sh": long + "\n",
            ".hidden/x.py": long + "\n",
        }
        for rel, text in tree.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        os.makedirs(os.path.join(d, "build", "meson-private"), exist_ok=True)
        exc = {"tests/big.c": (C_LINES + 5, "made up")}
        clean = check(d, exc)
        assert clean == [], "self-test: clean tree reported %r" % clean
        bad_tree = {
            "daemon/a.c": "int a;\n" * (C_LINES + 1),
            "common/b.h": "\tint b; /* %s */\n" % ("y" * (COLUMNS - 18)),
            "tests/t.py": "x = 1\n" * (PY_TEST_LINES + 1),
            "python/p.py": "x = 1\n" * (PY_LINES + 1),
            "deploy/job.sbatch": "#!/bin/bash\necho %s\n" % long,
            "tests/big.c": "int t;\n" * (C_LINES + 6),
            "daemon/job/m.c": "int m;\n" * (JOB_LINES + 1),
        }
        for rel, text in bad_tree.items():
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        bad = check(d, dict(exc, **{"tests/gone.c": (1000, "made up")}))
        want = ["daemon/a.c: %d lines" % (C_LINES + 1), "common/b.h:1: 103 columns",
                "tests/t.py: %d lines" % (PY_TEST_LINES + 1),
                "python/p.py: %d lines" % (PY_LINES + 1), "deploy/job.sbatch:2: 106 columns",
                "tests/big.c: %d lines, more than" % (C_LINES + 6),
                "daemon/job/m.c: %d lines" % (JOB_LINES + 1),
                "tests/gone.c: has an exception but is not there"]
        for w in want:
            assert any(p.startswith(w) for p in bad), "self-test: missed %r in %r" % (w, bad)
        assert len(bad) == len(want), "self-test: more than expected: %r" % bad
        with open(os.path.join(d, "tests/big.c"), "w") as f:
            f.write("int t;\n")
        assert any(p.startswith("tests/big.c: 1 lines, within") for p in check(d, exc))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    self_test()
    self_test_private()
    problems = check(root) + check_private(root)
    for p in problems:
        print("limits: " + p)
    if problems:
        print("limits: %d problem(s): lines of at most %d columns; C files of at most %d lines "
              "(%d in daemon/job/), Python %d (%d in tests/); at most %d calls of daemon/job's "
              "private functions in tests/"
              % (len(problems), COLUMNS, C_LINES, JOB_LINES, PY_LINES, PY_TEST_LINES,
                 PRIVATE_CALLS))
        return 1
    print("limits: %d files keep their limits (%d exceptions, in %s); the tests call "
          "daemon/job's private functions %d times (at most %d)"
          % (len(files(root)), len(EXCEPTIONS), os.path.basename(__file__),
             sum(private_calls(root).values()), PRIVATE_CALLS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
