#!/bin/bash
# SPDX-License-Identifier: MIT
#
# zap-perf over the default transport against a raw blocking-socket C
# ping-pong/stream (bench/raw_tcp.c), and against sockperf, fi_pingpong
# ("-p tcp -e msg") and ucx_perftest (UCX_TLS=tcp)
# where installed. Same sizes, two processes on loopback, pinned to
# different cores. Prints one table of ratios against raw TCP.
#
# zap runs twice: with no variable set (the polling thread spins for a
# time learned from recent waits, and not at all once traffic stops) and
# with ZAP_TCP_SPIN_US=$SPIN_US, a fixed spin before sleeping in the kernel,
# as fi_pingpong and ucx_perftest always do (burning a core per waiting
# process). The baseline stays the raw *blocking* socket; a raw
# busy-polling row (raw_tcp --spin) is shown too, and the default row is
# held to 1.25x its median. bench/tcp-waiting.sh measures what waiting
# costs when idle and on an oversubscribed host.
#
# Latency statistics differ by tool: raw_tcp, zap-perf, sockperf and
# ucx_perftest give a median and a mean, fi_pingpong only a mean (total
# time / messages). Each ratio column compares like with like: "vs raw"
# and "vs ucx" medians, "vs fi" means.
#
# usage: bench/tcp-vs-raw.sh [BUILD_DIR]    (default: build)
# env:   REPS (3)       runs per tool; the best run counts (this host is noisy)
#        ITERS (20000)  64 B round trips per run
#        BYTES (2G)     bytes streamed per 1 MiB bandwidth run
#        SECS (5)       duration of sockperf/ucx runs
#        CPUS ("0,1")   server core, client core
#        SPIN_US (200)  ZAP_TCP_SPIN_US for the spinning zap run
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
REPS=${REPS:-3}
ITERS=${ITERS:-20000}
BYTES=${BYTES:-2G}
SECS=${SECS:-5}
CPUS=${CPUS:-0,1}
SPIN_US=${SPIN_US:-200}
cs=${CPUS%,*}
cc=${CPUS#*,}
export ZAP_TRANSPORT_QUIET=1 ZAP_SHM=off # TCP, not the same-host upgrade (bench/shm.sh)

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

echo "running: $REPS runs each, 64 B x $ITERS round trips, 1 MiB x $BYTES streamed, cores $cs/$cc, spin ${SPIN_US} us" >&2
# Per row NAME: NAME_lat (medians), NAME_avg (means), NAME_bw, one a run.
for f in raw rawspin zap zapspin sp fi ucx; do
	: > "$tmp/${f}_lat"; : > "$tmp/${f}_avg"; : > "$tmp/${f}_bw"
done
lat_run() { # NAME JSON
	json_get "$2" latency 64 median_us >> "$tmp/$1_lat"
	json_get "$2" latency 64 avg_us >> "$tmp/$1_avg"
}
lat_args=(--loopback --cpus "$cs,$cc" -t default -s 64 -T lat -n "$ITERS" --json)
bw_args=(--loopback --cpus "$cs,$cc" -t default -s 1M -T bw -b "$BYTES" --json)
for rep in $(seq "$REPS"); do
	# Interleave them so drift on the host hits all alike.
	"$raw" --loopback --cpus "$cs,$cc" --sizes 64 --tests lat --iters "$ITERS" --json > "$tmp/r.json" &&
		lat_run raw "$tmp/r.json"
	"$raw" --spin --loopback --cpus "$cs,$cc" --sizes 64 --tests lat --iters "$ITERS" --json > "$tmp/r.json" &&
		lat_run rawspin "$tmp/r.json"
	"$perf" "${lat_args[@]}" > "$tmp/z.json" && lat_run zap "$tmp/z.json"
	ZAP_TCP_SPIN_US=$SPIN_US "$perf" "${lat_args[@]}" > "$tmp/z.json" &&
		lat_run zapspin "$tmp/z.json"
	"$raw" --loopback --cpus "$cs,$cc" --sizes 1M --tests bw --bytes "$BYTES" --json > "$tmp/r.json" &&
		json_get "$tmp/r.json" bandwidth 1048576 mb_per_s >> "$tmp/raw_bw"
	"$perf" "${bw_args[@]}" > "$tmp/z.json" &&
		json_get "$tmp/z.json" bandwidth 1048576 mb_per_s >> "$tmp/zap_bw"
	ZAP_TCP_SPIN_US=$SPIN_US "$perf" "${bw_args[@]}" > "$tmp/z.json" &&
		json_get "$tmp/z.json" bandwidth 1048576 mb_per_s >> "$tmp/zapspin_bw"
done

port=$((20000 + RANDOM % 20000))

# sockperf: ping-pong reports one-way latency percentiles; tp reports MBps.
sp_lat=n/a sp_avg=n/a sp_bw=n/a
if command -v sockperf >/dev/null; then
	for rep in $(seq "$REPS"); do
		taskset -c "$cs" sockperf sr --tcp -i 127.0.0.1 -p "$port" > /dev/null 2>&1 &
		srv=$!
		sleep 0.5
		taskset -c "$cc" sockperf pp --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$SECS" > "$tmp/sp" 2>&1
		awk '/percentile 50.000/ {print $NF}' "$tmp/sp" >> "$tmp/sp_lat"
		sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' "$tmp/sp" >> "$tmp/sp_avg"
		taskset -c "$cc" sockperf tp --tcp -i 127.0.0.1 -p "$port" -m 65000 -t "$SECS" > "$tmp/sp" 2>&1
		# sockperf caps -m at 64 KB for TCP; its bandwidth is at 65000 B.
		grep -o 'BandWidth is [0-9.]* MBps' "$tmp/sp" | awk '{print $3 * 1.048576}' >> "$tmp/sp_bw"
		kill $srv 2>/dev/null; wait $srv 2>/dev/null
		port=$((port + 1))
	done
	sp_lat=$(best_min < "$tmp/sp_lat"); sp_lat=${sp_lat:-n/a}
	sp_avg=$(best_min < "$tmp/sp_avg"); sp_avg=${sp_avg:-n/a}
	sp_bw=$(best_max < "$tmp/sp_bw"); sp_bw=${sp_bw:-n/a}
else
	echo "note: sockperf not installed (apt-get install sockperf): skipped" >&2
fi

# fi_pingpong prints one line per size:
#   bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
# usec/xfer ($7) is the mean one-way latency (time / messages both ways);
# it has no median. MB/sec ($6, 10^6 B/s) at 1 MiB is a *ping-pong*: one
# message in flight, both directions counted, so it is not a streaming
# bandwidth like the other rows'; the table shows it marked as such and
# without a ratio.
fi_avg=n/a fi_bw=n/a
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
				awk '$1 == "64" {print $7}' "$tmp/fi" >> "$tmp/fi_avg"
			else
				awk '$1 == "1m" || $1 == "1048576" {print $6}' "$tmp/fi" >> "$tmp/fi_bw"
			fi
		done
	done
	fi_avg=$(best_min < "$tmp/fi_avg"); fi_avg=${fi_avg:-n/a}
	fi_bw=$(best_max < "$tmp/fi_bw"); fi_bw=${fi_bw:-n/a}
else
	echo "note: fi_pingpong not installed (apt-get install libfabric-bin): skipped" >&2
fi

# ucx_perftest "Final:" line: iterations, then one-way latency (usec)
# 50th percentile, average, overall; tag_bw's MB/s are 2^20 B/s.
ucx_lat=n/a ucx_avg=n/a ucx_bw=n/a
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
				awk '/^Final:/ {print $4}' "$tmp/ucx" >> "$tmp/ucx_avg"
			else
				awk '/^Final:/ {print $7 * 1.048576}' "$tmp/ucx" >> "$tmp/ucx_bw"
			fi
		done
	done
	ucx_lat=$(best_min < "$tmp/ucx_lat"); ucx_lat=${ucx_lat:-n/a}
	ucx_avg=$(best_min < "$tmp/ucx_avg"); ucx_avg=${ucx_avg:-n/a}
	ucx_bw=$(best_max < "$tmp/ucx_bw"); ucx_bw=${ucx_bw:-n/a}
else
	echo "note: ucx_perftest not installed (apt-get install ucx-utils): skipped" >&2
fi

pick() { # FILE min|max
	local v
	if [ "$2" = min ]; then v=$(best_min < "$1"); else v=$(best_max < "$1"); fi
	echo "${v:-n/a}"
}
args=()
for r in raw rawspin zap zapspin; do
	args+=("$(pick "$tmp/${r}_lat" min)" "$(pick "$tmp/${r}_avg" min)" "$(pick "$tmp/${r}_bw" max)")
done
args+=("$sp_lat" "$sp_avg" "$sp_bw" n/a "$fi_avg" "$fi_bw" "$ucx_lat" "$ucx_avg" "$ucx_bw")

python3 - "$SPIN_US" "${args[@]}" <<'EOF'
import sys
spin = sys.argv[1]
v = sys.argv[2:]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
names = ["raw C sockets (baseline)", "raw C, busy-poll (info)", "zap-perf default",
         "zap-perf default, spin %s" % spin, "sockperf", "fi_pingpong tcp",
         "ucx_perftest tcp"]
rows = {n: tuple(map(num, v[3 * i:3 * i + 3])) for i, n in enumerate(names)}
raw, fi, ucx = rows[names[0]], rows["fi_pingpong tcp"], rows["ucx_perftest tcp"]
def f(x, p="%.2f"):
    return p % x if x else "n/a"
def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "-"
print()
print("%-30s %8s %8s %8s %8s %8s   %10s %7s" % ("64 B one-way latency (us)", "median", "mean",
      "vs raw", "vs fi", "vs ucx", "1 MiB MB/s", "vs raw"))
print("%-30s %8s %8s %8s %8s %8s   %10s %7s" % ("", "", "", "median", "mean", "median", "best run", ""))
for n in names:
    med, avg, bw = rows[n]
    bws, br = f(bw, "%.0f"), ratio(bw, raw[2])
    if n == "fi_pingpong tcp" and bw:
        bws, br = bws + "*", "-"
    print("%-30s %8s %8s %8s %8s %8s   %10s %7s" % (n, f(med), f(avg), ratio(med, raw[0]),
          ratio(avg, fi[1]), ratio(med, ucx[0]), bws, br))
print()
rawspin = rows[names[1]]
for n in ("zap-perf default", "zap-perf default, spin %s" % spin):
    med, avg, bw = rows[n]
    print(n + ":")
    if med and rawspin[0]:
        print("  latency   <= 1.25x raw busy-poll:      %.2fx  %s" % (med / rawspin[0], "met" if med / rawspin[0] <= 1.25 else "MISSED"))
    if med and raw[0]:
        print("  latency   <= 1.10x raw (median):       %.2fx  %s" % (med / raw[0], "met" if med / raw[0] <= 1.10 else "MISSED"))
    if avg and fi[1]:
        print("  latency   below fi_pingpong (mean):    %.2f vs %.2f us  %s" % (avg, fi[1], "met" if avg < fi[1] else "MISSED"))
    if med and ucx[0]:
        print("  latency   below ucx_perftest (median): %.2f vs %.2f us  %s" % (med, ucx[0], "met" if med < ucx[0] else "MISSED"))
    if bw and raw[2]:
        print("  bandwidth >= 0.90x raw:                %.2fx  %s" % (bw / raw[2], "met" if bw / raw[2] >= 0.90 else "MISSED"))
print("""
fi_pingpong and ucx_perftest busy-poll; raw C and sockperf block in the
kernel; zap-perf default spins only while replies come quickly (learned),
the busy-poll and "spin" rows always spin (a core each while waiting). sockperf bandwidth is at 65000 B messages, its TCP maximum.
* fi_pingpong has no streaming test: its 1 MiB figure is a ping-pong (one
  message in flight, both directions counted): not comparable, no ratio.
Latency: best run of each (lowest median, lowest mean); bandwidth: best run.""")
EOF
