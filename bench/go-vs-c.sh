#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the Go binding (bindings/go, package transport) adds per call: 64 B
# round trips against one zap-perf server (C, default transport,
# loopback), interleaved in one run, from
#   - zap-perf's own client (C, its own process), and
#   - the Go benchmark BenchmarkRoundTrip64 (Send + Recv of the echo):
#     "c", the same loop in C straight on libzap inside the Go test
#     process (the tight baseline), "background" through the binding with
#     a context that cannot be cancelled, "cancellable" with a
#     context.WithCancel (which also pays for a watcher goroutine per call).
# Prints the mean round trip of each (best run), the binding's added cost
# per round trip (background minus c; goal: under 1 us), the ratio to
# both C figures, and the Go side's allocations per round trip.
#
# A second table, BenchmarkPipeline64, is the calls without the waits: per
# op one 64 B Send on one endpoint and one Recv on another, in batches of
# 64 so that nothing waits, in C straight on libzap and through the
# binding, in the same process. Its difference is what the binding adds
# to the calls of one round trip, free of the scheduler's noise.
#
# Blocking round trips on a virtual machine are dominated by the wake-up
# latency of the kernel (tens of us, varying from run to run by more than
# the binding costs); SPIN_US sets ZAP_TCP_SPIN_US for server and clients
# so that waits spin instead (a core each), which shows the binding's cost.
#
# usage: bench/go-vs-c.sh [BUILD_DIR]    (default: build)
# env:   REPS (5)        runs of each; the best counts (this host is noisy)
#        ITERS (20000)   round trips per run
#        CPUS ("0,1")    server core, client core
#        SPIN_US (0)     ZAP_TCP_SPIN_US for everyone; 0: block in the kernel
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=$(cd "${1:-build}" && pwd) || exit 1
REPS=${REPS:-5}
ITERS=${ITERS:-20000}
CPUS=${CPUS:-0,1}
export ZAP_TCP_SPIN_US=${SPIN_US:-0}
cs=${CPUS%,*}
cc=${CPUS#*,}
if [ "$(nproc)" -lt 2 ]; then
	echo "note: one CPU only; server and client share it" >&2
	cs=0 cc=0
fi

perf=$build/tools/zap-perf
[ -x "$perf" ] || { echo "no $perf: build first (meson compile -C $build)" >&2; exit 1; }
command -v go >/dev/null || { echo "go not found (apt-get install golang-go)" >&2; exit 1; }

# Build the Go test binary as bindings/go/test.sh does (offline).
. "$src/bindings/go/build-env.sh"
export ZAP_TRANSPORT_QUIET=1 ZAP_LISTEN=127.0.0.1:0
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
(cd "$src/bindings/go" && go test -c -o "$tmp/transport.test" ./transport) || exit 1

port=$((20000 + RANDOM % 20000))
taskset -c "$cs" "$perf" -t default --listen "127.0.0.1:$port" server >/dev/null &
srv=$!
sleep 0.5

json_get() { # FILE FIELD: the 64 B latency row's FIELD
	python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["test"] == "latency" and r["size"] == 64:
        print(r[sys.argv[2]])' "$1" "$2"
}
echo "running: $REPS runs each, $ITERS x 64 B round trips, server core $cs, clients core $cc, ZAP_TCP_SPIN_US=$ZAP_TCP_SPIN_US" >&2
: > "$tmp/c"; : > "$tmp/goc"; : > "$tmp/go"; : > "$tmp/gocancel"
: > "$tmp/pipec"; : > "$tmp/pipego"
for rep in $(seq "$REPS"); do
	if taskset -c "$cc" "$perf" -t default -s 64 -T lat -n "$ITERS" --json \
		client "127.0.0.1:$port" > "$tmp/c.json"; then
		# zap-perf reports one-way latency (RTT/2) in us; a round trip in ns:
		python3 -c 'import sys; print(float(sys.argv[1]) * 2000)' \
			"$(json_get "$tmp/c.json" avg_us)" >> "$tmp/c"
	fi
	ZAP_BENCH_SERVER="127.0.0.1:$port" taskset -c "$cc" "$tmp/transport.test" \
		-test.run '^$' -test.bench 'RoundTrip64|Pipeline64' -test.benchtime "${ITERS}x" \
		-test.benchmem > "$tmp/go.txt" 2>&1 || { cat "$tmp/go.txt" >&2; exit 1; }
	# BenchmarkRoundTrip64/background  20000  31000 ns/op  64 B/op  1 allocs/op
	awk '/RoundTrip64\/c[ -]/ {print $3, 0}' "$tmp/go.txt" >> "$tmp/goc"
	awk '/\/background/ {print $3, $7}' "$tmp/go.txt" >> "$tmp/go"
	awk '/\/cancellable/ {print $3, $7}' "$tmp/go.txt" >> "$tmp/gocancel"
	awk '/Pipeline64\/c[ -]/ {print $3, 0}' "$tmp/go.txt" >> "$tmp/pipec"
	awk '/Pipeline64\/go/ {print $3, $7}' "$tmp/go.txt" >> "$tmp/pipego"
done

python3 - "$tmp/c" "$tmp/goc" "$tmp/go" "$tmp/gocancel" "$tmp/pipec" "$tmp/pipego" <<'EOF2'
import sys
def rows(path):
    return [list(map(float, l.split())) for l in open(path) if l.strip()]
perf, cin, go, gc, pc, pg = (rows(p) for p in sys.argv[1:7])
if not perf or not cin or not go or not gc or not pc or not pg:
    sys.exit("bench/go-vs-c.sh: a client produced no figures")
best = lambda rs: min(rs, key=lambda r: r[0])
p, c, g, k = best(perf), best(cin), best(go), best(gc)
print()
print("%-38s %10s %9s %9s %10s" % ("64 B round trip, mean (best run)", "ns", "vs c", "vs perf", "allocs/op"))
print("%-38s %10.0f %9s %+9.0f %10s" % ("C: zap-perf client (own process)", p[0], "", 0, "-"))
print("%-38s %10.0f %+9.0f %+9.0f %10s" % ("C: libzap loop in the Go process (c)", c[0], 0, c[0] - p[0], "-"))
print("%-38s %10.0f %+9.0f %+9.0f %10.0f" % ("Go: transport, background ctx", g[0], g[0] - c[0], g[0] - p[0], g[1]))
print("%-38s %10.0f %+9.0f %+9.0f %10.0f" % ("Go: transport, cancellable ctx", k[0], k[0] - c[0], k[0] - p[0], k[1]))
d = g[0] - c[0]
print()
print("round trip through the binding minus C (background - c): %+.0f ns (goal < 1000 ns): %s" %
      (d, "met" if d < 1000 else "MISSED"))
print("ratio Go/C: %.3f against c, %.3f against zap-perf" % (g[0] / c[0], g[0] / p[0]))
qc, qg = best(pc), best(pg)
print()
print("%-38s %10s %9s %10s" % ("64 B Send + Recv, no waits (best run)", "ns", "vs c", "allocs/op"))
print("%-38s %10.0f %9s %10s" % ("C: libzap loop in the Go process (c)", qc[0], "", "-"))
print("%-38s %10.0f %+9.0f %10.0f" % ("Go: transport, background ctx", qg[0], qg[0] - qc[0], qg[1]))
e = qg[0] - qc[0]
print()
print("binding's added cost per Send+Recv (the calls of a round trip): %+.0f ns (goal < 1000 ns): %s" %
      (e, "met" if e < 1000 else "MISSED"))
print("ratio Go/C: %.3f" % (qg[0] / qc[0]))
print()
for name, rs in (("zap-perf", perf), ("c", cin), ("background", go), ("cancellable", gc),
                 ("pipeline c", pc), ("pipeline go", pg)):
    print("  runs %-12s %s" % (name, " ".join("%.0f" % r[0] for r in rs)))
EOF2
