# SPDX-License-Identifier: MIT
# shellcheck shell=sh
#
# What building this Go module against a Meson build of libzap needs.
# Sourced, not run, by bindings/go/test.sh, bench/go-vs-c.sh and
# bench/go-net.sh, once they have set $src (the source tree) and $build
# (the build directory, absolute).

: "${src:?set src before sourcing build-env.sh}" "${build:?set build before sourcing build-env.sh}"
export CGO_ENABLED=1
# The package takes its flags from `pkg-config zap` (#cgo pkg-config):
# the build tree's zap-uninstalled.pc, which pkg-config prefers to an
# installed zap.pc. CGO_CFLAGS and CGO_LDFLAGS come before pkg-config's
# flags on cgo's command lines, so the tree's header and library win even
# where libzap-dev is installed.
export PKG_CONFIG_PATH="$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CGO_CFLAGS="-I$src/include"
export CGO_LDFLAGS="-L$build/core"
export LD_LIBRARY_PATH="$build/core${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Caches under the build dir, so root in CI and users share nothing;
# offline, and no VCS stamping (a worktree or tarball has no usable VCS).
export GOPATH="$build/go/path" GOCACHE="$build/go/cache"
export GOPROXY=off GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
