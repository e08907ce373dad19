#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""No file of the project points at documents a person who clones or
installs it does not have: the steering design file or the folder beside
the checkout that holds it. docs/ is the reference.

Usage: check-in-tree-refs.py SOURCE_ROOT
"""
import os
import re
import sys

BAD = re.compile(r"DESIGN\.md|\.\./shared/")
SKIP_DIRS = {".git", "subprojects"}
# This file names the patterns it looks for; the packaging test greps
# installed pages for the same ones.
SKIP_FILES = {os.path.join("tests", "check-in-tree-refs.py"),
              os.path.join("packaging", "test-packages.sh")}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad, seen = 0, 0
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs
                   if d not in SKIP_DIRS and not d.startswith("build")]
        for f in files:
            path = os.path.join(base, f)
            rel = os.path.relpath(path, root)
            if rel in SKIP_FILES:
                continue
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue  # binary (fuzz corpora)
            seen += 1
            for n, line in enumerate(text.splitlines(), 1):
                if BAD.search(line):
                    print(f"{rel}:{n}: points outside the tree: {line.strip()}")
                    bad += 1
    print(f"# {seen} files read, {bad} pointing outside the tree")
    return 1 if bad or seen < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
