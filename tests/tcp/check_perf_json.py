#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run `zap-perf --loopback --json` with small counts and check its JSON."""
import json
import os
import subprocess
import sys

perf = sys.argv[1]
cmd = [perf, "--loopback", "--json", "--transport", "default",
       "--sizes", "1,4K,1M", "--iters", "50", "--msgs", "200",
       "--bytes", "4M", "--window", "8", "--warmup", "5"]
out = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=50, check=True)
doc = json.loads(out.stdout)
assert doc["transport"] == "default", doc
assert doc["peer"].startswith("127.0.0.1:"), doc
# Two processes of one user on this host: the same-host upgrade.
assert doc["path"] == "shm", doc
rows = doc["results"]
assert len(rows) == 9, rows
seen = set()
for r in rows:
    seen.add((r["test"], r["size"]))
    assert r["count"] > 0, r
    if r["test"] == "latency":
        assert 0 < r["min_us"] <= r["median_us"] <= r["p99_us"], r
    else:
        assert r["test"] in ("rate", "bandwidth"), r
        assert r["msgs_per_s"] > 0 and r["mb_per_s"] > 0, r
for t in ("latency", "rate", "bandwidth"):
    for s in (1, 4096, 1 << 20):
        assert (t, s) in seen, (t, s)

# --burst: the rate and bandwidth tests go through zap_send_burst(), over
# the rings and over TCP, and say so.
for shm in ("user", "off"):
    env = dict(os.environ, ZAP_SHM=shm)
    out = subprocess.run([perf, "--loopback", "--json", "--transport", "default",
                          "--sizes", "64,64K", "--tests", "rate,bw", "--msgs", "5000",
                          "--bytes", "8M", "--window", "16", "--burst", "16"],
                         stdout=subprocess.PIPE, timeout=50, check=True, env=env)
    doc = json.loads(out.stdout)
    assert doc["path"] == ("shm" if shm == "user" else "tcp"), doc
    assert len(doc["results"]) == 4, doc
    for r in doc["results"]:
        assert r["burst"] == 16 and r["msgs_per_s"] > 0, r
assert json.loads(subprocess.run([perf, "--loopback", "--json", "--sizes", "64",
                                  "--tests", "rate", "--msgs", "100"],
                                 stdout=subprocess.PIPE, timeout=50,
                                 check=True).stdout)["results"][0]["burst"] == 1

# --help documents the options; bad usage exits 2.
h = subprocess.run([perf, "--help"], stdout=subprocess.PIPE, check=True).stdout.decode()
for opt in ("--loopback", "--json", "--transport", "--sizes", "--window", "--burst",
            "server", "client"):
    assert opt in h, opt
assert subprocess.run([perf, "--sizes", "x", "--loopback"],
                      stderr=subprocess.DEVNULL).returncode == 2
assert subprocess.run([perf, "--burst", "0", "--loopback"],
                      stderr=subprocess.DEVNULL).returncode == 2
print("ok: %d rows" % len(rows))
