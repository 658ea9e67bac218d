#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# layering.py: check the C sources' #include "..." lines against the layer order in
# tests/layers.txt (see there): each file includes only its own layer or lower ones, and no
# include cycle exists between modules (foo.c and foo.h are one module; the modules that share a
# private header, foo-int.h, foo-impl.h or foo-priv.h, are one component's parts and count as one).
#
# With BUILD_ROOT, it also reads the calls: the file graph comes from the object files themselves
# (`nm`: the global symbols each object defines, and the ones it uses; the objects are found in
# BUILD_ROOT/compile_commands.json), and no two source files may reach each other through it,
# private headers or not, and no file may use a symbol of a higher layer. A cycle that is known
# and being taken apart is listed in layers.txt as "known-cycle: a.c b.c ..." and must then be
# found exactly so (a listed cycle that is gone is stale, and fails too). A "pure: GLOB ..." line
# names files that do nothing to the world themselves (the job machine's): their objects use no
# libuv function (uv_*) and no clock (clock_gettime, gettimeofday, time, rdzv_now_ms,
# rdzv_wall_s), and their source calls no host op ("ops->"); they reach those through an
# adapter. A "clockless: GLOB ..." line names files whose objects use no clock either (their
# time is handed to them). A "quiet: GLOB ..." line names files whose objects write no log (no
# rdzv_log* symbol): their lines go out through their adapter. A "stateless: GLOB ..." line
# names files whose objects hold no writable data of static storage (in .data, .bss or their
# kin; .data.rel.ro, which `nm` also marks d, is read-only once loaded): their state lives in
# the objects they are handed. A "stateful: FILE [SYMBOL ...]" line exempts a file (the
# adapter) or only the named symbols of it; a symbol named there must still be found. Every
# glob of layers.txt must match a file.
#
# Usage: layering.py [SOURCE_ROOT [BUILD_ROOT]]   (default: the repository this file is in)
# It first checks itself on a small made-up tree (and, with BUILD_ROOT, on made-up objects
# compiled with cc) with one violation and one cycle, so that a checker that stopped finding
# anything fails too. Exit 0: clean; 1: problems (listed).

import fnmatch
import functools
import json
import os
import re
import subprocess
import sys
import tempfile

DIRS = ("common", "proto", "daemon", "agent", "ctl", "train")
EXTS = (".c", ".h", ".cc", ".cu")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read_layers(path, known=None, through=None, pure=None, clockless=None, stateless=None,
                stateful=None, quiet=None):
    """[(name, [globs])], lowest first. known, a list, gets each "known-cycle:" line's files as
    a sorted list; through, a list, each "only-through: GLOB HEADER" line as (GLOB, HEADER);
    pure, a list, each "pure:" line's globs; clockless, each "clockless:" line's; stateless,
    each "stateless:" line's; stateful, a dict, {FILE: [SYMBOL ...]} ([]: all of FILE's);
    quiet, each "quiet:" line's."""
    layers = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, globs = line.partition(":")
            if not sep or not globs.split():
                raise SystemExit("%s:%d: expected 'name: glob ...'" % (path, n))
            if name.strip() == "known-cycle":
                if known is not None:
                    known.append(sorted(globs.split()))
                continue
            if name.strip() == "pure":
                if pure is not None:
                    pure.extend(globs.split())
                continue
            if name.strip() == "clockless":
                if clockless is not None:
                    clockless.extend(globs.split())
                continue
            if name.strip() == "quiet":
                if quiet is not None:
                    quiet.extend(globs.split())
                continue
            if name.strip() == "stateless":
                if stateless is not None:
                    stateless.extend(globs.split())
                continue
            if name.strip() == "stateful":
                if stateful is not None:
                    stateful.setdefault(globs.split()[0], []).extend(globs.split()[1:])
                continue
            if name.strip() == "only-through":
                if len(globs.split()) != 2:
                    raise SystemExit("%s:%d: expected 'only-through: GLOB HEADER'" % (path, n))
                if through is not None:
                    through.append(tuple(globs.split()))
                continue
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


def matches(rel, pattern):
    """A layer's pattern: "FOLDER/" holds the files directly in that folder, anything else is a
    glob (fnmatch)."""
    if pattern.endswith("/"):
        return os.path.dirname(rel) + "/" == pattern
    return fnmatch.fnmatchcase(rel, pattern)


def layer_index(root, layers, problems):
    """{source: layer index}; files in no layer or in two, and globs that match nothing, are
    problems."""
    layer_of = {}
    used = set()
    for rel in sources(root):
        hits = [i for i, (_, globs) in enumerate(layers)
                if any(matches(rel, g) for g in globs)]
        used.update((i, g) for i, (_, globs) in enumerate(layers) for g in globs
                    if matches(rel, g))
        if not hits:
            problems.append("%s: in no layer of layers.txt: add it to the layer it belongs to"
                            % rel)
        elif len(hits) > 1:
            problems.append("%s: in more than one layer (%s)"
                            % (rel, ", ".join(layers[i][0] for i in hits)))
        else:
            layer_of[rel] = hits[0]
    for i, (name, globs) in enumerate(layers):
        for g in globs:
            if (i, g) not in used:
                problems.append("layer %s: glob %s matches no file: remove it" % (name, g))
    return layer_of


def check_folders(layers, layer_of):
    """A folder is one layer, so the layer list alone says where a file goes: the problems of
    folders whose files are in more than one layer."""
    by_dir = {}
    for rel, i in layer_of.items():
        by_dir.setdefault(os.path.dirname(rel), set()).add(i)
    return ["folder %s/ holds files of layers %s: one folder per layer"
            % (folder, ", ".join(layers[i][0] for i in sorted(idx)))
            for folder, idx in sorted(by_dir.items()) if len(idx) > 1]


def check(root, layers_path):
    """A list of problems (strings); empty when the tree follows the layers."""
    layers = read_layers(layers_path)
    problems = []
    layer_of = layer_index(root, layers, problems)
    problems += check_folders(layers, layer_of)
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


@functools.lru_cache(maxsize=None)
def nm(obj, *flags):
    """The symbol names `nm -P FLAGS obj` lists (frozen; cached: whoever rebuilds an object
    calls nm.cache_clear())."""
    p = subprocess.run(["nm", "-P", *flags, obj], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("layering: nm %s failed: %s" % (obj, p.stderr.strip()))
    return frozenset(line.split()[0] for line in p.stdout.splitlines() if line.strip())


def objects(root, build):
    """[(source relative to root, object path)] of the checked directories, from the build's
    compile_commands.json."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    out = []
    for e in entries:
        src = os.path.relpath(os.path.normpath(os.path.join(e.get("directory", build), e["file"])),
                              root)
        if src.split(os.sep)[0] in DIRS and src.endswith(EXTS):
            out.append((src, os.path.normpath(os.path.join(e.get("directory", build),
                                                           e["output"]))))
    return out


def call_graph(objs, defined=None):
    """{source: set(source)}: a -> b when an object of a uses a global symbol an object of b
    defines (a function called or taken the address of, or data). defined, a dict, gets
    {symbol: set(source)}."""
    defined = {} if defined is None else defined
    used = {}
    for src, obj in objs:
        if not os.path.exists(obj):
            raise SystemExit("layering: %s is not built (%s): build first" % (obj, src))
        for sym in nm(obj, "--defined-only", "-g"):
            defined.setdefault(sym, set()).add(src)
        used.setdefault(src, set()).update(nm(obj, "-u"))
    edges = {}
    for src, syms in used.items():
        for sym in syms:
            for dst in defined.get(sym, ()):
                if dst != src:
                    edges.setdefault(src, set()).add(dst)
    return edges


def check_through(root, through, objs, defined_in):
    """Problems of the "only-through: GLOB HEADER" rules: a file of GLOB includes from HEADER's
    directory only HEADER, and calls there only what HEADER declares."""
    problems = []
    for glob, header in through:
        hdir = header.split("/", 1)[0] + "/"  # the header's whole tree: daemon/
        with open(os.path.join(root, header), errors="replace") as f:
            declared = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", f.read()))
        for rel in sources(root):
            if not fnmatch.fnmatchcase(rel, glob):
                continue
            for inc in includes(root, rel):
                if inc.startswith(hdir) and inc != header:
                    problems.append("%s includes %s: it may use %s only through %s"
                                    % (rel, inc, hdir.rstrip("/"), header))
        for src, obj in objs:
            if not fnmatch.fnmatchcase(src, glob):
                continue
            for sym in sorted(nm(obj, "-u")):
                if any(d.startswith(hdir) for d in defined_in.get(sym, ())) and \
                        sym not in declared:
                    problems.append("%s calls %s, which %s does not declare: it may use %s "
                                    "only through %s" % (src, sym, header, hdir.rstrip("/"),
                                                         header))
    return problems


IMPURE_RE = re.compile(r"^(uv_\w+|clock_gettime|gettimeofday|time|rdzv_now_ms|rdzv_wall_s)$")
CLOCK_RE = re.compile(r"^(clock_gettime|gettimeofday|time|rdzv_now_ms|rdzv_wall_s)$")


def check_pure(root, pure, objs):
    """Problems of the "pure:" globs: a file there whose object uses libuv or a clock, or whose
    source calls a host op."""
    problems = []
    for src, obj in objs:
        if not any(fnmatch.fnmatchcase(src, g) for g in pure):
            continue
        for sym in sorted(nm(obj, "-u")):
            if IMPURE_RE.match(sym):
                problems.append("%s is pure (layers.txt) but uses %s: go through its adapter"
                                % (src, sym))
        with open(os.path.join(root, src), errors="replace") as f:
            for n, line in enumerate(f, 1):
                if "ops->" in line.split("//", 1)[0] and not line.lstrip().startswith("*"):
                    problems.append("%s:%d is pure (layers.txt) but calls a host op: go "
                                    "through its adapter" % (src, n))
    for g in pure:
        if not any(fnmatch.fnmatchcase(src, g) for src, _ in objs):
            problems.append("pure: %s matches no built file" % g)
    return problems


def check_clockless(clockless, objs):
    """Problems of the "clockless:" globs: a file there whose object reads a clock."""
    problems = []
    for src, obj in objs:
        if any(fnmatch.fnmatchcase(src, g) for g in clockless):
            problems += ["%s reads no clock (layers.txt) but uses %s: take the time as an "
                         "argument" % (src, sym) for sym in sorted(nm(obj, "-u"))
                         if CLOCK_RE.match(sym)]
    for g in clockless:
        if not any(fnmatch.fnmatchcase(src, g) for src, _ in objs):
            problems.append("clockless: %s matches no built file" % g)
    return problems


LOG_RE = re.compile(r"^rdzv_log\w*$")


def check_quiet(quiet, objs):
    """Problems of the "quiet:" globs: a file there whose object writes a log itself."""
    problems = []
    for src, obj in objs:
        if any(fnmatch.fnmatchcase(src, g) for g in quiet):
            problems += ["%s writes no log (layers.txt) but uses %s: hand the line to its "
                         "adapter" % (src, sym) for sym in sorted(nm(obj, "-u"))
                         if LOG_RE.match(sym)]
    for g in quiet:
        if not any(fnmatch.fnmatchcase(src, g) for src, _ in objs):
            problems.append("quiet: %s matches no built file" % g)
    return problems


WRITABLE_RE = re.compile(r"^\.(data|bss|tdata|tbss)(\.|$)|^\*COM\*$")
# What a coverage or sanitizer build adds to every object (-Db_coverage, -Db_sanitize).
INSTRUMENT = ("__gcov", ".LPBX", "__asan", "__ubsan", "__sancov", "__llvm_gcov")


def writable(obj):
    """The names of obj's objects of static storage that the program may write: in a .data or
    .bss section (or a thread's, or common), not in .data.rel.ro (read-only once relocated)."""
    p = subprocess.run(["objdump", "-t", obj], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("layering: objdump -t %s failed: %s" % (obj, p.stderr.strip()))
    out = set()
    for line in p.stdout.splitlines():
        # "VALUE FLAGS SECTION\tSIZE NAME": the flags are 7 columns, O for an object.
        head, tab, tail = line.partition("\t")
        if not tab or len(head) < 17 or head[16] != " " or "O" not in head[17:24]:
            continue
        sect = head[24:].strip()
        name = tail.split()[-1]
        if name.startswith(INSTRUMENT):
            continue  # the compiler's own counters (gcov, sanitizers), not the program's
        if WRITABLE_RE.search(sect) and not sect.startswith(".data.rel.ro"):
            out.add(name)
    return out


def check_stateless(stateless, stateful, objs):
    """Problems of the "stateless:" globs: a file there whose object holds writable static
    data, unless a "stateful:" line exempts it (all of it, or that symbol); and a "stateful:"
    symbol not found any more."""
    problems, seen = [], set()
    for src, obj in objs:
        if not any(fnmatch.fnmatchcase(src, g) for g in stateless):
            continue
        allowed = stateful.get(src)
        for sym in sorted(writable(obj)):
            if allowed == []:
                continue
            if allowed and sym in allowed:
                seen.add((src, sym))
                continue
            problems.append("%s is stateless (layers.txt) but %s is writable data of static "
                            "storage: keep it in the jobs object (or make it const)" % (src, sym))
    for src, syms in sorted(stateful.items()):
        if not any(s == src for s, _ in objs):
            problems.append("stateful: %s matches no built file" % src)
        problems += ["stateful: %s's %s is not found any more: remove it from layers.txt"
                     % (src, sym) for sym in syms if (src, sym) not in seen
                     and any(s == src for s, _ in objs)]
    for g in stateless:
        if not any(fnmatch.fnmatchcase(src, g) for src, _ in objs):
            problems.append("stateless: %s matches no built file" % g)
    return problems


def check_calls(root, layers_path, build):
    """Problems of the call graph: cycles between source files (those listed as known-cycle
    excepted, which must still be found), calls into a higher layer, and uses that bypass an
    only-through header."""
    known, through, pure, clockless, stateless, stateful, quiet = [], [], [], [], [], {}, []
    layers = read_layers(layers_path, known, through, pure, clockless, stateless, stateful,
                         quiet)
    problems = []
    layer_of = layer_index(root, layers, problems)
    objs = objects(root, build)
    built = {src for src, _ in objs}
    defined_in = {}
    edges = call_graph(objs, defined_in)
    problems += check_through(root, through, objs, defined_in)
    problems += check_pure(root, pure, objs)
    problems += check_clockless(clockless, objs)
    problems += check_quiet(quiet, objs)
    problems += check_stateless(stateless, stateful, objs)
    for src, dsts in sorted(edges.items()):
        for dst in sorted(dsts):
            li, lj = layer_of.get(src), layer_of.get(dst)
            if li is not None and lj is not None and lj > li:
                problems.append("%s (layer %s) calls into %s of the higher layer %s"
                                % (src, layers[li][0], dst, layers[lj][0]))
    found = find_cycles(edges)
    for comp in found:
        if comp not in known:
            problems.append("call cycle between files: %s (calls go down, callbacks up: "
                            "register a callback instead)" % " <-> ".join(comp))
    for comp in known:
        if comp not in found and built.issuperset(comp):  # (a build without the trainer)
            problems.append("known-cycle %s is not found any more: remove it from %s"
                            % (" ".join(comp), os.path.basename(layers_path)))
    return problems


def self_test_calls():
    """check_calls finds a two-file call cycle in real objects, an upward call, and a stale
    known-cycle; a clean pair passes."""
    with tempfile.TemporaryDirectory(prefix="layering-calls-") as d:
        files = {
            "daemon/low.c": "int low(int x);\nint low(int x) { return x + 1; }\n",
            "daemon/high.c": "int low(int x);\nint high(int x);\n"
                             "int high(int x) { return low(x) * 2; }\n",
        }
        layers = "low: daemon/low.*\nhigh: daemon/high.*\n"

        def build():
            nm.cache_clear()
            entries = []
            for rel, text in files.items():
                os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
                obj = os.path.join(d, "b", rel + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                subprocess.run(["cc", "-c", "-o", obj, os.path.join(d, rel)], check=True)
                entries.append({"directory": d, "file": rel, "output": obj})
            os.makedirs(os.path.join(d, "b"), exist_ok=True)
            with open(os.path.join(d, "b", "compile_commands.json"), "w") as f:
                json.dump(entries, f)

        lp = os.path.join(d, "layers.txt")
        with open(lp, "w") as f:
            f.write(layers)
        build()
        clean = check_calls(d, lp, os.path.join(d, "b"))
        assert clean == [], "self-test: clean objects reported %r" % clean
        files["daemon/low.c"] = ("int high(int x);\nint low(int x);\n"
                                 "int low(int x) { return x ? high(x - 1) : 0; }\n")
        build()
        bad = check_calls(d, lp, os.path.join(d, "b"))
        assert any("call cycle between files: daemon/high.c <-> daemon/low.c" in p
                   for p in bad), bad
        assert any("daemon/low.c (layer low) calls into daemon/high.c" in p for p in bad), bad
        with open(lp, "a") as f:
            f.write("known-cycle: daemon/low.c daemon/high.c\n")
        assert not any("call cycle" in p for p in check_calls(d, lp, os.path.join(d, "b")))
        files["daemon/low.c"] = "int low(int x);\nint low(int x) { return x + 1; }\n"
        build()
        assert any("is not found any more" in p for p in check_calls(d, lp, os.path.join(d, "b")))
        with open(lp, "a") as f:
            f.write("pure: daemon/low.c\n")
        files["daemon/low.c"] = ("#include <time.h>\nint low(int x);\n"
                                 "int low(int x) { return x + (int)time(NULL); }\n")
        build()
        assert any("daemon/low.c is pure (layers.txt) but uses time" in p
                   for p in check_calls(d, lp, os.path.join(d, "b")))
        with open(lp, "a") as f:
            f.write("clockless: daemon/low.c\n")
        assert any("daemon/low.c reads no clock (layers.txt) but uses time" in p
                   for p in check_calls(d, lp, os.path.join(d, "b")))
        with open(lp, "a") as f:
            f.write("quiet: daemon/low.c\n")
        assert not any("writes no log" in p for p in check_calls(d, lp, os.path.join(d, "b")))
        files["daemon/low.c"] = ("void rdzv_log(int lvl, const char *fmt, ...);\nint low(int x);\n"
                                 "int low(int x) { rdzv_log(0, \"%d\", x); return x; }\n")
        build()
        assert any("daemon/low.c writes no log (layers.txt) but uses rdzv_log" in p
                   for p in check_calls(d, lp, os.path.join(d, "b")))
        # Writable static data: a counter (.bss), a knob (.data) and a function's static are
        # found; a const table of pointers (.data.rel.ro under -fPIC) is not.
        with open(lp, "a") as f:
            f.write("stateless: daemon/*.c\n")
        files["daemon/high.c"] = ("int low(int x);\nint high(int x);\nunsigned long hits;\n"
                                  "int knob = 3;\nstatic int (*const fns[])(int) = {low};\n"
                                  "int high(int x) { static int last; last = x; hits++;\n"
                                  "  return fns[0](x) * knob + last; }\n")
        build()
        subprocess.run(["cc", "-fPIC", "-c", "-o", os.path.join(d, "b", "daemon/high.c.o"),
                        os.path.join(d, "daemon/high.c")], check=True)
        bad = [p for p in check_calls(d, lp, os.path.join(d, "b")) if "writable" in p]
        assert len(bad) == 3 and all(p.startswith("daemon/high.c is stateless") for p in bad) \
            and any(" hits " in p for p in bad) and any(" knob " in p for p in bad) \
            and any(" last" in p for p in bad), bad
        with open(lp, "a") as f:
            f.write("stateful: daemon/high.c hits knob gone\n")
        bad = check_calls(d, lp, os.path.join(d, "b"))
        assert any("daemon/high.c is stateless" in p and " last" in p for p in bad), bad
        assert not any(" hits " in p or " knob " in p for p in bad if "stateless" in p), bad
        assert any("stateful: daemon/high.c's gone is not found any more" in p for p in bad), bad


def write_tree(d, files):
    """Write {relative path: text} under d."""
    for rel, text in files.items():
        os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)


def self_test():
    """The checker finds a known upward include and a known cycle, and passes a clean tree."""
    with tempfile.TemporaryDirectory(prefix="layering-") as d:
        files = {
            "common/a.h": "",
            "common/a.c": '#include "a.h"\n',
            "daemon/low/low.h": '#include "../../common/a.h"\n',
            "daemon/low/low.c": '#include "low.h"\n',
            "daemon/high/high.h": '#include "../low/low.h"\n',
            "daemon/high/high.c": '#include "high.h"\n#include "../low/low.h"\n',
            # One component in two files sharing a private header: not a cycle.
            "daemon/part/part-impl.h": '#include "part.h"\n',
            "daemon/part/part.h": "",
            "daemon/part/part.c": '#include "part.h"\n#include "part-impl.h"\n',
            "daemon/part/part-more.c": '#include "part-impl.h"\n',
        }
        layers = ("common: common/*\nlow: daemon/low/*\nhigh: daemon/high/*\n"
                  "part: daemon/part/*\n")
        write_tree(d, files)
        lp = os.path.join(d, "layers.txt")
        with open(lp, "w") as f:
            f.write(layers)
        clean = check(d, lp)
        assert clean == [], "self-test: clean tree reported %r" % clean
        with open(os.path.join(d, "daemon/low/low.c"), "a") as f:
            f.write('#  include "../high/high.h"\n')
        bad = check(d, lp)
        assert any("daemon/low/low.c (layer low) includes daemon/high/high.h" in p
                   for p in bad), bad
        assert any("include cycle" in p and "daemon/high" in p and "daemon/low" in p
                   for p in bad), bad
        with open(os.path.join(d, "daemon/stray.c"), "w") as f:
            f.write("")
        assert any(p.startswith("daemon/stray.c: in no layer") for p in check(d, lp))
    # The same in folder terms, with includes named from the root: a clean tree passes, a file
    # of a lower folder that includes a higher folder's header is found, and so is a folder
    # whose files are in two layers.
    with tempfile.TemporaryDirectory(prefix="layering-") as d:
        files = {
            "common/a.h": "",
            "daemon/data/low.h": '#include "common/a.h"\n',
            "daemon/data/low.c": '#include "daemon/data/low.h"\n',
            "daemon/job/high.h": '#include "daemon/data/low.h"\n',
            "daemon/job/high.c": '#include "daemon/job/high.h"\n',
            "daemon/main.c": '#include "daemon/job/high.h"\n',
        }
        write_tree(d, files)
        lp = os.path.join(d, "layers.txt")
        with open(lp, "w") as f:
            f.write("common: common/\ndata: daemon/data/\njob: daemon/job/\nmain: daemon/\n")
        clean = check(d, lp)
        assert clean == [], "self-test (folders): clean tree reported %r" % clean
        with open(os.path.join(d, "daemon/data/low.c"), "a") as f:
            f.write('#include "daemon/job/high.h"\n')
        bad = check(d, lp)
        assert any("daemon/data/low.c (layer data) includes daemon/job/high.h" in p
                   for p in bad), bad
        with open(os.path.join(d, "daemon/data/other.c"), "w") as f:
            f.write("")
        with open(lp, "w") as f:
            f.write("common: common/\ndata: daemon/data/low.*\nlow2: daemon/data/other.c\n"
                    "job: daemon/job/\nmain: daemon/\n")
        assert any("folder daemon/data/ holds files of layers data, low2" in p
                   for p in check(d, lp)), check(d, lp)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    build = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    self_test()
    layers_path = os.path.join(root, "tests", "layers.txt")
    problems = check(root, layers_path)
    if build:
        self_test_calls()
        problems += [p for p in check_calls(root, layers_path, build) if p not in problems]
    for p in problems:
        print("layering: " + p)
    if problems:
        print("layering: %d problem(s); the order is in tests/layers.txt" % len(problems))
        return 1
    print("layering: %d files follow tests/layers.txt%s" % (
        len(list(sources(root))), " (includes and calls)" if build else " (includes only)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
