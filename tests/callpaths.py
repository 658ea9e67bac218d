#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# callpaths.py: how many files of the job machine one input passes through, from its wire
# handler to the Ready (docs/design/architecture.md, "The job machine and its adapters"), and
# how many times its path returns to a file it had left. A reader follows a message through
# that many files, and back; fewer is better, and the bounds are tests/callpaths.txt's.
#
# It compiles each C file of daemon/job/ again, without optimisation, with gcc's
# -fcallgraph-info (the command lines come from BUILD_ROOT/compile_commands.json), and reads
# the direct calls from the .ci files gcc writes. From an input's starting functions it follows
# every direct call, except into the step's dispatch (rdzvd_job_step: it names every input's
# code, and each input is followed from its own part of it). It counts the files of daemon/job/
# that define a function it reached, headers with inline functions among them. A call through a
# pointer (a timer's callback, an op) is not followed.
# The returns: the same calls walked depth first, in the order gcc lists them, each function
# read once (the starts in their order, then each one's calls). Each entry into a file of
# daemon/job/ entered before, from another file (or as a start), is a return to it.
#
# tests/callpaths.txt, one line an input: "NAME FILES RETURNS FUNCTION [FUNCTION ...]", a
# function as "FILE:NAME" for a static one or "NAME" for a global one. Every function must be
# found.
#
# Usage: callpaths.py SOURCE_ROOT BUILD_ROOT [-v]   (-v: the files of each input)
# It first checks itself on a small made-up tree, so that a checker that stopped finding calls
# fails too. Exit 0: every input within its bound; 1: problems (listed).

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

DIR = "daemon/job/"
NODE_RE = re.compile(r'node: \{ title: "([^"]+)" label: "[^\\"]*\\n([^:"]+):\d+:\d+"( shape)?')
EDGE_RE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
DISPATCH = "rdzvd_job_step"


def compile_ci(root, build, out):
    """Compile daemon/job/*.c into out with -fcallgraph-info; the .ci files' paths."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    cis = []
    for e in entries:
        cwd = e.get("directory", build)
        src = os.path.relpath(os.path.normpath(os.path.join(cwd, e["file"])), root)
        if not (src.startswith(DIR) and src.endswith(".c")):
            continue
        args, skip = [], False
        for a in shlex.split(e["command"]) if "command" in e else e["arguments"]:
            if skip:
                skip = False
            elif a in ("-o", "-MQ", "-MF"):
                skip = True
            elif a != "-MD" and not a.startswith("-O"):
                args.append(a)
        obj = os.path.join(out, src.replace("/", "_") + ".o")
        subprocess.run(args + ["-O0", "-fcallgraph-info", "-o", obj], cwd=cwd, check=True)
        cis.append(obj[:-2] + ".ci")
    return cis


def read_graph(root, cis):
    """(defs, edges): {function: its file, relative to root}, {function: [function]} (in the
    order of the .ci file, each once). A static function's name is "FILE:NAME" as gcc writes it
    (FILE as the compiler saw it)."""
    defs, edges = {}, {}
    for ci in cis:
        with open(ci) as f:
            for line in f:
                m = NODE_RE.match(line)
                if m:
                    if not m[3]:  # no shape: defined in this unit
                        defs[m[1]] = m[2]
                    continue
                m = EDGE_RE.match(line)
                if m:
                    out = edges.setdefault(m[1], [])
                    if m[2] not in out:
                        out.append(m[2])
    return defs, edges


def norm(root, cwd_path):
    """A path as gcc wrote it (relative to the build directory) made relative to root."""
    return os.path.relpath(os.path.normpath(cwd_path), root)


def find_starts(defs, starts, root, build):
    """(the functions the starts name, in their order; the starts not found)."""
    found, missing = [], []
    names = {}
    for fn in defs:
        names.setdefault(fn.rsplit(":", 1)[-1], []).append(fn)
    for s in starts:
        if ":" in s:
            path, name = s.rsplit(":", 1)
            hits = [fn for fn in names.get(name, ()) if ":" in fn
                    and norm(root, os.path.join(build, fn.rsplit(":", 1)[0])) == path]
        else:
            hits = [s] if s in defs else []
        if not hits:
            missing.append(s)
        found.extend(hits)
    return found, missing


def files_reached(defs, edges, starts, root, build):
    """The files of DIR whose functions the starts reach; the starts not found."""
    seen = set()
    todo, missing = find_starts(defs, starts, root, build)
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        if fn.rsplit(":", 1)[-1] == DISPATCH and fn not in starts:
            continue
        todo.extend(edges.get(fn, ()))
    files = set()
    for fn in seen:
        if fn in defs:
            path = norm(root, os.path.join(build, defs[fn]))
            if path.startswith(DIR):
                files.add(path)
    return sorted(files), missing


def returns(defs, edges, starts, root, build):
    """How many times the depth-first walk from the starts enters a file of DIR it had entered
    before, coming from another file (a start: from none)."""
    first, _ = find_starts(defs, starts, root, build)
    seen, entered, count = set(), set(), 0
    todo = [(fn, None, True) for fn in reversed(first)]
    while todo:
        fn, came_from, start = todo.pop()
        path = norm(root, os.path.join(build, defs[fn])) if fn in defs else None
        where = path if path and path.startswith(DIR) else came_from
        if where != came_from and where is not None:
            count += where in entered
            entered.add(where)
        if fn in seen:
            continue
        seen.add(fn)
        if fn.rsplit(":", 1)[-1] == DISPATCH and not start:
            continue
        todo.extend((c, where, False) for c in reversed(edges.get(fn, [])))
    return count


def read_bounds(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 4 or not line[1].isdigit() or not line[2].isdigit():
                raise SystemExit("%s:%d: expected 'NAME FILES RETURNS FUNCTION ...'" % (path, n))
            out.append((line[0], int(line[1]), int(line[2]), line[3:]))
    return out


def check(root, build, bounds, verbose=False):
    """The problems, one line each."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        defs, edges = read_graph(root, compile_ci(root, build, tmp))
    for name, bound, most, starts in bounds:
        files, missing = files_reached(defs, edges, starts, root, build)
        back = returns(defs, edges, starts, root, build)
        for s in missing:
            problems.append("%s: no function %s in %s" % (name, s, DIR))
        listed = " ".join(os.path.basename(f) for f in files)
        if verbose:
            print("%s: %d files (bound %d), %d returns (bound %d): %s"
                  % (name, len(files), bound, back, most, listed))
        if len(files) > bound:
            problems.append("%s passes through %d files of %s, more than %d: %s"
                            % (name, len(files), DIR, bound, listed))
        if back > most:
            problems.append("%s returns %d times to a file of %s it had left, more than %d"
                            % (name, back, DIR, most))
    return problems


def self_check():
    """A made-up machine of four files: an input through three of them, past its bound of 2,
    and back to two of them, past its bound of 1."""
    with tempfile.TemporaryDirectory() as root:
        build = os.path.join(root, "build")
        os.makedirs(os.path.join(root, DIR))
        os.makedirs(build)
        srcs = {
            "wire.c": "int rdzvd_job_step(int);\nint deep(int);\n"
                      "static int handle(int x) { return rdzvd_job_step(x); }\n"
                      "int wire(int x) { return handle(x) + deep(x); }\n",
            "step.c": "int one(int);\nint other(int);\n"
                      "int rdzvd_job_step(int x) { return x ? one(x) : other(x); }\n",
            "one.c": "int deep(int x) { return x; }\nint one(int x) { return deep(x); }\n",
            "other.c": "int other(int x) { return x; }\n",
        }
        cmds = []
        for name, text in srcs.items():
            with open(os.path.join(root, DIR, name), "w") as f:
                f.write(text)
            cmds.append({"directory": build, "file": "../" + DIR + name,
                         "command": "cc -O2 -c ../%s%s -o %s.o" % (DIR, name, name)})
        with open(os.path.join(build, "compile_commands.json"), "w") as f:
            json.dump(cmds, f)
        got = check(root, build, [("IN", 2, 1, [DIR + "wire.c:handle", "wire", "one"])])
        want = ["IN passes through 3 files of %s, more than 2: one.c step.c wire.c" % DIR,
                "IN returns 2 times to a file of %s it had left, more than 1" % DIR]
        if got != want:
            raise SystemExit("callpaths: the self-check found %s, not %s" % (got, want))


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: callpaths.py SOURCE_ROOT BUILD_ROOT [-v]")
    root, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    self_check()
    problems = check(root, build, read_bounds(os.path.join(root, "tests", "callpaths.txt")),
                     "-v" in sys.argv[3:])
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
