#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (ASan + UBSan) and run each one
# for a bounded time, starting from its seed corpus and regression inputs.
# Prints the executions per harness; exits non-zero on any crash, leak,
# timeout or sanitizer report (the input is saved under $FUZZ_OUT).
#
#   fuzz/run.sh                 every harness, FUZZ_SECONDS (8) each
#   fuzz/run.sh pref env        only these
#   FUZZ_SECONDS=600 fuzz/run.sh validate     a long run
#
# Each harness needs its seed corpus, fuzz/corpus/<harness>/, holding at
# least one input: a missing or empty one fails the run (as it fails the
# replay test). fuzz/regressions/<harness>/ is optional.
#
# A crash found: copy the saved input to fuzz/regressions/<harness>/, fix
# the code, and `meson test --suite fuzz` replays it in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
builddir=${FUZZ_BUILDDIR:-build-fuzz}
secs=${FUZZ_SECONDS:-8}
out=${FUZZ_OUT:-$builddir/fuzz-out}

command -v clang >/dev/null || { echo "fuzz/run.sh: clang is required" >&2; exit 2; }
if [ ! -f "$builddir/build.ninja" ]; then
	CC=clang meson setup "$builddir" -Dfuzzing=true -Dlock_checks=true -Dtests=false \
		-Duma=disabled -Dgpudirect=disabled -Ddpdk=disabled >/dev/null
else
	meson setup --reconfigure "$builddir" -Dfuzzing=true >/dev/null
fi

all=$(ls fuzz/corpus)
names=${*:-$all}
for n in $names; do
	if [ -z "$(ls -A "fuzz/corpus/$n" 2>/dev/null)" ]; then
		echo "fuzz/run.sh: fuzz/corpus/$n is missing or empty" >&2
		exit 2
	fi
done
targets=()
for n in $names; do targets+=("fuzz/fuzz-$n"); done
if ! meson compile -C "$builddir" "${targets[@]}" >"$builddir/fuzz-build.log" 2>&1; then
	cat "$builddir/fuzz-build.log" >&2
	exit 2
fi

mkdir -p "$out"
fail=0
printf '%-10s %12s %8s  %s\n' harness executions exec/s result
for n in $names; do
	work=$out/corpus-$n
	mkdir -p "$work" "$out/crash-$n"
	log=$out/$n.log
	dirs=("$work" "$src/fuzz/corpus/$n")
	[ -d "$src/fuzz/regressions/$n" ] && dirs+=("$src/fuzz/regressions/$n")
	rc=0
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"$builddir/fuzz/fuzz-$n" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
		-artifact_prefix="$out/crash-$n/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	if [ "$rc" -ne 0 ]; then
		fail=1
		printf '%-10s %12s %8s  %s\n' "$n" "${execs:-?}" "${rate:-?}" \
			"FAILED (rc $rc): $(ls "$out/crash-$n" | head -1)"
		grep -m5 -E 'ERROR|invariant failed|runtime error' "$log" >&2 || true
	else
		printf '%-10s %12s %8s  %s\n' "$n" "${execs:-?}" "${rate:-?}" ok
	fi
done
exit $fail
