#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Two processes on this host, default settings, against ucx_perftest over
# shared memory (UCX_TLS=posix,self), in one run, best of REPS each
# (issue #17's goals):
#   1. 64 B one-way latency (median of RTT/2): zap-perf with the upgrade
#      (the default), zap-perf with ZAP_SHM=off (loopback TCP), UCX
#      posix. Goal ("while traffic flows"): libzap at most 1.5x UCX's.
#      zap-perf warms up with WARMUP (30000) round trips first: a new
#      ring's pages are faulted in by its first 2 MiB of traffic, which
#      at 64 B is longer than the default warm-up (the cold row shows it).
#   2. 1 MiB streaming bandwidth, the same three. Goal: at or above UCX.
#   3. The waiting side once traffic stops: CPU of an endpoint idle in
#      zap_recv() for SECS s beside one upgraded peer (bench/idle_cpu).
#      Goal: at most 1% of a core.
#   4. What the upgrade costs at connection time: a fresh endpoint's
#      first round trip (dial, HELLOs, set-up, one message each way),
#      median and p90 of 200 (bench/conn_setup), with and without.
#
# usage: bench/shm.sh [BUILD_DIR]     (default: build)
# env:   REPS (3) ITERS (20000) BYTES (2G) CPUS ("0,1") SECS (10)
set -u
build=${1:-build}
REPS=${REPS:-3}
SECS=${SECS:-10}
WARMUP=${WARMUP:-30000}
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # ITERS BYTES CPUS, perf_lat, perf_bw
unset ZAP_SHM
need_built "$perf" "$build/bench/idle_cpu" "$build/bench/conn_setup"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
cs=${CPUS%,*} cc=${CPUS#*,}
for k in shm tcp ucx; do : > "$tmp/${k}_lat"; : > "$tmp/${k}_bw"; done
: > "$tmp/cold_lat"
echo "running: $REPS runs each, 64 B x $ITERS round trips, 1 MiB x $BYTES, cores $CPUS" >&2
port=$((20000 + RANDOM % 20000))
for rep in $(seq "$REPS"); do
	perf_lat "$tmp/shm_lat" -- --warmup "$WARMUP"
	perf_lat "$tmp/cold_lat"
	perf_bw "$tmp/shm_bw"
	perf_lat "$tmp/tcp_lat" ZAP_SHM=off -- --warmup "$WARMUP"
	perf_bw "$tmp/tcp_bw" ZAP_SHM=off
	if command -v ucx_perftest > /dev/null; then
		for t in tag_lat tag_bw; do
			sz=64 n=$ITERS; [ $t = tag_bw ] && sz=1048576 n=2000
			UCX_TLS=posix,self taskset -c "$cs" ucx_perftest -p "$port" > /dev/null 2>&1 &
			srv=$!
			sleep 0.5
			UCX_TLS=posix,self timeout 120 taskset -c "$cc" ucx_perftest 127.0.0.1 \
				-p "$port" -t $t -s $sz -n $n > "$tmp/ucx" 2>&1
			sleep 0.2; kill $srv 2>/dev/null; wait $srv 2>/dev/null
			port=$((port + 1))
			# "Final:": iterations, latency 50th percentile, average...;
			# tag_bw's MB/s are 2^20 B/s.
			if [ $t = tag_lat ]; then
				awk '/^Final:/ {print ($3 > 0 ? $3 : $4)}' "$tmp/ucx" >> "$tmp/ucx_lat"
			else
				awk '/^Final:/ {print $7 * 1.048576}' "$tmp/ucx" >> "$tmp/ucx_bw"
			fi
		done
	fi
done
"$build/bench/idle_cpu" 1 "$SECS" > "$tmp/idle" 2> "$tmp/idle.err" || cat "$tmp/idle.err" >&2
"$build/bench/conn_setup" 200 > "$tmp/conn_shm"
ZAP_SHM=off "$build/bench/conn_setup" 200 > "$tmp/conn_tcp"
python3 - "$tmp" <<'PY'
import json, os, re, sys
d = sys.argv[1]
def vals(n):
    try:
        return [float(x) for x in open(f"{d}/{n}").read().split()]
    except OSError:
        return []
def best(n, f):
    v = vals(n)
    return f(v) if v else None
s_l, t_l, u_l = best("shm_lat", min), best("tcp_lat", min), best("ucx_lat", min)
s_b, t_b, u_b = best("shm_bw", max), best("tcp_bw", max), best("ucx_bw", max)
if s_l is None or s_b is None:
    sys.exit("no libzap result: a zap-perf run failed")
def f(x, fmt):
    return format(x, fmt) if x is not None else "n/a"
print(f"{'':26}{'libzap shm':>12}{'libzap TCP':>12}{'UCX posix':>12}{'shm/UCX':>9}  goal")
r = s_l / u_l if u_l else None
print(f"{'64 B latency (us)':26}{s_l:12.3f}{f(t_l, '12.3f')}{f(u_l, '12.3f')}{f(r, '9.2f')}  "
      f"<= 1.5x UCX: {('met' if r <= 1.5 else 'MISSED') if r else 'n/a'}")
c_l = best("cold_lat", min)
print(f"{'  same, 100 warm-up RTTs':26}{f(c_l, '12.3f')}{'':24}{f(c_l / u_l if u_l and c_l else None, '9.2f')}  (new ring: pages still faulting in)")
r = s_b / u_b if u_b else None
print(f"{'1 MiB bandwidth (MB/s)':26}{s_b:12.0f}{f(t_b, '12.0f')}{f(u_b, '12.0f')}{f(r, '9.2f')}  "
      f">= UCX: {('met' if r >= 1 else 'MISSED') if r else 'n/a'}")
idle = open(f"{d}/idle").read()
m = re.search(r"([0-9.]+)\s*%", idle)
if m:
    p = float(m.group(1))
    print(f"{'idle in zap_recv (% core)':26}{p:12.2f}{'':33}  <= 1%: {'met' if p <= 1 else 'MISSED'}")
else:
    print("idle: no result: " + idle.strip())
cs, ct = json.load(open(f"{d}/conn_shm")), json.load(open(f"{d}/conn_tcp"))
print(f"{'new connection, 1st RTT':26}{cs['median_us']:10d}us{ct['median_us']:10d}us"
      f"   (p90 {cs['p90_us']} / {ct['p90_us']} us; paths {cs['path']} / {ct['path']})")
PY
