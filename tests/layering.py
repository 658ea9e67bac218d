#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# layering.py: check the C sources' #include "..." lines against the layer order in
# tests/layers.txt (see there): each file includes only its own layer or lower ones, and no
# include cycle exists between modules (foo.c and foo.h are one module; the modules that share a
# private header, foo-int.h, foo-impl.h or foo-priv.h, are one component's parts and count as one).
#
# Usage: layering.py [SOURCE_ROOT]   (default: the repository this file is in)
# It first checks itself on a small made-up tree with one violation and one cycle, so that a
# checker that stopped finding anything fails too. Exit 0: clean; 1: problems (listed).

import fnmatch
import os
import re
import sys
import tempfile

DIRS = ("common", "proto", "daemon", "agent", "ctl", "train")
EXTS = (".c", ".h", ".cc", ".cu")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read_layers(path):
    """[(name, [globs])], lowest first."""
    layers = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, globs = line.partition(":")
            if not sep or not globs.split():
                raise SystemExit("%s:%d: expected 'name: glob ...'" % (path, n))
            layers.append((name.strip(), globs.split()))
    return layers


def sources(root):
    for d in DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(EXTS):
                    yield os.path.relpath(os.path.join(dirpath, fn), root)


def includes(root, rel):
    """The repository files rel includes with #include "...", as paths relative to root."""
    with open(os.path.join(root, rel), errors="replace") as f:
        text = f.read()
    out = []
    for inc in INCLUDE_RE.findall(text):
        for base in (os.path.dirname(rel), ""):
            cand = os.path.normpath(os.path.join(base, inc))
            if os.path.isfile(os.path.join(root, cand)):
                out.append(cand)
                break
    return out


INTERNAL_RE = re.compile(r"-(int|impl|priv)\.h$")


def module(rel):
    return os.path.splitext(rel)[0]


def families(root, rels):
    """{module: family}: the modules that include one private header (and the header) are one
    family, named after its first member; every other module is a family of its own."""
    parent = {}

    def find(m):
        parent.setdefault(m, m)
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m

    for rel in rels:
        for inc in includes(root, rel):
            if INTERNAL_RE.search(inc):
                a, b = find(module(rel)), find(module(inc))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {m: find(m) for m in list(parent)}


def find_cycles(edges):
    """Cycles in a directed graph {node: set(node)}, each as a list of nodes (one per strongly
    connected component with more than one node, or a self loop)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def check(root, layers_path):
    """A list of problems (strings); empty when the tree follows the layers."""
    layers = read_layers(layers_path)
    problems = []
    layer_of = {}
    for rel in sources(root):
        hits = [i for i, (_, globs) in enumerate(layers)
                if any(fnmatch.fnmatchcase(rel, g) for g in globs)]
        if not hits:
            problems.append("%s: in no layer of %s: add it to the layer it belongs to"
                            % (rel, os.path.basename(layers_path)))
        elif len(hits) > 1:
            problems.append("%s: in more than one layer (%s)"
                            % (rel, ", ".join(layers[i][0] for i in hits)))
        else:
            layer_of[rel] = hits[0]
    edges = {}
    fam = families(root, sorted(layer_of))
    node = lambda rel: fam.get(module(rel), module(rel))
    for rel, li in sorted(layer_of.items()):
        for inc in includes(root, rel):
            if inc not in layer_of:
                continue  # outside the checked directories (tests/, system-like helpers)
            lj = layer_of[inc]
            if lj > li:
                problems.append("%s (layer %s) includes %s of the higher layer %s"
                                % (rel, layers[li][0], inc, layers[lj][0]))
            if node(inc) != node(rel):
                edges.setdefault(node(rel), set()).add(node(inc))
    for comp in find_cycles(edges):
        problems.append("include cycle between modules: %s" % " <-> ".join(comp))
    return problems


def self_test():
    """The checker finds a known upward include and a known cycle, and passes a clean tree."""
    with tempfile.TemporaryDirectory(prefix="layering-") as d:
        files = {
            "common/a.h": "",
            "common/a.c": '#include "a.h"\n',
            "daemon/low.h": '#include "../common/a.h"\n',
            "daemon/low.c": '#include "low.h"\n',
            "daemon/high.h": '#include "low.h"\n',
            "daemon/high.c": '#include "high.h"\n#include "low.h"\n',
            # One component in two files sharing a private header: not a cycle.
            "daemon/part-impl.h": '#include "part.h"\n',
            "daemon/part.h": "",
            "daemon/part.c": '#include "part.h"\n#include "part-impl.h"\n',
            "daemon/part-more.c": '#include "part-impl.h"\n',
        }
        layers = ("common: common/*\nlow: daemon/low.*\nhigh: daemon/high.*\n"
                  "part: daemon/part*\n")
        for rel, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        lp = os.path.join(d, "layers.txt")
        with open(lp, "w") as f:
            f.write(layers)
        clean = check(d, lp)
        assert clean == [], "self-test: clean tree reported %r" % clean
        with open(os.path.join(d, "daemon/low.c"), "a") as f:
            f.write('#  include "high.h"\n')
        bad = check(d, lp)
        assert any("daemon/low.c (layer low) includes daemon/high.h" in p for p in bad), bad
        assert any("include cycle" in p and "daemon/high" in p and "daemon/low" in p
                   for p in bad), bad
        with open(os.path.join(d, "daemon/stray.c"), "w") as f:
            f.write("")
        assert any(p.startswith("daemon/stray.c: in no layer") for p in check(d, lp))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    self_test()
    problems = check(root, os.path.join(root, "tests", "layers.txt"))
    for p in problems:
        print("layering: " + p)
    if problems:
        print("layering: %d problem(s); the order is in tests/layers.txt" % len(problems))
        return 1
    print("layering: %d files follow tests/layers.txt" % len(list(sources(root))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
