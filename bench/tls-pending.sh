#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What half-open TLS handshakes cost an endpoint (issue #35): a zap-perf
# server with TLS and a 10-minute handshake limit, then N clients that
# each send a TLS 1.3 ClientHello and say nothing more (Python's ssl). It
# prints the server's resident memory before, while they are held, per
# attempted handshake, and 3 s after the clients closed (what the endpoint
# gave back). An endpoint holds at most 256 TLS handshakes at once
# (plugins/default/WIRE.md, "Handshakes in flight").
#
# usage: bench/tls-pending.sh [BUILD_DIR] [N]     (default: build 1000)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
n=${2:-1000}
tmp=$(mktemp -d)
srv=
trap 'kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
umask 077
# The key recipe of docs/wires.md.
for node in srv cli; do
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout $node.key -out $node.crt -days 1 -subj "/CN=$node" 2>/dev/null
	echo "sha256:$(openssl x509 -in $node.crt -pubkey -noout |
		openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)" >>peers
done
port=$((30000 + RANDOM % 20000))
ZAP_PLUGIN_PATH= ZAP_TRANSPORT_QUIET=1 ZAP_TLS_CERT=srv.crt ZAP_TLS_KEY=srv.key \
	ZAP_TLS_PEERS=peers ZAP_TCP_HANDSHAKE_MS=600000 \
	"$build/tools/zap-perf" -t =default -l 127.0.0.1:$port server >/dev/null 2>&1 &
srv=$!
sleep 1
python3 - 127.0.0.1 $port "$n" $srv <<'PY'
import socket, ssl, sys, time
host, port, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.set_alpn_protocols(["zap/1"])
before = rss()
held = []
for _ in range(n):
    t = ctx.wrap_socket(socket.create_connection((host, port)),
                        do_handshake_on_connect=False)
    t.setblocking(False)
    try:
        t.do_handshake()  # sends the ClientHello, then waits for nothing
    except (ssl.SSLError, OSError):
        pass
    held.append(t)
time.sleep(3)
during = rss()
for t in held:
    t.close()
time.sleep(3)
after = rss()
print(f"{n} half-open TLS handshakes: server RSS {before} KiB before, "
      f"{during} KiB held ({(during - before) / n:.1f} KiB per attempt), "
      f"{after} KiB 3 s after they closed")
PY
