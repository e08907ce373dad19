#!/usr/bin/env bash
# gpudirect bootstrap handshake latency for a real peer, alone and while
# 100 idle sockets hold handshakes open (issue 18's closing note). Runs the
# plugin's accept loop (gd_hs_serve(), plugins/gpudirect/gd_hs.c) on
# loopback TCP with stand-in callbacks, so no RDMA hardware is needed: it
# measures the handshake server, not queue-pair creation.
#
# usage: bench/gd-handshake.sh [BUILD_DIR] [RUNS]    (default: build, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-5}
t=$build/tests/gpudirect/test-gd-hs
[ -x "$t" ] || { echo "no $t: build first (meson compile -C $build)" >&2; exit 1; }
for _ in $(seq "$runs"); do
	"$t" 2>&1 | grep 'handshake latency' || { "$t"; exit 1; }
done
