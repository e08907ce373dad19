#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Instructions per small message over shared memory, counted by valgrind's
# callgrind: what one zap_send() costs its sender in user space, and what
# the receiving side spends per message in zap_recv() and
# zap_msg_release(). Unlike time (bench/traffic.sh), the count does not
# depend on which cores the VM's CPUs sit on: on this machine the same
# 64 B stream runs at 0.4x or at 1.4x UCX's rate depending on that, so a
# change to the small-message path is judged here first, then timed.
#
#   bench/instructions.sh [BUILD (build)]
#
# env: BASE (a second build directory, counted in the same run, and the
#      ratio new/base printed), SIZES (64,1024), MSGS (100000 per size),
#      REPS (3: the least of each count is printed).
#
# The receiver's count includes its rounds of looking at the ring and
# waiting (ZAP_TCP_SPIN_US=0: it sleeps instead of spinning, as valgrind
# runs one thread at a time), and how many messages a round finds depends
# on how valgrind schedules the two sides: it moves by up to a tenth
# between runs, which the least of REPS runs mostly takes out.
set -euo pipefail
build=${1:-build}
SIZES=${SIZES:-64,1024}
MSGS=${MSGS:-100000}
REPS=${REPS:-3}
command -v valgrind > /dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
builds=("$build")
[ -n "${BASE:-}" ] && builds+=("$BASE")
for b in "${builds[@]}"; do
	[ -x "$b/tools/zap-perf" ] || { echo "no $b/tools/zap-perf: build first" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# incl FILE... FUNCTION: the inclusive instructions of libzap's FUNCTION
# (core/transport.c) summed over the callgrind outputs FILE.
incl() {
	local fn=${*: -1} sum=0 f v
	for f in "${@:1:$#-1}"; do
		v=$(callgrind_annotate --inclusive=yes "$f" 2> /dev/null |
			awk -v fn="core/transport.c:$fn [" 'index($0, fn) { gsub(",", "", $1); print $1; exit }')
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}

echo "== instructions per message, shared memory, zap-perf --loopback -T bw, $MSGS messages a size, least of $REPS (callgrind)"
printf '  %-6s %6s %12s %12s\n' build size "send/msg" "recv/msg"
declare -A res
for s in ${SIZES//,/ }; do
	for b in "${builds[@]}"; do
		tag=new
		[ "$b" != "$build" ] && tag=base
		res[$tag.$s.send]=0
		res[$tag.$s.recv]=0
		for rep in $(seq "$REPS"); do
			out=$tmp/$tag.$s.$rep
			mkdir -p "$out"
			ZAP_TRANSPORT_QUIET=1 ZAP_PLUGIN_PATH= ZAP_SHM=user ZAP_TCP_SPIN_US=0 \
				valgrind --tool=callgrind --fair-sched=yes \
				--callgrind-out-file="$out/cg.%p" "$b/tools/zap-perf" --loopback \
				-s "$s" -T bw -b $((s * MSGS)) --warmup 100 > "$out/log" 2>&1 ||
				{ cat "$out/log" >&2; exit 1; }
			send=$(($(incl "$out"/cg.* zap_send) / MSGS))
			recv=$((($(incl "$out"/cg.* zap_recv) + $(incl "$out"/cg.* zap_msg_release)) / MSGS))
			if [ "${res[$tag.$s.send]}" = 0 ] || [ "$send" -lt "${res[$tag.$s.send]}" ]; then
				res[$tag.$s.send]=$send
			fi
			if [ "${res[$tag.$s.recv]}" = 0 ] || [ "$recv" -lt "${res[$tag.$s.recv]}" ]; then
				res[$tag.$s.recv]=$recv
			fi
		done
		printf '  %-6s %6s %12s %12s\n' "$tag" "$s" "${res[$tag.$s.send]}" "${res[$tag.$s.recv]}"
	done
	if [ -n "${BASE:-}" ]; then
		python3 - "${res[new.$s.send]}" "${res[base.$s.send]}" "${res[new.$s.recv]}" \
			"${res[base.$s.recv]}" "$s" <<'PY'
import sys
ns, bs, nr, br, size = sys.argv[1:]
print(f"  new/base {size:>6} {int(ns) / int(bs):12.2f} {int(nr) / int(br):12.2f}")
PY
	fi
done
