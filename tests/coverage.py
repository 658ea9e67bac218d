#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# coverage.py SOURCE_ROOT BUILD_DIR: line and branch coverage per directory of rdzv's C sources
# (common/ proto/ daemon/ agent/ ctl/ train/), from the gcov data a build made with
# -Db_coverage=true left after its tests (tests/run-suite.sh does this for the gcc build), read
# with gcovr. Prints one table; exits 0 whatever the figures (they are reported, not gated), 2
# when gcovr or the data is missing.
import json
import os
import shutil
import subprocess
import sys
import tempfile

DIRS = ("common", "proto", "daemon", "agent", "ctl", "train")


def main():
    root, build = (os.path.abspath(a) for a in sys.argv[1:3])
    if not shutil.which("gcovr"):
        print("coverage: gcovr is not installed (apt-get install gcovr)")
        return 2
    with tempfile.TemporaryDirectory(prefix="rdzv-cov-") as d:
        out = os.path.join(d, "summary.json")
        p = subprocess.run(
            ["gcovr", "-r", root, build, "--json-summary", out, "--exclude-unreachable-branches",
             "--exclude-throw-branches", "-j", "2"]
            + [a for top in DIRS for a in ("--filter", os.path.join(root, top) + "/")],
            capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(out):
            print("coverage: gcovr failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
            return 2
        with open(out) as f:
            files = json.load(f)["files"]
    per = {}
    for fe in files:
        top = fe["filename"].split("/")[0]
        acc = per.setdefault(top, [0, 0, 0, 0])
        acc[0] += fe["line_covered"]
        acc[1] += fe["line_total"]
        acc[2] += fe["branch_covered"]
        acc[3] += fe["branch_total"]
    if not per:
        print("coverage: no coverage data in %s (build with -Db_coverage=true, run the tests)"
              % build)
        return 2
    total = [sum(v[i] for v in per.values()) for i in range(4)]
    pct = lambda a, b: "%5.1f%%" % (100.0 * a / b) if b else "    -"
    print("coverage (gcc build, gcovr): lines and branches per directory")
    print("%-8s %8s %14s %8s %14s" % ("dir", "lines", "", "branches", ""))
    for top in list(DIRS) + ["total"]:
        v = total if top == "total" else per.get(top)
        if v:
            print("%-8s %8s %6d/%-7d %8s %6d/%-7d" % (top, pct(v[0], v[1]), v[0], v[1],
                                                      pct(v[2], v[3]), v[2], v[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
