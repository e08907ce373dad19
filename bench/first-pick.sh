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
# Out of process twice: with the probe cache (core/probe-cache.c) warm,
# as every scan after the first finds it for 60 s, and with it off
# (ZAP_PROBE_CACHE=off), as the first scan after a change does.
#
# usage: bench/first-pick.sh [BUILD_DIR]   (default: build)
# env:   REPS (41)   runs per row, interleaved; min, median and 90th
#                    percentile shown
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

row() { # label, file of samples: print "min median p90", keep the median
	local line
	line=$(stats <"$2")
	printf '%-36s%s\n' "$1" "$line"
	median=$(echo "$line" | awk '{ print $2 }')
}

pick() { # env assignments...: one first pick, in ms
	env "$@" "$build/bench/first_pick" | cut -d' ' -f1
}

info() { # env assignments...: one zap-info run, wall ms
	local s e
	s=$(date +%s%N)
	env "$@" "$build/tools/zap-info" >/dev/null
	e=$(date +%s%N)
	echo "scale=3; ($e - $s) / 1000000" | bc
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A cache of this run's own (mktemp -d makes it 0700), warmed once; an
# entry lives 60 s, so a long run shows a miss now and then, as a
# long-running host would.
cache=$(mktemp -d)
trap 'rm -rf "$tmp" "$cache"' EXIT
export ZAP_PROBE_CACHE=$cache
pick ZAP_PROBE_INPROCESS=0 >/dev/null
info ZAP_PROBE_INPROCESS=0 >/dev/null

# Interleaved: each round runs every row once, so that what else the host
# does weighs on out of process and in process alike (the ratio is the
# point; on a shared machine the absolute figures wander).
for _ in $(seq "$reps"); do
	pick ZAP_PROBE_INPROCESS=0 >>"$tmp/pick-out"
	pick ZAP_PROBE_INPROCESS=0 ZAP_PROBE_CACHE=off >>"$tmp/pick-cold"
	pick ZAP_PROBE_INPROCESS=1 >>"$tmp/pick-in"
	info ZAP_PROBE_INPROCESS=0 >>"$tmp/info-out"
	info ZAP_PROBE_INPROCESS=0 ZAP_PROBE_CACHE=off >>"$tmp/info-cold"
	info ZAP_PROBE_INPROCESS=1 >>"$tmp/info-in"
	pick ZAP_PLUGIN_PATH=/nonexistent >>"$tmp/pick-none"
done

echo "# plugins: ${path//:/ }"
echo "# $reps runs each, interleaved, ms:      min  median     p90"
row "first pick, out of process" "$tmp/pick-out"
pick_out=$median
row "  same, cache off" "$tmp/pick-cold"
pick_cold=$median
row "first pick, in process" "$tmp/pick-in"
pick_in=$median
row "zap-info (wall), out of process" "$tmp/info-out"
info_out=$median
row "  same, cache off" "$tmp/info-cold"
info_cold=$median
row "zap-info (wall), in process" "$tmp/info-in"
info_in=$median
row "first pick, no plugins" "$tmp/pick-none"
awk -v po="$pick_out" -v pi="$pick_in" -v io="$info_out" -v ii="$info_in" \
	-v pc="$pick_cold" -v ic="$info_cold" 'BEGIN {
	printf "# out of process / in process, medians: first pick %.2fx, zap-info %.2fx\n",
		po / pi, io / ii
	printf "#   with the cache off: first pick %.2fx, zap-info %.2fx\n", pc / pi, ic / ii }'
echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
