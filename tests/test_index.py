#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_index.py SOURCE_ROOT BUILD_ROOT: every test name that the behaviour index of
# tests/README.md ("Where a behaviour is tested") writes in backquotes is a test of this build
# (BUILD_ROOT/meson-info/intro-tests.json, what `meson test --list` prints). A name may end in
# `*` for every test that starts so; it must match one. Each name that matches none is printed
# with its line. Also each row of docs/guide/failures.md's table ("What each failure does") has a
# row in tests/README.md's "failures.md, row by row" (by its first cell), which names tests that
# exist: `SUITE:Class.test_name` (a method of that class in the Python file of meson test SUITE)
# or `test-name.c:function` (a case that test-name's main runs). Exit 0: every name is a test and
# every row has one; 1: some are not (listed).
import ast
import fnmatch
import json
import os
import re
import sys

HEADING = "## Where a behaviour is tested"
# The tests' name prefixes (tests/*/meson.build) and the tests of tests/meson.build.
NAME = re.compile(r"^(test|integration|rendezvous|faults|fuzz|train|agent|bench|docs)-[\w.*-]+$"
                  r"|^(layering|limits|commits|install-prefix)$")


def index_names(path):
    """[(line, name)] of the test names in the index section of PATH."""
    out, inside = [], False
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("## "):
            inside = line.strip() == HEADING
        elif inside:
            out += [(i, w) for w in re.findall(r"`([^`\s]+)`", line) if NAME.match(w)]
    return out


ROWS_FAILURES = "## What each failure does"
ROWS_MAP = "## failures.md, row by row"


def table_rows(path, heading):
    """[(line, [cells])] of the table rows (not the header nor its rule) under heading."""
    out, inside, seen_rule = [], False, False
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("## "):
            inside, seen_rule = line.strip() == heading, False
        elif inside and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if set(line.strip()) <= set("|-: "):
                seen_rule = True
            elif seen_rule:
                out.append((i, cells))
    return out


def python_test_exists(path, cls, method):
    """Whether the Python file at path defines class cls with a method method."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    return any(isinstance(n, ast.ClassDef) and n.name == cls and
               any(isinstance(f, ast.FunctionDef) and f.name == method for f in n.body)
               for n in tree.body)


def row_test_problem(src, cmds, name):
    """Why name (`SUITE:Class.test` or `test-x.c:function`) is not a test; None when it is."""
    m = re.fullmatch(r"([\w.-]+):(\w+)\.(\w+)", name)
    if m:
        suite, cls, method = m.groups()
        py = [a for a in cmds.get(suite, []) if a.endswith(".py")]
        if not py:
            return f"no Python test {suite} in this build"
        return None if python_test_exists(py[0], cls, method) else \
            f"{os.path.basename(py[0])} has no {cls}.{method}"
    m = re.fullmatch(r"(test-[\w-]+)\.c:(\w+)", name)
    if not m:
        return "not SUITE:Class.test_name nor test-name.c:function"
    if m.group(1) not in cmds:
        return f"no test {m.group(1)} in this build"
    code = open(os.path.join(src, "tests", "unit", m.group(1) + ".c"), encoding="utf-8").read()
    return None if f"TEST({m.group(2)});" in code else f"{m.group(1)}.c runs no {m.group(2)}"


def failures_rows(src, cmds):
    """Problems of the failures.md rows' tests, one line each."""
    guide = os.path.join(src, "docs", "guide", "failures.md")
    index = os.path.join(src, "tests", "README.md")
    rows = {cells[0]: i for i, cells in table_rows(guide, ROWS_FAILURES)}
    mapped = {cells[0]: (i, cells[1] if len(cells) > 1 else "")
              for i, cells in table_rows(index, ROWS_MAP)}
    bad = [f"docs/guide/failures.md:{i}: the row \"{r}\" has no tests in tests/README.md "
           f"(\"{ROWS_MAP[3:]}\")" for r, i in rows.items() if r not in mapped]
    for r, (i, cell) in mapped.items():
        names = re.findall(r"`([^`]+)`", cell)
        if r not in rows:
            bad.append(f"tests/README.md:{i}: \"{r}\" is no row of failures.md's table")
        if not names:
            bad.append(f"tests/README.md:{i}: the row \"{r}\" names no test")
        bad += [f"tests/README.md:{i}: `{n}`: {why}" for n in names
                if (why := row_test_problem(src, cmds, n))]
    if len(rows) < 5:
        bad.append(f"docs/guide/failures.md: only {len(rows)} rows found in its table")
    return bad


def main():
    src, build = sys.argv[1], sys.argv[2]
    intro = json.load(open(os.path.join(build, "meson-info", "intro-tests.json")))
    tests = [t["name"] for t in intro]
    cmds = {t["name"]: t["cmd"] for t in intro}
    names = index_names(os.path.join(src, "tests", "README.md"))
    bad = [(i, n) for i, n in names if not fnmatch.filter(tests, n)]
    for i, n in bad:
        print(f"tests/README.md:{i}: `{n}` is not a test of this build (meson test --list)")
    print(f"{len(names)} test names in the index, {len(bad)} unknown")
    if len(names) < 20:
        print(f"tests/README.md: the index (\"{HEADING[3:]}\") names only {len(names)} tests")
        return 1
    rows_bad = failures_rows(src, cmds)
    for line in rows_bad:
        print(line)
    print(f"failures.md's rows: {len(rows_bad)} problems")
    return 1 if bad or rows_bad else 0


if __name__ == "__main__":
    sys.exit(main())
