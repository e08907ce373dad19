#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every function libzap exports has a section 3 page, and every page of
the build formats without a warning.

  check-man-pages.py LIBZAP_MAP MAN_BUILD_DIR

The exported functions are the global symbols of core/libzap.map; their
pages are what man/gen-man3.py wrote into MAN_BUILD_DIR. Each page there
(section 1, 3 and 7) goes through `man --warnings` as lintian runs it, or
`groff -man -ww -z` where man-db is missing; any line on its standard
error fails the test. Exits 77 when neither man nor groff is installed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def exported(map_path):
    syms, glob_on = [], False
    for line in open(map_path, encoding="utf-8"):
        line = line.split("/*")[0].strip()
        if line.startswith("global:"):
            glob_on = True
        elif line.startswith("local:") or line.startswith("}"):
            glob_on = False
        elif glob_on and re.fullmatch(r"\w+;", line):
            syms.append(line[:-1])
    return syms


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    map_path, man_dir = argv[1], argv[2]
    bad = []
    syms = exported(map_path)
    if not syms:
        bad.append("no exported symbol found in %s" % map_path)
    for s in syms:
        if not os.path.isfile(os.path.join(man_dir, s + ".3")):
            bad.append("%s is exported (libzap.map) but has no man page %s.3: give it a "
                       "doc comment in include/zap/zap.h (man/gen-man3.py), and "
                       "reconfigure if it is new" % (s, s))
    man = shutil.which("man")
    groff = shutil.which("groff")
    if not man and not groff:
        print("1..0 # SKIP neither man (man-db) nor groff (groff-base) is installed")
        return 77
    pages = sorted(glob.glob(os.path.join(man_dir, "*.[137]")))
    if len(pages) < len(syms):
        bad.append("only %d pages in %s" % (len(pages), man_dir))
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80", MANROFFSEQ="")
    for p in pages:
        if man:
            cmd = [man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", p]
        else:
            cmd = [groff, "-man", "-ww", "-z", "-Tutf8", p]
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=env, check=False)
        err = r.stderr.decode("utf-8", "replace").strip()
        if r.returncode or err:
            bad.append("%s: %s (exit %d)" % (os.path.basename(p), err or "no output",
                                              r.returncode))
    for b in bad:
        print("not ok - " + b)
    print("man pages: %d exported functions, %d pages checked with %s, %d problems"
          % (len(syms), len(pages), "man --warnings" if man else "groff -ww", len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
