#!/usr/bin/env bash
# A real dpdk peer's round trips and the receiver's free mbufs, without and
# with SOURCES (default 256) forged sources flooding the receiver (issue
# 18's closing note). Runs tests/dpdk/spoof.sh (root: network namespaces,
# a veth pair, net_af_packet on each side, dp-spoof beside the pinger).
#
# usage: bench/dpdk-spoof.sh [BUILD_DIR]    (default: build)
# env:   SOURCES (256), MSGS (round trips, 5000), DP_PEER_SIZE (64),
#        SPOOF_RATE (forged frames/s, 50000)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
for f in tests/dpdk/dp-peer tests/dpdk/dp-spoof plugins/dpdk/libzap-dpdk.so; do
	[ -e "$build/$f" ] || { echo "no $build/$f: build first (meson compile -C $build)" >&2; exit 1; }
done
export ZAP_PLUGIN_PATH=$PWD/$build/plugins/dpdk ZAP_LOG_LEVEL=warn
export DP_PEER_SIZE=${DP_PEER_SIZE:-64}
for n in 0 "${SOURCES:-256}"; do
	echo "== $n forged sources, $DP_PEER_SIZE-byte messages"
	tests/dpdk/spoof.sh "$build/tests/dpdk/dp-peer" "$build/tests/dpdk/dp-spoof" "$n" \
		"${MSGS:-5000}" | grep -E 'round trip|dp-spoof:|receiver under|FAIL'
done
