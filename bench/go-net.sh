#!/bin/bash
# SPDX-License-Identifier: MIT
#
# libzap through the Go binding beside what a Go program writes plainly
# with the standard library, on one workload, in one run:
#
#   go-net   net + crypto/tls: one connection per peer, frames of a 4-byte
#            length and the bytes, mutual TLS 1.3 with pinned keys (the
#            default transport of the Go package libzap replaces);
#   libzap   package transport, PickWith("=default") with the TLS option:
#            the same keys and pins.
#
# Both are bindings/go/internal/gonetbench (read it for what each row
# does), one server process and one client process:
#
#   rtt 64              64 B round trips, one at a time (mean, p99)
#   stream 100 KiB      BYTES of 100 KiB messages, then an acknowledgement
#   stream 1 MiB        the same with 1 MiB messages
#   rtt-under-stream    64 B round trips while 1 MiB messages stream to the
#                       same peer (one connection: go-net's small messages
#                       queue behind whole large ones)
#   cpu us/msg          user + system time of both processes per message
#
# in two places: "netns", server and client in two network namespaces
# joined by a veth pair (no same-host path can be used; libzap's
# shared-memory upgrade is off there too: ZAP_SHM=off), and "host", both
# on this host's loopback, where libzap may move to shared memory (the
# path column says what it used). Each contender runs REPS times,
# interleaved; the best run of each counts. Goal: libzap ahead on every
# row; the script says which rows it is not.
#
# usage: bench/go-net.sh [BUILD_DIR]          (default: build)
# env:   REPS (3)          runs of each contender
#        ITERS (20000)     64 B round trips (a tenth of them under stream)
#        BYTES (1073741824) bytes per streaming row
#        TLS (1)           0: both plaintext (go-net without crypto/tls)
#        WHERE ("netns host")  netns needs root and veth support
#
# A smoke run (seconds): REPS=1 ITERS=200 BYTES=4000000 bench/go-net.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd) || exit 1
REPS=${REPS:-3}
ITERS=${ITERS:-20000}
BYTES=${BYTES:-1073741824}
TLS=${TLS:-1}
WHERE=${WHERE:-netns host}

command -v go >/dev/null || { echo "go not found (apt-get install golang-go)" >&2; exit 1; }
[ -e "$build/core/libzap.so" ] || { echo "no $build/core/libzap.so: build first" >&2; exit 1; }

# Build as bindings/go/test.sh does (offline, this build's libzap).
. "$src/bindings/go/build-env.sh"
export ZAP_TRANSPORT_QUIET=1 ZAP_PROBE_HELPER="$build/core/zap-probe" ZAP_PLUGIN_DIR=
unset ZAP_PLUGIN_PATH ZAP_LISTEN ZAP_TLS_CERT ZAP_TLS_KEY ZAP_TLS_CA ZAP_TLS_PEERS

tmp=$(mktemp -d)
ns_a= ns_b= srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
	[ -n "$ns_a" ] && ip netns del "$ns_a" 2>/dev/null
	[ -n "$ns_b" ] && ip netns del "$ns_b" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bin=$tmp/gonetbench
(cd "$src/bindings/go" && go build -o "$bin" ./internal/gonetbench) || exit 1

tlsargs=()
if [ "$TLS" = 1 ]; then
	mkdir -m 700 "$tmp/keys"
	"$bin" keygen "$tmp/keys" server && "$bin" keygen "$tmp/keys" client || exit 1
	cat "$tmp/keys/server.pin" "$tmp/keys/client.pin" >"$tmp/keys/peers.pins"
	tlsargs=(-tls "$tmp/keys")
fi

# netns: two namespaces, a veth pair, 198.18.0.0/30 (the benchmarking range).
setup_netns() {
	ns_a=zgonet-a-$$ ns_b=zgonet-b-$$
	local va=zgna$$ vb=zgnb$$
	ip netns add "$ns_a" && ip netns add "$ns_b" &&
		ip link add "$va" netns "$ns_a" type veth peer name "$vb" netns "$ns_b" &&
		ip -n "$ns_a" addr add 198.18.0.1/30 dev "$va" &&
		ip -n "$ns_b" addr add 198.18.0.2/30 dev "$vb" &&
		ip -n "$ns_a" link set "$va" up && ip -n "$ns_b" link set "$vb" up &&
		ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up
}

# run WHERE IMPL REP: one server and one client; the client's JSON to a file.
run() {
	local where=$1 impl=$2 rep=$3 sx=() cx=() slisten=127.0.0.1:0 clisten=127.0.0.1:0
	if [ "$where" = netns ]; then
		sx=(ip netns exec "$ns_a" env ZAP_SHM=off)
		cx=(ip netns exec "$ns_b" env ZAP_SHM=off)
		slisten=198.18.0.1:0 clisten=198.18.0.2:0
	fi
	"${sx[@]}" "$bin" server -impl "$impl" -listen "$slisten" "${tlsargs[@]}" \
		>"$tmp/server.out" 2>"$tmp/server.err" &
	srv=$!
	local addr= i
	for i in $(seq 100); do
		addr=$(head -n 1 "$tmp/server.out" 2>/dev/null)
		[ -n "$addr" ] && break
		sleep 0.05
	done
	if [ -z "$addr" ]; then
		echo "go-net.sh: $impl server did not start:" >&2
		cat "$tmp/server.err" >&2
		return 1
	fi
	"${cx[@]}" "$bin" client -impl "$impl" -peer "$addr" -listen "$clisten" \
		"${tlsargs[@]}" -iters "$ITERS" -bytes "$BYTES" >"$tmp/$where.$impl.$rep.json" ||
		{ echo "go-net.sh: $impl client failed in $where" >&2; return 1; }
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
	srv=
}

places=()
for where in $WHERE; do
	if [ "$where" = netns ]; then
		if [ "$(id -u)" != 0 ] || ! setup_netns; then
			echo "go-net.sh: no netns rows (needs root, ip and veth)" >&2
			continue
		fi
	fi
	places+=("$where")
done
echo "running: ${places[*]}; $REPS runs each, $ITERS round trips, $BYTES bytes per stream row, TLS=$TLS" >&2
for rep in $(seq "$REPS"); do
	for where in "${places[@]}"; do
		for impl in net zap; do
			run "$where" "$impl" "$rep" || exit 1
		done
	done
done

python3 - "$tmp" "${places[@]}" <<'PY'
import glob, json, sys
tmp, places = sys.argv[1], sys.argv[2:]
def best(where, impl):
    rows = {}
    for f in glob.glob("%s/%s.%s.*.json" % (tmp, where, impl)):
        for r in json.load(open(f)):
            k = (r["test"], r["size"])
            b = rows.setdefault(k, dict(r))
            for f2, better in (("mean_us", min), ("p99_us", min),
                               ("mb_per_s", max), ("cpu_us_per_msg", min)):
                if f2 in r:
                    b[f2] = better(b[f2], r[f2])
    return rows
behind = []
print("%-6s %-17s %-9s %12s %12s %7s  %s" % ("where", "test", "size", "go-net", "libzap",
                                          "ratio", "libzap path"))
for where in places:
    n, z = best(where, "net"), best(where, "zap")
    for k in n:
        for field, unit, lower in (("mean_us", "us", True), ("p99_us", "us p99", True),
                                   ("mb_per_s", "MB/s", False),
                                   ("cpu_us_per_msg", "cpu us/msg", True)):
            if field not in n[k] or field not in z.get(k, {}):
                continue
            a, b = n[k][field], z[k][field]
            ratio = (a / b) if lower else (b / a)
            size = "%d B" % k[1] if k[1] < 1024 else "%d KiB" % (k[1] // 1024)
            print("%-6s %-17s %-9s %12.1f %12.1f %6.2fx  %s (%s)" % (
                where, k[0], size, a, b, ratio, z[k]["path"], unit))
            if ratio < 1:
                behind.append("%s %s %s %s" % (where, k[0], size, unit))
print("ratio: how many times better libzap is (above 1: libzap ahead)")
print("libzap behind on: " + ("; ".join(behind) if behind else "no row"))
PY
