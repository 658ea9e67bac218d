#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_index.py SOURCE_ROOT BUILD_ROOT: every test name that the behaviour index of
# tests/README.md ("Where a behaviour is tested") writes in backquotes is a test of this build
# (BUILD_ROOT/meson-info/intro-tests.json, what `meson test --list` prints). A name may end in
# `*` for every test that starts so; it must match one. Each name that matches none is printed
# with its line. Exit 0: every name is a test; 1: some are not (listed).
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


def main():
    src, build = sys.argv[1], sys.argv[2]
    tests = [t["name"] for t in
             json.load(open(os.path.join(build, "meson-info", "intro-tests.json")))]
    names = index_names(os.path.join(src, "tests", "README.md"))
    bad = [(i, n) for i, n in names if not fnmatch.filter(tests, n)]
    for i, n in bad:
        print(f"tests/README.md:{i}: `{n}` is not a test of this build (meson test --list)")
    print(f"{len(names)} test names in the index, {len(bad)} unknown")
    if len(names) < 20:
        print(f"tests/README.md: the index (\"{HEADING[3:]}\") names only {len(names)} tests")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
