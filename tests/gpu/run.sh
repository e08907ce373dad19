#!/usr/bin/env bash
# GPU check of the uma transport, for a host with an NVIDIA GPU and driver
# (under five minutes): build, probe uma (must be OK), receive >= 1 GiB from
# a default endpoint into managed memory, checksum it in place on the GPU,
# and compare kernel read bandwidth of received buffers with cuMemAlloc.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v meson >/dev/null || scripts/deps
[ -d build-gpu ] || meson setup build-gpu >/dev/null
meson compile -C build-gpu >/dev/null
export ZAP_PLUGIN_PATH=$PWD/build-gpu/plugins/uma
echo "== zap-info -v"
build-gpu/tools/zap-info -v --transport =uma || {
	echo "FAIL: the uma probe is not OK on this host" >&2
	exit 1
}
echo "== uma <-> default interop test"
build-gpu/tests/uma/test-uma-interop
echo "== 1 GiB into managed memory, GPU checksums, read bandwidth"
build-gpu/tests/gpu/uma-gpu-check
