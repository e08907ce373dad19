#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Build and test the Go binding against a Meson build of libzap:
# go vet, go test, go test -race (and the tests once more with
# GODEBUG=cgocheck=2, which checks every pointer cgo passes).
# Offline by construction: no third-party modules, GOPROXY=off.
#
# usage: bindings/go/test.sh [BUILD_DIR]   (default: build)
# env:   GO_TEST_ARGS   extra arguments for go test (e.g. -run Interop)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)

command -v go >/dev/null || { echo "test.sh: go not found (apt-get install golang-go)" >&2; exit 1; }
command -v pkg-config >/dev/null || { echo "test.sh: pkg-config not found (cgo reads the flags of zap.pc)" >&2; exit 1; }
[ -e "$build/core/libzap.so" ] || { echo "test.sh: no $build/core/libzap.so: build first" >&2; exit 1; }
[ -x "$build/bindings/go/zap-go-peer" ] || { echo "test.sh: no $build/bindings/go/zap-go-peer: build first (with -Dtests=true)" >&2; exit 1; }

# The build tree's plugins (as `meson devenv` names them) plus
# bindings/go for the gopool test plugin, copied into a private directory
# that tests/common/private-plugins.sh makes, sets as ZAP_PLUGIN_PATH and
# removes afterwards: the loader refuses the build tree's own directories
# under a group-writable parent. It also sets ZAP_PLUGIN_DIR empty, so
# plugins installed on this host are never scanned.
if [ -z "${ZAP_GO_TEST_PRIVATE:-}" ]; then
	# The build tree's out-of-process probe helper (not the installed
	# one), which private-plugins.sh copies beside the plugins.
	export ZAP_PROBE_HELPER="$build/core/zap-probe"
	set --
	for d in uma gpudirect dpdk; do
		[ -d "$build/plugins/$d" ] && set -- "$@" "$build/plugins/$d"
	done
	ZAP_GO_TEST_PRIVATE=1 exec "$src/tests/common/private-plugins.sh" "$@" \
		"$build/bindings/go" -- "$here/test.sh" "$build"
fi

. "$here/build-env.sh"
export ZAP_GO_PEER="$build/bindings/go/zap-go-peer"
export ZAP_LISTEN=127.0.0.1:0

cd "$here"
set -x
go vet ./...
# -v: every test's PASS or SKIP, and the reason of each skip, in the log.
go test -count=1 -v ${GO_TEST_ARGS:-} ./...
go test -count=1 -race ${GO_TEST_ARGS:-} ./...
GODEBUG=cgocheck=2 go test -count=1 ${GO_TEST_ARGS:-} ./transport
# The example program builds and runs against this build's plugins.
go build -o "$build/go/zap-info-go" ./cmd/zap-info-go
"$build/go/zap-info-go"
