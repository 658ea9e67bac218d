#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copied from the project's shared tools (../shared/tools/prose.py); the measure is unchanged.
"""prose.py FILE...: median and longest sentence (words) of each Markdown file's prose, outside code
blocks, tables, headings and HTML comments; inline code counts as one word. Prints one line per file
and, last, 'worst median M, longest L'.

This copy adds: a FILE that is a folder stands for its *.md files; with --max-median M and
--max-longest L it names each file past a bound and exits 1 (meson test docs-prose).

The files named after --cells are measured in their tables too. A table cell is a list of short
sentences: it is split at '.', '!', '?' or ';' and a space, and at ':' and a space before a capital,
a code span, '*' or '-', as prose is. The cells' sentences of more than two words have the same
bounds as the prose, measured apart (a file's cells have their own median). Header and separator
rows are not measured."""
import os, re, statistics, sys
args, bounds = sys.argv[1:], {}
while args and args[0].startswith("--max-"):
    bounds[args[0]], args = int(args[1]), args[2:]
files, cells, in_cells = [], set(), False
for a in args:
    if a == "--cells":
        in_cells = True
        continue
    named = sorted(os.path.join(a, f) for f in os.listdir(a) if f.endswith(".md")) \
        if os.path.isdir(a) else [a]
    files += [f for f in named if f not in files]
    cells |= set(named) if in_cells else set()


def table_sentences(text):
    """The sentences of the text's table cells, past the header and separator rows."""
    out, rows = [], [l.strip() for l in text.split('\n')]
    for i, l in enumerate(rows):
        if not l.startswith('|') or re.fullmatch(r'\|[\s:|-]+\|?', l):
            continue
        if i + 1 < len(rows) and re.fullmatch(r'\|[\s:|-]+\|?', rows[i + 1]):
            continue  # a header row
        l = re.sub(r'`[^`]*`', 'X', l)
        l = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', l)
        for c in re.split(r'(?<!\\)\|', l.strip('|')):
            out += [x for x in re.split(r'(?<=[.!?;])\s+|(?<=:)\s+(?=[A-Z(*\-X])', c.strip())
                    if len(x.split()) > 2]
    return out


def measure(f, what, s):
    global worst_med, worst_max
    n = [len(x.split()) for x in s] or [0]
    med, mx = statistics.median(n), max(n)
    worst_med, worst_max = max(worst_med, med), max(worst_max, mx)
    print(f"{f}{what}: {len(n)} sentences, median {med:.0f}, longest {mx}")
    if med > bounds.get("--max-median", med):
        over.append(f"{f}{what}: median sentence {med:.0f} words, over {bounds['--max-median']}")
    for x in s:
        if len(x.split()) > bounds.get("--max-longest", len(x.split())):
            over.append(f"{f}{what}: a sentence of {len(x.split())} words, over "
                        f"{bounds['--max-longest']}: {x[:80]}...")


over = []
worst_med, worst_max = 0, 0
for f in files:
    t = open(f).read()
    t = re.sub(r'```.*?```', '', t, flags=re.S)
    t = re.sub(r'<!--.*?-->', '', t, flags=re.S)
    table = table_sentences(t) if f in cells else None
    t = ' '.join(l for l in t.split('\n') if not l.lstrip().startswith(('|', '#')))
    t = re.sub(r'`[^`]*`', 'X', t)
    t = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', t)
    s = [x for x in re.split(r'(?<=[.!?:;])\s+(?=[A-Z(`*\-])', t) if len(x.split()) > 2]
    measure(f, "", s)
    if table is not None:
        measure(f, " (table cells)", table)
print(f"worst median {worst_med:.0f}, longest {worst_max}")
for o in over:
    print(o)
sys.exit(1 if over else 0)
