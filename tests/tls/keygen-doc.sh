#!/usr/bin/env bash
# Run the key and certificate recipe of docs/wires.md exactly as written
# (the block between <!-- keygen-begin --> and <!-- keygen-end -->), then
# check that util/tls accepts the result and agrees on its fingerprint.
# zap-info -v must show the same fingerprint.
#   keygen-doc.sh <docs/wires.md> <tls-keygen-check> <zap-info>
set -euo pipefail
doc=$(realpath "$1") check=$(realpath "$2") info=$(realpath "$3")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/<!-- keygen-begin -->/,/<!-- keygen-end -->/p' "$doc" |
	sed -e '1,/^```sh$/d' -e '/^```$/,$d' >"$tmp/recipe.sh"
[ -s "$tmp/recipe.sh" ] || { echo "no keygen block in $doc" >&2; exit 1; }
cd "$tmp"
for n in alpha beta; do
	(NODE=$n; . ./recipe.sh) 2>"$n.log" || { cat "$n.log" >&2; exit 1; }
	mode=$(stat -c %a "$n.key")
	[ "$mode" = 600 ] || { echo "$n.key has mode $mode, not 600" >&2; exit 1; }
done
cat alpha.pin beta.pin >peers
# Each node loads its pair and pins the other; the fingerprint util/tls
# computes is the one the recipe printed.
for n in alpha beta; do
	got=$("$check" "$n.crt" "$n.key" peers)
	want=$(cat "$n.pin")
	[ "$got" = "$want" ] || { echo "$n: util/tls says $got, recipe says $want" >&2; exit 1; }
	shown=$(ZAP_TLS_CERT=$n.crt ZAP_TLS_KEY=$n.key ZAP_TLS_PEERS=peers "$info" -v |
		sed -n 's/^  key: *//p')
	[ "$shown" = "$want" ] || { echo "$n: zap-info -v shows '$shown', want $want" >&2; exit 1; }
	echo "ok $n $got"
done
