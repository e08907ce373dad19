#!/bin/bash
# SPDX-License-Identifier: MIT
#
# How long a legitimate newcomer waits while an attacker holds an endpoint's
# connections at its descriptor cap (issue #35). An echo server at
# RLIMIT_NOFILE NOFILE (128: a cap of 48 connections), and 120 raw
# connections from 127.0.0.2-5 that dial again whenever the endpoint
# closes one: silent (no HELLO), a HELLO then idle, or a HELLO then a
# message every 50 ms (busy); with -once the same without dialing again. Meanwhile TRIES newcomers from 127.0.0.1, one
# after another, each a fresh endpoint that sends "echo" and waits for it
# to come back, sending again 10 ms after a failure, as an application
# that retries would, for at most TRY_MS (bench/newcomer_wait.c). Per row:
# the newcomers never echoed within TRY_MS, those whose first attempt
# failed, the failed attempts in all, the median and longest wait (from
# the first send to the echo, or to giving up), the median against the
# same server with no attacker (measured in the same run), how often the
# attacker dialed again meanwhile (the endpoint closed that many of its
# connections), and the first failure's reason.
#
# With BASE_BUILD the same rows for that build's libzap too (the server
# loads it through LD_LIBRARY_PATH; the attacker and the newcomers are
# BUILD's), and the ratio of the medians, base / build.
#
# usage: bench/newcomer-wait.sh [BUILD_DIR] [BASE_BUILD_DIR]   (default: build)
# env:   TRIES (20), TRY_MS (10000, ZAP_TCP_HANDSHAKE_MS's default),
#        PEERS (120), NOFILE (128),
#        MODES ("silent hello busy silent-once hello-once busy-once")
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
base=${2:+$(cd "$2" && pwd)}
tries=${TRIES:-20}
try_ms=${TRY_MS:-10000}
peers=${PEERS:-120}
nofile=${NOFILE:-128}
modes=${MODES:-silent hello busy silent-once hello-once busy-once}
drv=$build/bench/newcomer_wait
[ -x "$drv" ] || { echo "no $drv: build first (meson compile -C $build)" >&2; exit 1; }
for b in "$build" ${base:+"$base"}; do
	[ -e "$b/core/libzap.so.0" ] || { echo "no $b/core/libzap.so.0" >&2; exit 1; }
done
export ZAP_TRANSPORT_QUIET=1 ZAP_PLUGIN_PATH= ZAP_SHM=off
tmp=$(mktemp -d)
srv=
trap 'if [ -n "$srv" ]; then kill $srv 2>/dev/null; fi; rm -rf "$tmp"' EXIT

# run BUILD MODE: one server of BUILD's libzap, one client run; its
# key=value line.
run() {
	local lib=$1/core addr=
	# Its WARN lines (one per connection it closes) go to a file.
	LD_LIBRARY_PATH=$lib "$drv" server "$nofile" >"$tmp/addr" 2>>"$tmp/server.log" &
	srv=$!
	for _ in $(seq 100); do
		addr=$(head -n 1 "$tmp/addr")
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || { echo "the server did not start" >&2; exit 1; }
	# The server must run the libzap asked for, not the one its RUNPATH names.
	grep -q " $(readlink -f "$lib/libzap.so.0")\$" /proc/$srv/maps ||
		{ echo "the server did not load $lib/libzap.so.0" >&2; exit 1; }
	"$drv" client "$addr" "$2" "$peers" "$tries" "$try_ms"
	kill $srv
	wait $srv 2>/dev/null || true
	srv=
}

field() { # LINE KEY
	echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

echo "RLIMIT_NOFILE $nofile, $peers attacker connections, $tries newcomers of at most $try_ms ms each"
. "$here/lib.sh" # busy_cores
busy=$(busy_cores 1 || true)
[ -n "$busy" ] && echo "other processes using the cores:" && echo "$busy"
printf '%-5s %-11s %7s %7s %8s %10s %10s %8s %8s  %s\n' build attack never \
	1st_fail refused median_ms max_ms x_alone redials "first failure"
declare -A med atleast
for b in "$build" ${base:+"$base"}; do
	name=build
	[ "$b" = "$build" ] || name=base
	alone=
	for m in none $modes; do
		line=$(run "$b" "$m")
		med[$name,$m]=$(field "$line" median_ms)
		# Half or more never echoed: the median is the limit, the real
		# wait longer.
		atleast[$name,$m]=
		[ $((2 * ($(field "$line" tries) - $(field "$line" ok)))) -ge "$(field "$line" tries)" ] &&
			atleast[$name,$m]='>'
		[ "$m" = none ] && alone=${med[$name,$m]}
		printf '%-5s %-11s %4s/%-2s %4s/%-2s %8s %10s %10s %8s %8s  %s\n' "$name" "$m" \
			$(($(field "$line" tries) - $(field "$line" ok))) "$(field "$line" tries)" \
			"$(field "$line" first_failed)" "$(field "$line" tries)" \
			"$(field "$line" refused)" "${atleast[$name,$m]}${med[$name,$m]}" \
			"$(field "$line" max_ms)" \
			"${atleast[$name,$m]}$(awk -v a="${med[$name,$m]}" -v b="$alone" \
				'BEGIN { printf "%.1f", a / b }')" \
			"$(field "$line" redials_during)" \
			"$(echo "$line" | sed -n 's/.*first_failure="\(.*\)"$/\1/p' | cut -c1-100)"
	done
done
if [ -n "$base" ]; then
	echo "median wait, base / build ('>': the base's is at least that):"
	for m in none $modes; do
		awk -v m="$m" -v a="${med[base,$m]}" -v b="${med[build,$m]}" -v c="${atleast[base,$m]}" \
			'BEGIN { printf "  %-11s %s%.1f\n", m, c, a / b }'
	done
fi
echo "build: $build${base:+; base: $base}"
