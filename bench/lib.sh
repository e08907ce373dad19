# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# The best-of-REPS zap-perf runner and JSON reader that the bench scripts
# (unix, tls, shm, tcp-waiting) share. Sourced, not run, after the script
# has set $build (its build directory):
#
#   build=${1:-build}
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It reads the runner's settings from the environment, REPS (5) runs of
# each contender, ITERS (20000) 64 B round trips, BYTES (2G) at 1 MiB,
# CPUS ("0,1") for zap-perf --cpus, and sets $perf to the build's
# zap-perf. A script runs every contender once per rep, interleaved so
# that drift hits them all alike, each run appending its result to a file
# of its own with perf_lat or perf_bw; then it keeps the best of each
# file (the lowest latency, the highest bandwidth).

: "${build:?set build before sourcing bench/lib.sh}"
REPS=${REPS:-5}
ITERS=${ITERS:-20000}
BYTES=${BYTES:-2G}
CPUS=${CPUS:-0,1}
# The sockets: bench/shm.sh measures the same-host upgrade (it unsets this).
export ZAP_TRANSPORT_QUIET=1 ZAP_PLUGIN_PATH= ZAP_SHM=off
perf=$build/tools/zap-perf

# need_built FILE...: exit unless every FILE is an executable of the build.
need_built() {
	local x
	for x in "$@"; do
		[ -x "$x" ] || { echo "no $x: build first (meson compile -C $build)" >&2; exit 1; }
	done
}

# json_get FILE TEST SIZE FIELD: FIELD of zap-perf's --json result for
# TEST at SIZE.
json_get() {
	python3 - "$@" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["results"]:
    if r["test"] == sys.argv[2] and r["size"] == int(sys.argv[3]):
        print(r[sys.argv[4]])
        break
PY
}

# perf_run_ OUT TEST SIZE FIELD [VAR=VALUE...] [-- ARG...]: one zap-perf
# --loopback run with the variables VAR set, ARG before TEST's own
# arguments; append FIELD of its result to OUT. A failed run appends
# nothing (the summary notices a file without results).
perf_run_() {
	local out=$1 test=$2 size=$3 field=$4 vars=() args
	shift 4
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	case $test in
	latency) args=(-s 64 -T lat -n "$ITERS") ;;
	bandwidth) args=(-s 1M -T bw -b "$BYTES") ;;
	esac
	env "${vars[@]}" "$perf" --loopback --cpus "$CPUS" -t =default "$@" \
		"${args[@]}" --json > "$out.json" &&
		json_get "$out.json" "$test" "$size" "$field" >> "$out"
}

# perf_lat OUT [VAR=VALUE...] [-- ARG...]: one 64 B latency run; append
# its median one-way latency (us, RTT/2) to OUT.
perf_lat() {
	local out=$1
	shift
	perf_run_ "$out" latency 64 median_us "$@"
}

# perf_bw OUT [VAR=VALUE...] [-- ARG...]: one 1 MiB streaming run; append
# its bandwidth (MB/s) to OUT.
perf_bw() {
	local out=$1
	shift
	perf_run_ "$out" bandwidth 1048576 mb_per_s "$@"
}
