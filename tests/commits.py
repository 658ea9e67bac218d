#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# commits.py SOURCE_ROOT [BASE]: every commit after BASE (default: the one that added this file)
# has a message as libuv, Redis and etcd/raft write theirs: a subject of at most 72 characters in
# the form "area: what changed" (the area one to three words, no colon in it), then, when there
# is a body, a blank line before it. Each commit that breaks a rule is named with the rule, one
# line each. Outside a git checkout (a release tarball, a package build), or where BASE is not in
# the history (a shallow clone), there is nothing to check: exit 77 (meson's skip).
import re
import subprocess
import sys

# The commit that added this file: the ones after it keep the rule.
ME = "tests/commits.py"
SUBJECT = re.compile(r"^[^\s:]+(?: [^\s:]+){0,2}: \S")


def problems(root, base):
    """(commit, what is wrong) for each commit after base, oldest first."""
    r = subprocess.run(["git", "-C", root, "log", "--reverse", "--format=%h%x00%B%x01",
                        f"{base}..HEAD"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    found = []
    for entry in r.stdout.split("\x01"):
        entry = entry.strip("\n")
        if not entry:
            continue
        commit, _, message = entry.partition("\x00")
        lines = message.split("\n")
        subject = lines[0]
        if len(subject) > 72:
            found.append((commit, f"subject of {len(subject)} characters (at most 72)"))
        if not SUBJECT.match(subject):
            found.append((commit, f"subject not 'area: what changed': {subject[:60]!r}"))
        if len(lines) > 1 and lines[1].strip():
            found.append((commit, "no blank line between the subject and the body"))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    base = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
        ["git", "-C", root, "log", "--diff-filter=A", "--format=%h", "-1", "--", ME],
        capture_output=True, text=True).stdout.strip() or "HEAD~0^{nothing}"
    inside = subprocess.run(["git", "-C", root, "rev-parse", "--verify", "--quiet",
                             base + "^{commit}"], capture_output=True)
    if inside.returncode != 0:
        print(f"commits: {root} is no git checkout with {base} in its history: nothing to check")
        return 77
    found = problems(root, base)
    if found is None:
        print("commits: git log failed")
        return 1
    for commit, what in found:
        print(f"commits: {commit}: {what}")
    n = subprocess.run(["git", "-C", root, "rev-list", "--count", f"{base}..HEAD"],
                       capture_output=True, text=True).stdout.strip()
    print(f"commits: {n} commit(s) after {base}, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
