#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the first pick costs a program with every plugin of the build tree
# on ZAP_PLUGIN_PATH (uma, gpudirect, dpdk: every shipped plugin): the scan,
# every probe and opening the winner, measured inside the program around
# zap_pick() (bench/first_pick.c), in fresh processes; and the wall time of
# a whole `zap-info` run (process start included). Both with probes out of
# process (the default) and in process (ZAP_PROBE_INPROCESS=1), and the
# ratio of the medians (out of process / in process), which the README
# quotes: probing out of process should cost at most 1.25 times as much.
#
# usage: bench/first-pick.sh [BUILD_DIR]   (default: build)
# env:   REPS (41)   runs per row; min, median and 90th percentile shown
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
reps=${REPS:-41}
path=
for p in uma gpudirect dpdk; do
	[ -e "$build/plugins/$p/libzap-$p.so" ] && path=$path${path:+:}$build/plugins/$p
done
export ZAP_PLUGIN_PATH=$path ZAP_TRANSPORT_QUIET=1
export ZAP_PROBE_HELPER=$build/core/zap-probe
unset ZAP_TRANSPORT ZAP_PROBE_INPROCESS

stats() { # numbers on stdin -> "min median p90" (ms)
	sort -n | awk '{ v[NR] = $1 } END {
		printf "%7.2f %7.2f %7.2f\n", v[1], v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)] }'
}

row() { # label, then "min median p90" on stdin: print it, keep the median
	local line
	IFS= read -r line
	printf '%-36s%s\n' "$1" "$line"
	median=$(echo "$line" | awk '{ print $2 }')
}

pick_row() { # label, env assignments...
	local label=$1
	shift
	for _ in $(seq "$reps"); do
		env "$@" "$build/bench/first_pick" | cut -d' ' -f1
	done | stats >"$tmp"
	row "$label" <"$tmp"
}

info_row() {
	local label=$1
	shift
	for _ in $(seq "$reps"); do
		s=$(date +%s%N)
		env "$@" "$build/tools/zap-info" >/dev/null
		e=$(date +%s%N)
		echo "scale=3; ($e - $s) / 1000000" | bc
	done | stats >"$tmp"
	row "$label" <"$tmp"
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

echo "# plugins: ${path//:/ }"
echo "# $reps runs each, ms:                   min  median     p90"
pick_row "first pick, out of process" ZAP_PROBE_INPROCESS=0
pick_out=$median
pick_row "first pick, in process" ZAP_PROBE_INPROCESS=1
pick_in=$median
info_row "zap-info (wall), out of process" ZAP_PROBE_INPROCESS=0
info_out=$median
info_row "zap-info (wall), in process" ZAP_PROBE_INPROCESS=1
info_in=$median
pick_row "first pick, no plugins" ZAP_PLUGIN_PATH=/nonexistent
awk -v po="$pick_out" -v pi="$pick_in" -v io="$info_out" -v ii="$info_in" 'BEGIN {
	printf "# out of process / in process, medians: first pick %.2fx, zap-info %.2fx\n",
		po / pi, io / ii }'
echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
