#!/usr/bin/env bash
# zap-perf over dpdk (net_memif between two processes, --no-huge, each on
# its own lcore) against the default transport (kernel TCP over loopback),
# in the same run, with the same tool and the same server/client shape.
# Prints both results and the ratios the dpdk goals are stated in:
#   64 B one-way latency: dpdk <= 1/3 of default's (median)
#   small-message rate:   dpdk >= 3x default's (64 B, a window in flight)
#
# usage: bench/dpdk-vs-tcp.sh [BUILD_DIR]    (default: build)
# env:   ITERS (latency round trips, default 20000), MSGS (rate messages,
#        default 200000), SIZES (default 64), SRV_CPU/CLI_CPU (default 1/0)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
perf=$build/tools/zap-perf
plugins=$PWD/$build/plugins/dpdk
[ -x "$perf" ] || { echo "no $perf: build first (meson compile -C $build)" >&2; exit 1; }
[ -e "$plugins/libzap-dpdk.so" ] || { echo "no dpdk plugin in $plugins" >&2; exit 1; }
ITERS=${ITERS:-20000}
MSGS=${MSGS:-200000}
SIZES=${SIZES:-64}
SRV_CPU=${SRV_CPU:-1}
CLI_CPU=${CLI_CPU:-0}
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
export ZAP_PLUGIN_PATH=$plugins ZAP_TRANSPORT_QUIET=1 ZAP_LOG_LEVEL=error
export ZAP_PROBE_HELPER=$build/core/zap-probe  # this build's probe helper
args=(-s "$SIZES" -T lat,rate -n "$ITERS" -m "$MSGS" --json)

run_pair() { # NAME SERVER_ENV... -- CLIENT_ENV... -- TRANSPORT LISTEN PEER
	local name=$1; shift
	local senv=() cenv=()
	while [ "$1" != -- ]; do senv+=("$1"); shift; done; shift
	while [ "$1" != -- ]; do cenv+=("$1"); shift; done; shift
	local tr=$1 listen=$2 peer=$3
	env "${senv[@]}" taskset -c "$SRV_CPU" "$perf" -t "=$tr" -l "$listen" server \
		>"$tmp/$name.srv" 2>&1 &
	srv=$!
	sleep 1
	env "${cenv[@]}" taskset -c "$CLI_CPU" "$perf" -t "=$tr" "${args[@]}" client "$peer" \
		>"$tmp/$name.json" 2>"$tmp/$name.err" || {
		echo "$name client failed:" >&2; cat "$tmp/$name.err" "$tmp/$name.srv" >&2; exit 1; }
	kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true; srv=
}

run_pair default ZAP_X=1 -- ZAP_X=1 -- default 127.0.0.1:18611 127.0.0.1:18611

sock=/zap-bench-$$
eal="--no-huge --no-shconf -m 512 --no-pci --no-telemetry"
run_pair dpdk \
	"ZAP_DPDK_EAL_ARGS=$eal -l $SRV_CPU --vdev=net_memif0,role=server,socket=$sock,mac=02:00:00:00:b0:01 --file-prefix=zapbs$$" \
	ZAP_DPDK_IP=10.88.0.1 ZAP_DPDK_UDP_PORT=18612 -- \
	"ZAP_DPDK_EAL_ARGS=$eal -l $CLI_CPU --vdev=net_memif0,role=client,socket=$sock,mac=02:00:00:00:b0:02 --file-prefix=zapbc$$" \
	ZAP_DPDK_IP=10.88.0.2 ZAP_DPDK_UDP_PORT=18613 -- \
	dpdk 0.0.0.0:18612 10.88.0.1:18612

python3 - "$tmp/default.json" "$tmp/dpdk.json" <<'PY'
import json, sys
d, p = (json.load(open(f)) for f in sys.argv[1:3])
def get(doc, test, size, field):
    for r in doc["results"]:
        if r["test"] == test and r["size"] == size:
            return r[field]
    raise SystemExit(f"no {test}/{size} in {doc}")
sizes = sorted({r["size"] for r in d["results"]})
print(f"{'size':>6} {'test':<8} {'default (TCP)':>16} {'dpdk (memif)':>16} {'ratio':>8}")
ok = True
for s in sizes:
    dl, pl = get(d, "latency", s, "median_us"), get(p, "latency", s, "median_us")
    dr, pr = get(d, "rate", s, "msgs_per_s"), get(p, "rate", s, "msgs_per_s")
    print(f"{s:>6} {'lat p50':<8} {dl:>13.2f} us {pl:>13.2f} us {dl / pl:>7.1f}x")
    print(f"{s:>6} {'lat min':<8} {get(d, 'latency', s, 'min_us'):>13.2f} us "
          f"{get(p, 'latency', s, 'min_us'):>13.2f} us")
    print(f"{s:>6} {'rate':<8} {dr:>11.0f} msg/s {pr:>11.0f} msg/s {pr / dr:>7.1f}x")
    if s == 64:
        lat_ok, rate_ok = pl <= dl / 3, pr >= 3 * dr
        ok = lat_ok and rate_ok
        print(f"goal 64 B latency <= 1/3 of default's: {'met' if lat_ok else 'NOT met'} "
              f"({pl:.2f} vs {dl / 3:.2f} us)")
        print(f"goal 64 B rate >= 3x default's:       {'met' if rate_ok else 'NOT met'} "
              f"({pr:.0f} vs {3 * dr:.0f} msg/s)")
sys.exit(0 if ok else 3)
PY
