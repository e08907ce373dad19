#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check `zap-info --json` output: valid JSON, the documented schema, and
expectations given on the command line.

usage: check-zap-info-json.py FILE [PATH=VALUE | PATH~SUBSTRING]...

PATH is dotted: pick.name, isolated, exit_status, directories[0].status,
plugins[good].state (the first plugin row named good; good#1 for the
second), plugins[good].caps.max_msg_size, registered (a list compares
as its items joined by ','). Values compare as JSON spells them (true,
false, null, numbers) or as plain strings. Exit 0 when all hold, 1 with a
message per failure otherwise.
"""
import json
import re
import sys

SCHEMA = {
    "version": str,
    "abi": dict,
    "isolated": bool,
    "directories": list,
    "plugins": list,
    "registered": list,
    "pick": dict,
    "exit_status": int,
}
DIR_FIELDS = {"path": str, "source": str, "status": str}
PLUGIN_FIELDS = {
    "name": str, "state": str, "reason": str, "detail": str, "version": str,
    "rank": int, "builtin": bool, "path": str, "caps": dict,
}
CAPS_FIELDS = {
    "gpu_resident": bool, "zero_copy": bool, "device_buffers": bool,
    "min_latency_us": (int, float), "max_msg_size": int,
}
PICK_FIELDS = {
    "request": str, "source": str, "name": (str, type(None)),
    "status": str, "fallback": bool, "available": bool, "error": int,
    "reason": str,
}
STATES = {"loaded", "not present", "error", "no symbol", "ABI mismatch",
          "invalid", "refused", "shadowed", "dlopen failed"}

errors = []


def check_fields(where, obj, fields):
    if not isinstance(obj, dict):
        errors.append(f"{where}: not an object")
        return
    for key, typ in fields.items():
        if key not in obj:
            errors.append(f"{where}: missing '{key}'")
        elif not isinstance(obj[key], typ) or (
                typ is int and isinstance(obj[key], bool)):
            errors.append(f"{where}.{key}: wrong type {type(obj[key])}")
    extra = set(obj) - set(fields)
    if extra:
        errors.append(f"{where}: undocumented fields {sorted(extra)}")


def check_schema(doc):
    check_fields("top", doc, SCHEMA)
    if errors:
        return
    check_fields("abi", doc["abi"], {"major": int, "minor": int})
    for i, d in enumerate(doc["directories"]):
        check_fields(f"directories[{i}]", d, DIR_FIELDS)
    for i, p in enumerate(doc["plugins"]):
        check_fields(f"plugins[{i}]", p, PLUGIN_FIELDS)
        if isinstance(p, dict):
            check_fields(f"plugins[{i}].caps", p.get("caps"), CAPS_FIELDS)
            if p.get("state") not in STATES:
                errors.append(f"plugins[{i}].state: {p.get('state')!r}")
    for i, r in enumerate(doc["registered"]):
        if not isinstance(r, str):
            errors.append(f"registered[{i}]: not a string")
    check_fields("pick", doc["pick"], PICK_FIELDS)
    if doc["plugins"] and doc["plugins"][0].get("name") != "default":
        errors.append("plugins[0] is not the built-in default")


def lookup(doc, path):
    cur = doc
    for part in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
        if part.startswith("["):
            key = part[1:-1]
            if key.isdigit():
                cur = cur[int(key)]
                continue
            name, _, nth = key.partition("#")
            rows = [r for r in cur if r.get("name") == name]
            cur = rows[int(nth or 0)]
        else:
            cur = cur[part]
    return cur


def spell(v):
    if isinstance(v, list):
        return ",".join(spell(x) for x in v)
    if isinstance(v, (bool, type(None))) or not isinstance(v, str):
        return json.dumps(v)
    return v


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    text = open(sys.argv[1], encoding="utf-8").read()
    try:
        doc = json.loads(text)
    except ValueError as e:
        print(f"not valid JSON: {e}\n---\n{text}")
        return 1
    check_schema(doc)
    for expr in sys.argv[2:]:
        m = re.match(r"([^=~]+)([=~])(.*)$", expr, re.S)
        if not m:
            errors.append(f"bad expectation {expr!r}")
            continue
        path, op, want = m.groups()
        try:
            got = spell(lookup(doc, path))
        except (KeyError, IndexError, TypeError, AttributeError):
            errors.append(f"{path}: not present")
            continue
        if (op == "=" and got != want) or (op == "~" and want not in got):
            errors.append(f"{path} is {got!r}, expected "
                          f"{'' if op == '=' else 'to contain '}{want!r}")
    for e in errors:
        print(e)
    if errors:
        print("---\n" + text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
