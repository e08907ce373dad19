#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""No call cycle between the files of a C directory (issue #31: util/tcp).

File A depends on file B when A calls a non-static function defined in B
(comments stripped; a call through a function pointer, such as a path's
ops table, is no dependency, which is the point of an interface). A cycle
means no file of it can be read, changed or tested without the others;
this prints each strongly connected component of more than one file, with
the calls that make it, and exits 1 if there is any.

Usage: check-file-cycles.py DIR [-v]   (-v: every file's edges too)
"""
import collections
import os
import re
import sys

DEF = re.compile(r"^(?!static)[a-zA-Z_][^\n;]*?\b(\w+)\(([^;{]*?)\)\s*\{", re.M | re.S)
CALL = re.compile(r"\b(\w+)\s*\(")


def load(d):
    files = sorted(f for f in os.listdir(d) if f.endswith(".c"))
    defs, src = {}, {}
    for f in files:
        with open(os.path.join(d, f), encoding="utf-8") as fh:
            t = fh.read()
        t = re.sub(r"/\*.*?\*/", "", t, flags=re.S)
        t = re.sub(r"//[^\n]*", "", t)
        src[f] = t
        for m in DEF.finditer(t):
            defs.setdefault(m.group(1), f)
    return files, defs, src


def edges_of(files, defs, src):
    edges = collections.defaultdict(collections.Counter)
    for f in files:
        for m in CALL.finditer(src[f]):
            g = defs.get(m.group(1))
            if g and g != f:
                edges[f][g] += 1
    return edges


def sccs(files, edges):
    """Tarjan's strongly connected components."""
    idx, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        idx[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in idx:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            out.append(c)

    sys.setrecursionlimit(10000)
    for f in files:
        if f not in idx:
            visit(f)
    return [c for c in out if len(c) > 1]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    files, defs, src = load(d)
    edges = edges_of(files, defs, src)
    if "-v" in sys.argv[2:]:
        for f in files:
            print(f, "->", ", ".join(f"{g}({k})" for g, k in sorted(edges[f].items())))
    cyc = sccs(files, edges)
    for c in cyc:
        print("cycle:", " ".join(sorted(c)))
        for a in sorted(c):
            for b in sorted(c):
                if edges[a][b]:
                    fn = sorted({m.group(1) for m in CALL.finditer(src[a])
                                 if defs.get(m.group(1)) == b})
                    print(f"   {a} -> {b}: {', '.join(fn)}")
    print(f"{len(cyc)} cycles")
    return 1 if cyc else 0


if __name__ == "__main__":
    sys.exit(main())
