# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# The best-of-REPS zap-perf runner and JSON reader that the bench scripts
# (unix, tls, shm, tcp-waiting, traffic) share. Sourced, not run, after the script
# has set $build (its build directory):
#
#   build=${1:-build}
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It also has perf_json (any zap-perf --loopback run), ucx_final (one
# ucx_perftest pair) and busy_cores (what else uses the cores).
#
# It reads the runner's settings from the environment, REPS (5) runs of
# each contender, ITERS (20000) 64 B round trips, BYTES (2G) at 1 MiB,
# CPUS ("0,1") for zap-perf --cpus, and sets $perf to the build's
# zap-perf. A script runs every contender once per rep, interleaved so
# that drift hits them all alike, each run appending its result to a file
# of its own with perf_lat or perf_bw; then it keeps the best of each
# file (the lowest latency, the highest bandwidth).

: "${build:?set build before sourcing bench/lib.sh}"
REPS=${REPS:-5}
ITERS=${ITERS:-20000}
BYTES=${BYTES:-2G}
CPUS=${CPUS:-0,1}
# The sockets: bench/shm.sh measures the same-host upgrade (it unsets this).
export ZAP_TRANSPORT_QUIET=1 ZAP_PLUGIN_PATH= ZAP_SHM=off
perf=$build/tools/zap-perf

# need_built FILE...: exit unless every FILE is an executable of the build.
need_built() {
	local x
	for x in "$@"; do
		[ -x "$x" ] || { echo "no $x: build first (meson compile -C $build)" >&2; exit 1; }
	done
}

# json_get FILE TEST SIZE FIELD: FIELD of zap-perf's --json result for
# TEST at SIZE.
json_get() {
	python3 - "$@" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["results"]:
    if r["test"] == sys.argv[2] and r["size"] == int(sys.argv[3]):
        print(r[sys.argv[4]])
        break
PY
}

# perf_json OUT [VAR=VALUE...] [-- ARG...]: one zap-perf --loopback run
# on CPUS with the variables VAR set and the arguments ARG; its JSON to OUT
# (read it with json_get once the run is over: a reader on a pipe takes
# CPU from the run).
perf_json() {
	local out=$1 vars=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	env "${vars[@]}" "$perf" --loopback --cpus "$CPUS" -t =default "$@" --json > "$out"
}

# perf_run_ OUT TEST SIZE FIELD [VAR=VALUE...] [-- ARG...]: one zap-perf
# --loopback run with the variables VAR set, ARG before TEST's own
# arguments; append FIELD of its result to OUT. A failed run appends
# nothing (the summary notices a file without results).
perf_run_() {
	local out=$1 test=$2 size=$3 field=$4 vars=() args
	shift 4
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	case $test in
	latency) args=(-s 64 -T lat -n "$ITERS") ;;
	bandwidth) args=(-s 1M -T bw -b "$BYTES") ;;
	esac
	perf_json "$out.json" "${vars[@]}" -- "$@" "${args[@]}" &&
		json_get "$out.json" "$test" "$size" "$field" >> "$out"
}

# ucx_final TLS TEST SIZE ITERS [ARG...]: one ucx_perftest TEST run with
# UCX_TLS=TLS, its server on the first of CPUS and its client on the
# second, on a port of its own; prints the client's "Final:" line
# (nothing when the run failed). Columns: $3 median latency (us, one-way
# for tag_lat), $7 bandwidth (MB/s of 2^20 bytes), $9 messages/s. Call it
# with its output redirected, not in $(...): the port count lives here.
ucx_port=$((20000 + RANDOM % 20000))
ucx_final() {
	local tls=$1 test=$2 size=$3 n=$4 srv
	shift 4
	ucx_port=$((ucx_port + 1))
	UCX_TLS=$tls timeout 300 taskset -c "${CPUS%,*}" ucx_perftest -p "$ucx_port" \
		> /dev/null 2>&1 &
	srv=$!
	sleep 0.5
	UCX_TLS=$tls timeout 300 taskset -c "${CPUS#*,}" ucx_perftest 127.0.0.1 \
		-p "$ucx_port" -t "$test" -s "$size" -n "$n" "$@" 2>&1 | awk '/^Final:/'
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
}

# busy_cores [SECS]: the processes that used more than a fifth of a core
# over SECS (1) seconds, one line each; exits 1 when one of them is a
# zap-perf or ucx_perftest that is still busy a few seconds later: a
# leftover of an earlier run, spinning, would skew every figure (one
# spinning ucx_perftest moved UCX's latency by 4x). One that ended
# meanwhile (a test's run, say) is only listed.
busy_cores() {
	python3 - "${1:-1}" <<'PY'
import os, sys, time
def sample():
    r = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        comm = st[st.index("(") + 1 : st.rindex(")")]
        f = st[st.rindex(")") + 2 :].split()
        r[p] = (comm, int(f[11]) + int(f[12]))
    return r
def busy(secs):
    a = sample()
    time.sleep(secs)
    b = sample()
    hz = os.sysconf("SC_CLK_TCK")
    return {p: (comm, (t - a[p][1]) / hz / secs) for p, (comm, t) in b.items()
            if p in a and p != str(os.getpid()) and (t - a[p][1]) / hz / secs > 0.2}
secs = float(sys.argv[1])
now = busy(secs)
for p, (comm, share) in sorted(now.items()):
    print(f"  busy: pid {p} {comm}: {share * 100:.0f}% of a core")
ours = {p for p, (comm, _) in now.items() if comm in ("zap-perf", "ucx_perftest")}
if ours:
    time.sleep(3)
    ours &= set(busy(secs))
    for p in sorted(ours):
        print(f"  pid {p} is still busy 3 s later: a leftover")
sys.exit(1 if ours else 0)
PY
}

# perf_lat OUT [VAR=VALUE...] [-- ARG...]: one 64 B latency run; append
# its median one-way latency (us, RTT/2) to OUT.
perf_lat() {
	local out=$1
	shift
	perf_run_ "$out" latency 64 median_us "$@"
}

# perf_bw OUT [VAR=VALUE...] [-- ARG...]: one 1 MiB streaming run; append
# its bandwidth (MB/s) to OUT.
perf_bw() {
	local out=$1
	shift
	perf_run_ "$out" bandwidth 1048576 mb_per_s "$@"
}
