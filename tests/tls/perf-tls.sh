#!/usr/bin/env bash
# zap-perf over TLS with the same variables as any libzap program: a node
# key made with the recipe of docs/wires.md, then zap-perf --loopback with
# ZAP_TLS_CERT/KEY/PEERS; the DEBUG log must show TLS 1.3 connections.
#   perf-tls.sh <docs/wires.md> <zap-perf>
set -euo pipefail
doc=$(realpath "$1") perf=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/<!-- keygen-begin -->/,/<!-- keygen-end -->/p' "$doc" |
	sed -e '1,/^```sh$/d' -e '/^```$/,$d' >"$tmp/recipe.sh"
cd "$tmp"
(NODE=node; . ./recipe.sh) 2>keygen.log || { cat keygen.log >&2; exit 1; }
ZAP_TLS_CERT=node.crt ZAP_TLS_KEY=node.key ZAP_TLS_PEERS=node.pin \
ZAP_LOG_LEVEL=debug "$perf" --loopback -t =default -s 64,1M -T lat,bw \
	-n 200 -b 64M --json >out.json 2>log || { cat log >&2; exit 1; }
grep -q 'TLS with .*TLSv1.3' log || { echo "no TLS connection in the log:" >&2; cat log >&2; exit 1; }
python3 - out.json <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
tests = {(r["test"], r["size"]) for r in doc["results"]}
assert ("latency", 64) in tests and ("bandwidth", 1048576) in tests, tests
print("ok: zap-perf over TLS:", sorted(tests))
PY
