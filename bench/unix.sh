#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The default transport over a Unix-domain socket beside loopback TCP, in
# one run: zap-perf's 64 B one-way latency (median of RTT/2) and 1 MiB
# streaming bandwidth, loopback TCP, a unix:/path socket and a unix:@name
# abstract socket interleaved, the best of REPS runs each. Goal (issue
# #17): Unix at least 1.3x faster than loopback TCP at 64 B.
#
# zap-perf --loopback puts the forked server on --listen; its client
# listens on 127.0.0.1:0 and dials the server, so every message of the
# Unix rows crosses the one Unix connection (the server's replies go back
# over the connection the client opened).
#
# usage: bench/unix.sh [BUILD_DIR]     (default: build)
# env:   REPS (5) ITERS (20000) BYTES (2G) CPUS ("0,1")
set -u
build=${1:-build}
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # REPS ITERS BYTES CPUS, perf_lat, perf_bw
need_built "$perf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A where=([tcp]=127.0.0.1:0 [path]="unix:$tmp/zap-perf.sock" [abstract]="unix:@zap-bench-$$")
for k in tcp path abstract; do : > "$tmp/${k}_lat"; : > "$tmp/${k}_bw"; done
echo "running: $REPS runs each, 64 B x $ITERS round trips, 1 MiB x $BYTES, cores $CPUS" >&2
for rep in $(seq "$REPS"); do
	for k in tcp path abstract; do # interleaved: drift hits all alike
		perf_lat "$tmp/${k}_lat" -- --listen "${where[$k]}"
		perf_bw "$tmp/${k}_bw" -- --listen "${where[$k]}"
	done
done
python3 - "$tmp" <<'PY'
import sys
d = sys.argv[1]
def vals(n):
    v = [float(x) for x in open(f"{d}/{n}").read().split()]
    if not v:
        sys.exit(f"no result for {n}: a zap-perf run failed")
    return v
t_l, t_b = min(vals("tcp_lat")), max(vals("tcp_bw"))
print(f"{'':24}{'loopback TCP':>14}{'unix:/path':>12}{'ratio':>8}{'unix:@name':>12}{'ratio':>8}  goal")
p_l, a_l = min(vals("path_lat")), min(vals("abstract_lat"))
p_b, a_b = max(vals("path_bw")), max(vals("abstract_bw"))
ok = t_l / p_l >= 1.3 and t_l / a_l >= 1.3
print(f"{'64 B latency (us)':24}{t_l:14.2f}{p_l:12.2f}{t_l / p_l:8.2f}{a_l:12.2f}{t_l / a_l:8.2f}"
      f"  >= 1.3x faster: {'met' if ok else 'MISSED'}")
print(f"{'1 MiB bandwidth (MB/s)':24}{t_b:14.0f}{p_b:12.0f}{p_b / t_b:8.2f}{a_b:12.0f}{a_b / t_b:8.2f}")
PY
