#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""docs/environment.md and libzap's configuration registry agree.

The registry (core/config-vars.c) is read through the library itself:
`zap-info --env --json` lists every variable with its type, owner,
default and setuid policy. Checked:

- every registry variable has exactly one row in docs/environment.md,
  in the section of its owner, whose type, default and setuid columns
  are the registry's; every row there names a registry variable (the
  "Tests, benchmarks and packaging only" section excepted);
- man/libzap.7.in names every registry variable; README.md links
  docs/environment.md;
- every "ZAP_..." literal in core/, util/, plugins/ and tools/ is a
  registry variable (a new variable must be declared there first);
- util/, plugins/ and tools/ call no getenv() or secure_getenv():
  configuration comes through the registry (the host table).

Usage: check-env-docs.py SOURCE_ROOT ZAP_INFO
"""
import json
import os
import re
import subprocess
import sys

DIRS = ("core", "util", "plugins", "tools")
NAME = r"ZAP_[A-Z0-9_]+"
LITERAL = re.compile(r'"(' + NAME + r')')
GETENV = re.compile(r"\b(secure_)?getenv\s*\(")
ROW = re.compile(r"^\| `(" + NAME + r")` \| ([^|]*) \| ([^|]*) \| ([^|]*) \|")
# Section heading words -> registry owner.
SECTIONS = (("Core", "core"), ("TCP wire", "tcp"), ("TLS", "tls"),
            ("CUDA", "cuda"), ("uma", "uma"), ("gpudirect", "gpudirect"),
            ("dpdk", "dpdk"))
# Literals that are not variables the library reads: macros and words
# that only look like one.
NOT_VARS = {"ZAP_BOOL_SPELLINGS"}


def registry(zap_info):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("ZAP_"):
            del env[k]  # the defaults, whatever the caller set
    out = subprocess.run([zap_info, "--env", "--json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {e["name"]: e for e in json.loads(out)["env"]}


def doc_rows(text):
    rows, owner, tests = {}, None, False
    for line in text.splitlines():
        if line.startswith("## "):
            tests = line.startswith("## Tests")
            owner = next((o for w, o in SECTIONS if line[3:].startswith(w)), None)
            continue
        m = ROW.match(line)
        if m and not tests:
            rows.setdefault(m.group(1), []).append(
                (owner, m.group(2).strip(), m.group(3).strip(), m.group(4).strip()))
    return rows


def sources(root):
    for d in DIRS:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith((".c", ".h")):
                    yield d, os.path.join(base, f)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    root, zap_info = sys.argv[1], sys.argv[2]
    reg = registry(zap_info)
    bad = []
    if len(reg) < 50:
        bad.append(f"zap-info --env listed only {len(reg)} variables")
    doc = open(os.path.join(root, "docs/environment.md"), encoding="utf-8").read()
    man = open(os.path.join(root, "man/libzap.7.in"), encoding="utf-8").read()
    rows = doc_rows(doc)
    for name, e in sorted(reg.items()):
        r = rows.get(name, [])
        if len(r) != 1:
            bad.append(f"{name}: {len(r)} rows in docs/environment.md, want 1")
            continue
        owner, typ, default, setuid = r[0]
        want = (e["owner"], e["type"], e["default"], e["setuid"])
        if (owner, typ, default, setuid) != want:
            bad.append(f"{name}: docs/environment.md says section {owner}, type "
                       f"{typ!r}, default {default!r}, setuid {setuid!r}; the "
                       f"registry {want[0]}, {want[1]!r}, {want[2]!r}, {want[3]!r}")
        if not re.search(r"(?<![A-Z0-9_])" + name + r"(?![A-Z0-9_])", man):
            bad.append(f"{name} is not named in man/libzap.7.in")
    for name in sorted(set(rows) - set(reg)):
        bad.append(f"{name} has a row in docs/environment.md but is not in the "
                   "registry (core/config-vars.c)")
    for d, path in sources(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        for m in LITERAL.finditer(text):
            if m.group(1) not in reg and m.group(1) not in NOT_VARS:
                bad.append(f"{rel}: names {m.group(1)}, which is not in the "
                           "registry (core/config-vars.c)")
        if d != "core":
            for m in GETENV.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{rel}:{line}: calls {m.group(0).rstrip('(').strip()}(): "
                           "read configuration through the registry (zap_host."
                           "config_u64/config_str) instead")
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    if "docs/environment.md" not in readme:
        bad.append("README.md does not link docs/environment.md")
    for b in bad:
        print(b)
    print(f"# {len(reg)} variables in the registry, {len(rows)} documented; "
          f"{len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
