#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The application ABI's three lists agree (docs/versioning.md).

Checks that every symbol libzap.so exports carries the version node that
debian/libzap0.symbols gives it, and the reverse; that every node in
core/libzap.map is named LIBZAP_0 or LIBZAP_0.<minor> and inherits the
node before it; and that each symbol's minimum version is the release of
its node (LIBZAP_0: 0.1.0, LIBZAP_0.<n>: 0.<n>.0), so a symbol added to
an old node, or listed under the wrong release, fails here rather than
in a user's dpkg-shlibdeps.

usage: check-symbols.py NM LIBZAP_SO LIBZAP_MAP SYMBOLS_FILE
"""
import re
import subprocess
import sys


def node_release(node):
    if node == "LIBZAP_0":
        return "0.1.0"
    m = re.fullmatch(r"LIBZAP_0\.([1-9][0-9]*)", node)
    return "0.%s.0" % m.group(1) if m else None


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", "--with-symbol-versions", lib],
                         check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) != 3 or f[1] == "A":
            continue
        name, _, node = f[2].partition("@@")
        if not node:
            name, _, node = f[2].partition("@")
        syms[name] = node
    return syms


def map_nodes(path):
    text = re.sub(r"/\*.*?\*/", " ", open(path).read(), flags=re.S)
    # "NAME { ... } [PARENT];"
    return re.findall(r"([A-Za-z0-9_.]+)\s*\{[^}]*\}\s*([A-Za-z0-9_.]*)\s*;", text)


def listed(path):
    syms, errors = {}, []
    for n, line in enumerate(open(path), 1):
        if n == 1:
            if not line.startswith("libzap.so.0 libzap0 "):
                errors.append("%s:1: not the libzap.so.0 header: %r" % (path, line))
            continue
        if line.startswith("* "):
            continue  # a field such as Build-Depends-Package
        if not line.startswith(" "):
            errors.append("%s:%d: neither ' symbol@NODE version' nor '* field': %r"
                          % (path, n, line))
            continue
        m = re.fullmatch(r" ([\w.]+)@([\w.]+) (\S+)\n?", line)
        if not m:
            errors.append("%s:%d: not 'symbol@NODE version': %r" % (path, n, line))
            continue
        name, node, ver = m.groups()
        if name == node:
            continue  # the node's own entry
        syms[name] = (node, ver)
    return syms, errors


def main():
    nm, lib, mapfile, symfile = sys.argv[1:5]
    errors = []
    nodes = map_nodes(mapfile)
    prev = None
    for node, parent in nodes:
        if node_release(node) is None:
            errors.append("%s: node %s is not LIBZAP_0 or LIBZAP_0.<minor>" % (mapfile, node))
        if prev is not None and parent != prev:
            errors.append("%s: node %s must inherit %s, not %r" % (mapfile, node, prev, parent))
        prev = node
    have = exported(nm, lib)
    want, errs = listed(symfile)
    errors += errs
    for name, node in sorted(have.items()):
        if name not in want:
            errors.append("%s exports %s@%s, missing from %s" % (lib, name, node, symfile))
        elif want[name][0] != node:
            errors.append("%s: %s is @%s in %s but @%s in the library"
                          % (symfile, name, want[name][0], symfile, node))
    for name, (node, ver) in sorted(want.items()):
        if name not in have:
            errors.append("%s lists %s@%s, which the library does not export" % (symfile, name, node))
        if node_release(node) != ver:
            errors.append("%s: %s@%s should have version %s (its node's release), not %s"
                          % (symfile, name, node, node_release(node), ver))
    for e in errors:
        print(e, file=sys.stderr)
    print("%d symbols, %d nodes: %s" % (len(have), len(nodes), "FAIL" if errors else "ok"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
