#!/bin/bash
# SPDX-License-Identifier: MIT
#
# zap-perf over the default transport against a raw blocking-socket C
# ping-pong/stream (bench/raw_tcp.c), and against sockperf, fi_pingpong
# ("-p tcp -e msg") and ucx_perftest (UCX_TLS=tcp)
# where installed. Same sizes, two processes on loopback, pinned to
# different cores. Prints one table of ratios against raw TCP.
#
# usage: bench/tcp-vs-raw.sh [BUILD_DIR]    (default: build)
# env:   REPS (3)       runs per tool; the best run counts (this host is noisy)
#        ITERS (20000)  64 B round trips per run
#        BYTES (2G)     bytes streamed per 1 MiB bandwidth run
#        SECS (5)       duration of sockperf/ucx runs
#        CPUS ("0,1")   server core, client core
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
REPS=${REPS:-3}
ITERS=${ITERS:-20000}
BYTES=${BYTES:-2G}
SECS=${SECS:-5}
CPUS=${CPUS:-0,1}
cs=${CPUS%,*}
cc=${CPUS#*,}
export ZAP_TRANSPORT_QUIET=1

perf=$build/tools/zap-perf
[ -x "$perf" ] || { echo "no $perf: build first (meson compile -C $build)" >&2; exit 1; }
raw=$build/bench/raw_tcp
if [ ! -x "$raw" ]; then
	raw=$(mktemp -d)/raw_tcp
	cc -O2 -D_GNU_SOURCE -o "$raw" "$here/raw_tcp.c" || exit 1
fi
if [ "$(nproc)" -lt 2 ]; then
	echo "note: one CPU only; peers share it" >&2
	cs=0 cc=0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT

# jq-free JSON field pick: json_get FILE TEST SIZE FIELD
json_get() {
	python3 - "$@" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["results"]:
    if r["test"] == sys.argv[2] and r["size"] == int(sys.argv[3]):
        print(r[sys.argv[4]])
        break
EOF
}
best_min() { sort -g | head -1; }
best_max() { sort -g | tail -1; }

echo "running: $REPS runs each, 64 B x $ITERS round trips, 1 MiB x $BYTES streamed, cores $cs/$cc" >&2
: > "$tmp/raw_lat"; : > "$tmp/raw_bw"; : > "$tmp/zap_lat"; : > "$tmp/zap_bw"
for rep in $(seq "$REPS"); do
	# Interleave the two so drift on the host hits both alike.
	"$raw" --loopback --cpus "$cs,$cc" --sizes 64 --tests lat --iters "$ITERS" --json > "$tmp/r.json" &&
		json_get "$tmp/r.json" latency 64 median_us >> "$tmp/raw_lat"
	"$perf" --loopback --cpus "$cs,$cc" -t default -s 64 -T lat -n "$ITERS" --json > "$tmp/z.json" &&
		json_get "$tmp/z.json" latency 64 median_us >> "$tmp/zap_lat"
	"$raw" --loopback --cpus "$cs,$cc" --sizes 1M --tests bw --bytes "$BYTES" --json > "$tmp/r.json" &&
		json_get "$tmp/r.json" bandwidth 1048576 mb_per_s >> "$tmp/raw_bw"
	"$perf" --loopback --cpus "$cs,$cc" -t default -s 1M -T bw -b "$BYTES" --json > "$tmp/z.json" &&
		json_get "$tmp/z.json" bandwidth 1048576 mb_per_s >> "$tmp/zap_bw"
done
raw_lat=$(best_min < "$tmp/raw_lat")
zap_lat=$(best_min < "$tmp/zap_lat")
raw_bw=$(best_max < "$tmp/raw_bw")
zap_bw=$(best_max < "$tmp/zap_bw")

port=$((20000 + RANDOM % 20000))

# sockperf: ping-pong reports one-way latency percentiles; tp reports MBps.
sp_lat=n/a sp_bw=n/a
if command -v sockperf >/dev/null; then
	for rep in $(seq "$REPS"); do
		taskset -c "$cs" sockperf sr --tcp -i 127.0.0.1 -p "$port" > /dev/null 2>&1 &
		srv=$!
		sleep 0.5
		taskset -c "$cc" sockperf pp --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$SECS" > "$tmp/sp" 2>&1
		awk '/percentile 50.000/ {print $NF}' "$tmp/sp" >> "$tmp/sp_lat"
		taskset -c "$cc" sockperf tp --tcp -i 127.0.0.1 -p "$port" -m 65000 -t "$SECS" > "$tmp/sp" 2>&1
		# sockperf caps -m at 64 KB for TCP; its bandwidth is at 65000 B.
		grep -o 'BandWidth is [0-9.]* MBps' "$tmp/sp" | awk '{print $3 * 1.048576}' >> "$tmp/sp_bw"
		kill $srv 2>/dev/null; wait $srv 2>/dev/null
		port=$((port + 1))
	done
	sp_lat=$(best_min < "$tmp/sp_lat"); sp_lat=${sp_lat:-n/a}
	sp_bw=$(best_max < "$tmp/sp_bw"); sp_bw=${sp_bw:-n/a}
else
	echo "note: sockperf not installed (apt-get install sockperf): skipped" >&2
fi

# fi_pingpong: usec/xfer is one-way latency; MB/sec is 10^6 bytes/s.
fi_lat=n/a fi_bw=n/a
if command -v fi_pingpong >/dev/null; then
	for rep in $(seq "$REPS"); do
		for sz in 64 1048576; do
			n=$ITERS; [ "$sz" = 1048576 ] && n=500
			taskset -c "$cs" fi_pingpong -p tcp -e msg -B "$port" -S "$sz" -I "$n" > /dev/null 2>&1 &
			srv=$!
			sleep 0.5
			timeout 120 taskset -c "$cc" fi_pingpong -p tcp -e msg -P "$port" -S "$sz" -I "$n" 127.0.0.1 > "$tmp/fi" 2>&1
			sleep 0.2; kill $srv 2>/dev/null; wait $srv 2>/dev/null
			port=$((port + 1))
			if [ "$sz" = 64 ]; then
				awk '$1 == "64" {print $6}' "$tmp/fi" >> "$tmp/fi_lat"
			else
				awk '$1 == "1m" || $1 == "1048576" {print $5}' "$tmp/fi" >> "$tmp/fi_bw"
			fi
		done
	done
	fi_lat=$(best_min < "$tmp/fi_lat"); fi_lat=${fi_lat:-n/a}
	fi_bw=$(best_max < "$tmp/fi_bw"); fi_bw=${fi_bw:-n/a}
else
	echo "note: fi_pingpong not installed (apt-get install libfabric-bin): skipped" >&2
fi

# ucx_perftest: tag_lat reports one-way latency (usec); tag_bw MB/s = 2^20.
ucx_lat=n/a ucx_bw=n/a
if command -v ucx_perftest >/dev/null; then
	for rep in $(seq "$REPS"); do
		for t in tag_lat tag_bw; do
			sz=64 n=$ITERS; [ $t = tag_bw ] && sz=1048576 n=1000
			UCX_TLS=tcp taskset -c "$cs" ucx_perftest -p "$port" > /dev/null 2>&1 &
			srv=$!
			sleep 0.5
			UCX_TLS=tcp timeout 120 taskset -c "$cc" ucx_perftest 127.0.0.1 -p "$port" -t $t -s $sz -n $n > "$tmp/ucx" 2>&1
			sleep 0.2; kill $srv 2>/dev/null; wait $srv 2>/dev/null
			port=$((port + 1))
			if [ $t = tag_lat ]; then
				awk '/^Final:/ {print ($3 > 0 ? $3 : $4)}' "$tmp/ucx" >> "$tmp/ucx_lat"
			else
				awk '/^Final:/ {print $7 * 1.048576}' "$tmp/ucx" >> "$tmp/ucx_bw"
			fi
		done
	done
	ucx_lat=$(best_min < "$tmp/ucx_lat"); ucx_lat=${ucx_lat:-n/a}
	ucx_bw=$(best_max < "$tmp/ucx_bw"); ucx_bw=${ucx_bw:-n/a}
else
	echo "note: ucx_perftest not installed (apt-get install ucx-utils): skipped" >&2
fi

python3 - "$raw_lat" "$zap_lat" "$sp_lat" "$fi_lat" "$ucx_lat" \
	"$raw_bw" "$zap_bw" "$sp_bw" "$fi_bw" "$ucx_bw" <<'EOF'
import sys
v = sys.argv[1:]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
lat = dict(zip(["raw C sockets", "zap-perf default", "sockperf", "fi_pingpong tcp", "ucx_perftest tcp"], map(num, v[:5])))
bw = dict(zip(["raw C sockets", "zap-perf default", "sockperf", "fi_pingpong tcp", "ucx_perftest tcp"], map(num, v[5:])))
print()
print("%-24s %14s %10s   %14s %10s" % ("", "64 B lat (us)", "vs raw", "1 MiB (MB/s)", "vs raw"))
print("%-24s %14s %10s   %14s %10s" % ("", "median 1-way", "", "best run", ""))
for (n, l), (n2, b) in zip(lat.items(), bw.items()):
    rl, rb = lat["raw C sockets"], bw["raw C sockets"]
    ls = "%.2f" % l if l else "n/a"
    bs = "%.0f" % b if b else "n/a"
    lr = "%.2fx" % (l / rl) if l and rl else "-"
    br = "%.2fx" % (b / rb) if b and rb else "-"
    print("%-24s %14s %10s   %14s %10s" % (n if n == n2 else n + " / " + n2, ls, lr, bs, br))
zl, rl, zb, rb = lat["zap-perf default"], lat["raw C sockets"], bw["zap-perf default"], bw["raw C sockets"]
print()
if zl and rl:
    print("goal latency  <= 1.10x raw:   %.2fx  %s" % (zl / rl, "met" if zl / rl <= 1.10 else "MISSED"))
for k in ("fi_pingpong tcp", "ucx_perftest tcp"):
    if zl and lat[k]:
        print("goal latency  below %-16s %.2f vs %.2f us  %s" % (k + ":", zl, lat[k], "met" if zl < lat[k] else "MISSED"))
print("(sockperf bandwidth is at 65000 B messages, its TCP maximum; fi_pingpong and\n ucx_perftest busy-poll, the others block in the kernel)")
if zb and rb:
    print("goal bandwidth >= 0.90x raw:  %.2fx  %s" % (zb / rb, "met" if zb / rb >= 0.90 else "MISSED"))
EOF
