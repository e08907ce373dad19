#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every ZAP_* variable libzap reads is documented.

Scans the C sources of core/, util/, plugins/ and tools/ for environment
reads: a call to getenv(), secure_getenv() or any function whose name
contains "env" (env_bytes, env_u64, env_bool, env_trimmed, host->env_bytes,
...) whose first argument (or second, after a context) is a "ZAP_..." literal or a macro #defined to
one. Every string literal naming a ZAP_ variable counts too (messages that
name a variable the code reads). Each name must appear in
man/libzap.7.in and in docs/environment.md, and README.md must link
docs/environment.md.

Usage: check-env-docs.py SOURCE_ROOT
"""
import os
import re
import sys

DIRS = ("core", "util", "plugins", "tools")
NAME = r"ZAP_[A-Z0-9_]+"
DEFINE = re.compile(r'#\s*define\s+(\w+)\s+"(' + NAME + r')"')
# The name is the first argument, or the second after a context pointer
# (env_millis(c, "ZAP_...", ...)).
CALL = re.compile(r'([A-Za-z_][\w]*(?:->|\.)?[\w]*)\s*\(\s*(?:[a-z_]\w*\s*,\s*)?("(' + NAME + r')"|([A-Z_][A-Z0-9_]*))')
LITERAL = re.compile(r'"(' + NAME + r')')


def sources(root):
    for d in DIRS:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith((".c", ".h")):
                    yield os.path.join(base, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    macros, reads, literals = {}, {}, {}
    texts = {p: open(p, encoding="utf-8", errors="replace").read()
             for p in sources(root)}
    for p, t in texts.items():
        for m in DEFINE.finditer(t):
            macros[m.group(1)] = m.group(2)
    for p, t in texts.items():
        rel = os.path.relpath(p, root)
        for m in CALL.finditer(t):
            fn = m.group(1)
            if "env" not in fn.lower():
                continue
            name = m.group(3) or macros.get(m.group(4) or "")
            if name:
                reads.setdefault(name, set()).add(rel)
        for m in LITERAL.finditer(t):
            literals.setdefault(m.group(1), set()).add(rel)
    # Sanity: the scan must see reads of every kind it claims to handle.
    for must in ("ZAP_PLUGIN_PATH", "ZAP_LOG_LEVEL", "ZAP_TCP_SPIN_US",
                 "ZAP_UMA_POOL_BYTES", "ZAP_SEND_TIMEOUT_MS"):
        if must not in reads:
            print(f"check-env-docs: the scan missed {must}: fix the scanner")
            return 1
    names = dict(literals)
    for k, v in reads.items():
        names.setdefault(k, set()).update(v)
    docs = {
        "man/libzap.7.in": open(os.path.join(root, "man/libzap.7.in")).read(),
        "docs/environment.md": open(os.path.join(root, "docs/environment.md")).read(),
    }
    bad = 0
    for name in sorted(names):
        for doc, text in docs.items():
            if not re.search(r"(?<![A-Z0-9_])" + name + r"(?![A-Z0-9_])", text):
                print(f"{name} (read in {', '.join(sorted(names[name]))}) "
                      f"is not documented in {doc}")
                bad += 1
    readme = open(os.path.join(root, "README.md")).read()
    if "docs/environment.md" not in readme:
        print("README.md does not link docs/environment.md")
        bad += 1
    print(f"# {len(reads)} variables read, {len(names)} named in the sources; "
          f"{bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
