#!/usr/bin/env bash
# GPU checks of uma and the CUDA loader, in one run on a bare, offline GPU
# machine (tests/gpu/README.md): build offline (or take a build brought
# along), then the uma probe, uma/default interop, >= 1 GiB received into
# managed memory and checksummed there by a GPU kernel, kernel read
# bandwidth against cuMemAlloc, and the pool under device memory pressure.
# Writes OUTDIR/report.txt (and OUTDIR/logs/); exits 1 if any step failed.
#
# --dry-run, for machines without a GPU: the same build and programs on a
# simulated bare machine (no network, no pkg-config files, apt/curl/pip/git
# shims that record any call), expecting every program to stop at its
# first CUDA call with "libcuda.so.1 not found"; then the same steps again
# against tests/gpu/mock-cuda, a CPU stand-in for libcuda.so.1, which
# checks the programs' own logic (not CUDA).
#
# usage: tests/gpu/device-check.sh [--dry-run] [--prebuilt BUILDDIR] OUTDIR
set -uo pipefail

usage() {
	echo "usage: $0 [--dry-run] [--prebuilt BUILDDIR] OUTDIR" >&2
	exit 2
}

DRY=0 PREBUILT= OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) DRY=1 ;;
	--prebuilt) [ $# -ge 2 ] || usage; PREBUILT=$2; shift ;;
	--in-netns) IN_NETNS=1 ;; # internal: re-executed under unshare -n
	-h | --help) usage ;;
	-*) usage ;;
	*) [ -z "$OUT" ] || usage; OUT=$1 ;;
	esac
	shift
done
[ -n "$OUT" ] || usage

SRC=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
if [ -z "${IN_NETNS:-}" ]; then
	rm -rf "$OUT/logs" "$OUT/report.txt" "$OUT/kernels.ptx" # ours, from an earlier run
	mkdir -p "$OUT/logs" || exit 2
fi

# The dry run has no network but loopback: a fresh network namespace.
if [ "$DRY" = 1 ] && [ -z "${IN_NETNS:-}" ] && [ -z "${ZAP_GPU_NO_UNSHARE:-}" ] &&
	unshare -n true 2>/dev/null; then
	args=(--dry-run --in-netns)
	[ -n "$PREBUILT" ] && args+=(--prebuilt "$PREBUILT")
	exec unshare -n "$0" "${args[@]}" "$OUT"
fi

START=$(date +%s)
BUDGET=${ZAP_GPU_BUDGET_S:-480} # all steps together; the run tool allows 600
REPORT=$OUT/report.txt
FAILS=0 PASSES=0 SKIPS=0
: >"$REPORT"

say() { printf '%s\n' "$*" | tee -a "$REPORT"; }
elapsed() { echo $(($(date +%s) - START)); }

# record RESULT NAME DETAIL: one report line per step.
record() {
	case $1 in
	PASS) PASSES=$((PASSES + 1)) ;;
	FAIL) FAILS=$((FAILS + 1)) ;;
	*) SKIPS=$((SKIPS + 1)) ;;
	esac
	say "$(printf '%-4s %-18s %s' "$1" "$2" "$3")"
}

# run NAME MAXSECONDS CMD...: run with a time limit cut to what is left of
# the budget; log in logs/NAME.log; sets RC and LAST (the last PASS/FAIL/
# SKIP line the program printed, else its last line).
run() {
	local name=$1 max=$2 left
	shift 2
	left=$((BUDGET - $(elapsed)))
	[ "$left" -lt "$max" ] && max=$left
	if [ "$max" -le 5 ]; then
		RC=124 LAST="not run: the ${BUDGET} s budget is spent"
		return
	fi
	timeout -k 5 "$max" "$@" >"$OUT/logs/$name.log" 2>&1
	RC=$?
	LAST=$(grep -E '^(PASS|FAIL|SKIP): ' "$OUT/logs/$name.log" | tail -n 1)
	[ -n "$LAST" ] || LAST=$(grep -v '^zap: INFO' "$OUT/logs/$name.log" | tail -n 1)
	LAST=${LAST#PASS: } LAST=${LAST#FAIL: } LAST=${LAST#SKIP: }
	case $RC in
	124 | 137) LAST="timed out after ${max} s; last output: $LAST" ;;
	esac
}

if [ "$DRY" = 1 ]; then
	MODE="dry run (no GPU expected)"
	BUILD=${ZAP_GPU_BUILD:-$SRC/build-gpu-dry}
else
	MODE="GPU run"
	BUILD=${ZAP_GPU_BUILD:-$SRC/build-gpu}
fi
[ -n "$PREBUILT" ] && BUILD=$(cd "$PREBUILT" 2>/dev/null && pwd || echo "$PREBUILT")

say "libzap GPU check: $MODE"
say "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host:    $(uname -n), $(uname -sr), $(nproc) CPUs"
REV=$(git -C "$SRC" describe --always --dirty 2>/dev/null || echo 'no git metadata (a copy of the tree)')
say "source:  $REV"
if command -v nvidia-smi >/dev/null; then
	say "gpu:     $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 4 | paste -sd ';')"
else
	say "gpu:     no nvidia-smi"
fi
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
say "nvcc:    ${NVCC:+$("$NVCC" --version 2>/dev/null | tail -n 1)}${NVCC:-none}"
say "tools:   meson $(meson --version 2>/dev/null || echo none), ninja $(ninja --version 2>/dev/null || echo none), $(cc --version 2>/dev/null | head -n 1 || echo 'no cc')"

# ---- the simulated bare machine (dry run only) -----------------------------
SHIMS=$OUT/logs/shims
if [ "$DRY" = 1 ]; then
	if [ -n "${IN_NETNS:-}" ]; then
		ip link set lo up 2>/dev/null || true
		NET="a new network namespace (unshare -n): loopback only"
	else
		NET="NOT isolated (unshare -n unavailable); the script calls no network tool"
	fi
	# Any call of these fails and is recorded: none may happen offline.
	mkdir -p "$SHIMS"
	for t in apt apt-get dpkg curl wget pip pip3 git; do
		printf '#!/bin/sh\necho "%s $*" >>"%s/called"\nexit 1\n' "$t" "$SHIMS" >"$SHIMS/$t"
		chmod +x "$SHIMS/$t"
	done
	# Meson's CMake lookup would find cmocka's CMake package here; a bare
	# machine has none. Not recorded: meson may run cmake for any lookup.
	printf '#!/bin/sh\nexit 1\n' >"$SHIMS/cmake"
	chmod +x "$SHIMS/cmake"
	PATH=$SHIMS:$PATH
	# Nothing any dependency() could find, and no driver library.
	mkdir -p "$OUT/logs/empty-pkgconfig"
	export PKG_CONFIG_LIBDIR=$OUT/logs/empty-pkgconfig PKG_CONFIG_PATH= CMAKE_PREFIX_PATH=
	unset LD_LIBRARY_PATH LD_PRELOAD
	say "network: $NET"
	say "bare:    pkg-config and cmake find nothing; apt, dpkg, curl, wget, pip, git are shims that record calls"
fi
say ""

# ---- the simulation holds: Meson here finds none of what a GPU machine lacks -
if [ "$DRY" = 1 ]; then
	found=
	for want in "cmocka:-Dtests=true -Ddpdk=disabled -Dgpudirect=disabled" \
		"libdpdk:-Dtests=false -Ddpdk=enabled -Dgpudirect=disabled" \
		"libibverbs:-Dtests=false -Ddpdk=disabled -Dgpudirect=enabled"; do
		dep=${want%%:*}
		rm -rf "$OUT/logs/bare-$dep"
		(cd "$SRC" && meson setup "$OUT/logs/bare-$dep" ${want#*:} --wrap-mode=nodownload) \
			>"$OUT/logs/bare-$dep.log" 2>&1
		grep -q "Dependency \"$dep\" not found" "$OUT/logs/bare-$dep.log" || found="$found $dep"
		rm -rf "$OUT/logs/bare-$dep"
	done
	if [ -z "$found" ]; then
		record PASS bare-machine "Meson cannot find cmocka, libdpdk or libibverbs here (a setup that needs each fails)"
	else
		record FAIL bare-machine "the simulation leaks: Meson still finds$found (logs/bare-*.log)"
	fi
fi

# ---- build ------------------------------------------------------------------
TARGETS="zap zap-probe zap-uma zap-info test-uma-interop uma-gpu-check"
[ "$DRY" = 1 ] && TARGETS="$TARGETS cuda" # the mock libcuda.so.1
OPTS="-Dtests=false -Dgpu_checks=true -Duma=enabled -Ddpdk=disabled -Dgpudirect=disabled -Dbuildtype=debugoptimized --wrap-mode=nodownload"
NEED="core/libzap.so.0 core/zap-probe plugins/uma/libzap-uma.so tools/zap-info tests/uma/test-uma-interop tests/gpu/uma-gpu-check"

build() {
	set -e
	cd "$SRC"
	if [ -f "$BUILD/build.ninja" ]; then
		meson setup --reconfigure "$BUILD" $OPTS
	else
		meson setup "$BUILD" $OPTS
	fi
	meson compile -C "$BUILD" $TARGETS
	{
		echo "built by tests/gpu/device-check.sh on $(uname -n), $(date -u '+%F %T UTC')"
		echo "options: $OPTS"
		echo "source: $REV"
	} >"$BUILD/zap-gpu-build.txt"
}

t0=$(date +%s)
if [ -n "$PREBUILT" ]; then
	missing=
	for f in $NEED; do [ -e "$BUILD/$f" ] || missing="$missing $f"; done
	if [ -n "$missing" ]; then
		record FAIL build "prebuilt $BUILD lacks:$missing"
	else
		record PASS build "prebuilt, brought along: $BUILD ($(head -n 1 "$BUILD/zap-gpu-build.txt" 2>/dev/null || echo 'no zap-gpu-build.txt'))"
	fi
else
	run build 300 bash -c "$(declare -f build); SRC='$SRC' BUILD='$BUILD' OPTS='$OPTS' TARGETS='$TARGETS' REV='$REV'; build"
	if [ "$RC" = 0 ]; then
		record PASS build "from source, offline, in $BUILD ($(($(date +%s) - t0)) s): $TARGETS"
	else
		record FAIL build "meson setup/compile failed (logs/build.log): $LAST"
	fi
fi

# What the configuration looked up, and what the programs need at run time.
if [ -f "$BUILD/build.ninja" ] || [ -n "$PREBUILT" ]; then
	needed=
	for f in $NEED; do
		[ -e "$BUILD/$f" ] && needed="$needed $(readelf -d "$BUILD/$f" 2>/dev/null | grep -o 'NEEDED.*\[.*\]' | grep -o '\[.*\]' | tr -d '[]')"
	done
	bad=$(tr ' ' '\n' <<<"$needed" | grep -iE 'cmocka|dpdk|rte_|ibverbs|libcuda|cudart' | sort -u | paste -sd ' ')
	libs=$(tr ' ' '\n' <<<"$needed" | grep . | sort -u | paste -sd ' ')
	asked=$(grep -iE 'Dependency (cmocka|libdpdk|libibverbs)' "$BUILD/meson-logs/meson-log.txt" 2>/dev/null | sort -u | paste -sd ';')
	# The configuration must not even look for cmocka (the suites are off).
	grep -qi cmocka "$BUILD/meson-logs/meson-log.txt" 2>/dev/null && bad="$bad cmocka (looked up by meson)"
	if ! command -v readelf >/dev/null; then
		record SKIP offline-deps "no readelf to list what the programs need"
	elif [ -z "$bad" ]; then
		record PASS offline-deps "the programs need only: $libs; cmocka not looked up; meson: ${asked:-no other lookups}"
	else
		record FAIL offline-deps "the programs need $bad"
	fi
fi

if [ "$FAILS" != 0 ]; then
	say ""
	say "summary: the build failed; nothing else ran ($(elapsed) s). logs: $OUT/logs"
	exit 1
fi

CHECK=$BUILD/tests/gpu/uma-gpu-check
# This build's uma plugin, copied into a private directory (the loader
# refuses a build tree under a group-writable parent), and no built-in
# directory (ZAP_PLUGIN_DIR empty): never a plugin installed on the host.
PLUGINS=$(mktemp -d "${TMPDIR:-/tmp}/zap-gpu-plugins-XXXXXX") || exit 2
trap 'rm -rf "$PLUGINS"' EXIT
cp "$BUILD/plugins/uma/libzap-uma.so" "$PLUGINS/" && chmod 0755 "$PLUGINS/libzap-uma.so" || exit 2
export ZAP_PLUGIN_PATH=$PLUGINS ZAP_PLUGIN_DIR= ZAP_TRANSPORT_QUIET=1
# Plugins are probed in a helper process: this build's, not an installed
# one, copied beside the plugin (libzap checks its directory as a plugin's).
cp "$BUILD/core/zap-probe" "$PLUGINS/" && chmod 0755 "$PLUGINS/zap-probe" || exit 2
export ZAP_PROBE_HELPER=$PLUGINS/zap-probe
# A cold driver (no persistence daemon) may take seconds to initialise.
export ZAP_PROBE_TIMEOUT_MS=${ZAP_PROBE_TIMEOUT_MS:-60000}
# ZAP_CUDA_DEVICE (an ordinal) picks the GPU, as for the uma plugin.

# ---- checks that need no GPU ------------------------------------------------
PTXAS=$(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>/dev/null)
ARCH=sm_75
if [ "$DRY" = 0 ] && command -v nvidia-smi >/dev/null; then
	cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
	[ -n "$cc" ] && ARCH=sm_$cc
fi
if [ -z "$PTXAS" ]; then
	record SKIP ptx "no ptxas (the driver JIT-compiles the PTX in the GPU steps)"
else
	"$CHECK" ptx >"$OUT/kernels.ptx"
	run ptx 60 "$PTXAS" -arch="$ARCH" -o /dev/null "$OUT/kernels.ptx"
	if [ "$RC" = 0 ]; then
		record PASS ptx "ptxas -arch=$ARCH assembles the kernels (kernels.ptx)"
	else
		record FAIL ptx "ptxas -arch=$ARCH: $LAST"
	fi
fi

# Every driver entry point the checks use, without calling one.
if [ "$DRY" = 1 ]; then
	LIB=$(ls /usr/local/cuda/lib64/stubs/libcuda.so 2>/dev/null)
else
	LIB=libcuda.so.1
fi
if [ -z "$LIB" ]; then
	record SKIP symbols "no CUDA stub library to resolve against"
else
	run symbols 30 "$CHECK" symbols "$LIB"
	case $RC in
	0) record PASS symbols "$LAST" ;;
	77) if [ "$DRY" = 1 ]; then record SKIP symbols "$LAST"; else record FAIL symbols "no driver: $LAST"; fi ;;
	*) record FAIL symbols "$LAST" ;;
	esac
fi

# ---- the uma probe and the GPU steps ---------------------------------------
# gpu_steps EXPECT: EXPECT "gpu": each must pass; "absent": each must stop
# at its first CUDA call saying libcuda.so.1 is missing; "mock": each must
# pass on the mock (steps prefixed "mock-").
gpu_steps() {
	local expect=$1 p=
	[ "$expect" = mock ] && p=mock-

	run ${p}probe 30 "$BUILD/tools/zap-info" -v --transport =uma
	local row
	row=$(grep -A1 -E '^  uma ' "$OUT/logs/${p}probe.log" | tr -s ' \n' ' ')
	case $expect in
	gpu)
		if [ "$RC" = 0 ] && grep -q 'CUDA device' <<<"$row" && ! grep -qi mock <<<"$row"; then
			record PASS probe "$(grep -o 'CUDA device.*' <<<"$row" | sed 's/ *$//')"
		else
			record FAIL probe "uma is not OK: ${row:-no uma row} (logs/probe.log)"
		fi ;;
	absent)
		if [ "$RC" != 0 ] && grep -q 'not present' <<<"$row" && grep -q 'libcuda.so.1' <<<"$row"; then
			record PASS probe "as expected without a GPU: not present, $(grep -o 'driver library libcuda.so.1 not found' <<<"$row")"
		else
			record FAIL probe "expected NOT_PRESENT naming libcuda.so.1: ${row:-no uma row}"
		fi ;;
	mock)
		if [ "$RC" = 0 ] && grep -q 'mock GPU' <<<"$row"; then
			record PASS mock-probe "uma OK on the mock: $(grep -o 'CUDA device.*' <<<"$row" | sed 's/ *$//')"
		else
			record FAIL mock-probe "uma is not OK on the mock: ${row:-no uma row}"
		fi ;;
	esac

	local step max
	for step in interop csum bandwidth pressure; do
		case $step in
		interop) run ${p}$step 60 "$BUILD/tests/uma/test-uma-interop" ;;
		csum) run ${p}$step 240 "$CHECK" csum ;;
		bandwidth) run ${p}$step 120 "$CHECK" bandwidth ;;
		pressure) run ${p}$step 180 "$CHECK" pressure ;;
		esac
		case $expect:$RC in
		gpu:0 | mock:0)
			[ "$step" = interop ] && LAST="$LAST; $(grep -o 'uma pool:.*' "$OUT/logs/${p}$step.log")"
			record PASS ${p}$step "$LAST" ;;
		absent:77)
			if grep -q 'libcuda.so.1' <<<"$LAST"; then
				record PASS $step "stopped at the first CUDA call, as expected: $(grep -o 'driver library.*found' <<<"$LAST")"
			else
				record FAIL $step "skipped, but not for a missing libcuda.so.1: $LAST"
			fi ;;
		gpu:77) record FAIL $step "skipped on a GPU machine: $LAST" ;;
		*) record FAIL ${p}$step "$LAST (logs/${p}$step.log)" ;;
		esac
	done
}

if [ "$DRY" = 1 ]; then
	if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
		say "note: this machine has a libcuda.so.1; the absent-driver expectations below will fail"
	fi
	gpu_steps absent
	say ""
	say "-- again on tests/gpu/mock-cuda, a CPU stand-in for libcuda.so.1 (checks the programs, not CUDA):"
	export LD_LIBRARY_PATH=$BUILD/tests/gpu/mock-cuda
	gpu_steps mock
	unset LD_LIBRARY_PATH
	if [ -s "$SHIMS/called" ]; then
		record FAIL no-network "offline build called: $(paste -sd ';' "$SHIMS/called")"
	else
		record PASS no-network "no apt, dpkg, curl, wget, pip or git was called"
	fi
else
	gpu_steps gpu
fi

say ""
say "summary: $PASSES passed, $FAILS failed, $SKIPS skipped, in $(elapsed) s; logs in $OUT/logs"
[ "$FAILS" = 0 ]
