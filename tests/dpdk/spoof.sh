#!/usr/bin/env bash
# The dpdk wire under spoofed sources, end to end: two network namespaces
# joined by a veth pair, a dpdk endpoint on each side (net_af_packet), and
# beside the pinging one a raw AF_PACKET sender (dp-spoof) forging SOURCES
# IPv4 sources, each opening a large message and sending 254 frames ahead
# of it, as long as the exchange lasts. Checked: the real peer's messages
# all go through (dp-peer ping), the receiver's free mbufs, read from its
# once-a-second DEBUG line, never fall below half its pool, and it keeps
# no state for the forged sources (peers 1: the real one), and counts the
# forged frames as refused (zap_stats().frames_refused, printed by
# dp-peer: at least one per source). Prints the round trips and the
# fewest free mbufs seen. Needs root and ip(8): exit 77 saying why.
#
# usage: spoof.sh DP_PEER DP_SPOOF [SOURCES] [MESSAGES]   (SOURCES 0: no spoofer)
# env:   SPOOF_RATE (frames/s, default 50000), DP_PEER_SIZE (one message
#        size for the ping, default the mixed sizes 0..100000)
set -uo pipefail
peer=$1 spoof=$2
sources=${3:-256}
msgs=${4:-200}
rate=${SPOOF_RATE:-50000}
PREFIX=zapsp . "$(dirname "$0")/veth-pair.sh"
mac=$(cat "/sys/class/net/$va/address" 2>/dev/null || ip netns exec "$ns1" cat "/sys/class/net/$va/address")

eal="--no-huge --no-shconf -m 256 --no-pci --no-telemetry"
export ZAP_TRANSPORT_QUIET=1
# The receiver logs its mbufs once a second at DEBUG.
ip netns exec "$ns1" env ZAP_LOG_LEVEL=debug \
	ZAP_DPDK_EAL_ARGS="$eal -l 1 --vdev=net_af_packet0,iface=$va --file-prefix=zaps1$$" \
	ZAP_DPDK_IP=10.67.0.2 ZAP_DPDK_UDP_PORT=7000 "$peer" echo "$msgs" >"$tmp/echo.out" 2>&1 &
echo_pid=$!
pids+=($echo_pid)
sleep 1
spoof_pid=
if [ "$sources" -gt 0 ]; then
	ip netns exec "$ns2" "$spoof" "$vb" "$mac" 10.67.0.2:7000 10.67.1.0 "$sources" 600 "$rate" \
		>"$tmp/spoof.out" 2>&1 &
	spoof_pid=$!
	pids+=($spoof_pid)
	sleep 2 # the flood is on before the real peer starts
else
	: >"$tmp/spoof.out"
fi
ip netns exec "$ns2" env \
	ZAP_DPDK_EAL_ARGS="$eal -l 0 --vdev=net_af_packet0,iface=$vb --file-prefix=zaps2$$" \
	ZAP_DPDK_IP=10.67.0.1 ZAP_DPDK_UDP_PORT=7001 "$peer" ping 10.67.0.2:7000 "$msgs" \
	>"$tmp/ping.out" 2>&1
rc=$?
sleep 1.2 # one more DEBUG line under the flood
[ -n "$spoof_pid" ] && { kill "$spoof_pid" 2>/dev/null; wait "$spoof_pid" 2>/dev/null; }
wait "$echo_pid"; erc=$?
cat "$tmp/ping.out" "$tmp/spoof.out"
grep 'mbufs free' "$tmp/echo.out" | tail -1
lines=$(grep -c 'mbufs free' "$tmp/echo.out")
min=$(grep -o 'mbufs free [0-9]*' "$tmp/echo.out" | awk '{print $3}' | sort -n | head -1)
peers=$(grep -o 'peers [0-9]*' "$tmp/echo.out" | awk '{print $2}' | sort -n | tail -1)
refused=$(grep -o 'frames refused [0-9]*' "$tmp/echo.out" | awk '{print $3}' | tail -1)
echo "receiver under $sources forged sources: fewest free mbufs $min (of 8191, $lines samples), most peers $peers, frames refused ${refused:-?}"
[ $rc = 0 ] && [ $erc = 0 ] || { echo "FAIL: endpoints failed (ping $rc, echo $erc)"; exit 1; }
[ -n "$min" ] || { echo "FAIL: no DEBUG line with the mbuf count"; exit 1; }
[ "$min" -ge 4095 ] || { echo "FAIL: free mbufs fell to $min"; exit 1; }
[ "${peers:-0}" -le 1 ] || { echo "FAIL: the receiver kept $peers peers"; exit 1; }
[ -n "$refused" ] || { echo "FAIL: no counters line from the receiver"; exit 1; }
# The real peer's first frame is challenged (refused) too: at most a few.
if [ "$sources" -gt 0 ]; then
	[ "$refused" -ge "$sources" ] || { echo "FAIL: only $refused frames refused"; exit 1; }
else
	[ "$refused" -le 3 ] || { echo "FAIL: $refused frames refused without a spoofer"; exit 1; }
fi
echo "ok - spoof"
