#!/bin/bash
# SPDX-License-Identifier: MIT
#
# TLS on the default transport beside plaintext, in one run: zap-perf's
# 64 B one-way latency (median of RTT/2) and 1 MiB streaming bandwidth,
# plaintext and TLS interleaved, the best of REPS runs each; and the time
# of a new connection's first send between long-lived endpoints (connect,
# TLS handshake, HELLO, one frame) from bench/tls_handshake.c. Goals: TLS
# latency within 1.2x of plaintext, TLS bandwidth at least 0.5x. Then what
# bounds them: util/tls's own cost per record for each TLS 1.3 cipher
# suite, without the wire (bench/tls_record.c), and `openssl speed` for
# the AEADs on one core.
#
# Both zap-perf endpoints run with one node key (an endpoint trusts its
# own key), made here with the recipe of docs/wires.md.
#
# usage: bench/tls.sh [BUILD_DIR]     (default: build)
# env:   REPS (5) ITERS (20000) BYTES (2G) CPUS ("0,1") CONNS (300)
set -u
build=${1:-build}
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # REPS ITERS BYTES CPUS, perf_lat, perf_bw
CONNS=${CONNS:-300}
hs=$build/bench/tls_handshake
rec=$build/bench/tls_record
need_built "$perf" "$hs" "$rec"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && umask 077 &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout node.key -out node.crt -days 1 -subj /CN=bench 2>/dev/null &&
	echo "sha256:$(openssl x509 -in node.crt -pubkey -noout |
		openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)" > peers) ||
	{ echo "openssl failed" >&2; exit 1; }
tls_env=(ZAP_TLS_CERT="$tmp/node.crt" ZAP_TLS_KEY="$tmp/node.key" ZAP_TLS_PEERS="$tmp/peers")

: > "$tmp/p_lat"; : > "$tmp/t_lat"; : > "$tmp/p_bw"; : > "$tmp/t_bw"
echo "running: $REPS runs each, 64 B x $ITERS round trips, 1 MiB x $BYTES, cores $CPUS, $CONNS connections" >&2
for rep in $(seq "$REPS"); do
	perf_lat "$tmp/p_lat"
	perf_lat "$tmp/t_lat" "${tls_env[@]}"
	perf_bw "$tmp/p_bw"
	perf_bw "$tmp/t_bw" "${tls_env[@]}"
done
"$hs" "$CONNS" > "$tmp/p_hs" || exit 1
env "${tls_env[@]}" "$hs" "$CONNS" > "$tmp/t_hs" || exit 1
ktls=$(env "${tls_env[@]}" "$build/tools/zap-info" -v | sed -n 's/^  kTLS: *//p')

python3 - "$tmp" "$ktls" <<'PY'
import json, sys
d = sys.argv[1]
def vals(n): return [float(x) for x in open(f"{d}/{n}").read().split()]
pl, tl, pb, tb = min(vals("p_lat")), min(vals("t_lat")), max(vals("p_bw")), max(vals("t_bw"))
ph, th = json.load(open(f"{d}/p_hs")), json.load(open(f"{d}/t_hs"))
lr, br = tl / pl, tb / pb
print(f"{'':24}{'plaintext':>12}{'TLS 1.3':>12}{'ratio':>8}  goal")
print(f"{'64 B latency (us)':24}{pl:12.2f}{tl:12.2f}{lr:8.2f}  <= 1.2x: {'met' if lr <= 1.2 else 'MISSED'}")
print(f"{'1 MiB bandwidth (MB/s)':24}{pb:12.0f}{tb:12.0f}{br:8.2f}  >= 0.5x: {'met' if br >= 0.5 else 'MISSED'}")
print(f"{'new connection (us)':24}{ph['median_us']:12.1f}{th['median_us']:12.1f}{th['median_us'] / ph['median_us']:8.1f}  (median of {th['connections']} from warm endpoints: connect, handshake, HELLO, 64 B)")
print(f"kTLS: {sys.argv[2]}")
PY
echo
"$rec" "$tmp/node.crt" "$tmp/node.key" "$tmp/peers" || exit 1
echo
echo "openssl speed, one core (bytes per second; 64 B and 16 KiB records):"
for c in aes-128-gcm aes-256-gcm chacha20-poly1305; do
	for b in 64 16384; do
		openssl speed -elapsed -seconds 1 -bytes "$b" -evp "$c" 2>/dev/null | tail -1 |
			awk -v b="$b" '{ printf "  %-20s %6s B %12s\n", $1, b, $NF }'
	done
done
