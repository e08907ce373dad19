#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, a dpdk endpoint on each side
# through net_af_packet: ARP resolution end to end (no static neighbours),
# messages both ways, and a capture of the wire in which every IPv4 header
# and UDP checksum verifies (tcpdump -vv prints "bad cksum" / "bad udp
# cksum" otherwise). Needs root, ip(8) and tcpdump: exit 77 saying why.
#
# usage: veth.sh DP_PEER_BINARY
set -uo pipefail
peer=$1
command -v tcpdump >/dev/null || { echo "SKIP: no tcpdump (apt-get install tcpdump)"; exit 77; }
PREFIX=zapdp . "$(dirname "$0")/veth-pair.sh"

# net_af_packet sends with PACKET_QDISC_BYPASS, which taps do not see:
# capture each side's received frames, which together are all of them.
ip netns exec "$ns1" tcpdump -i "$va" -U -w "$tmp/a.pcap" 2>"$tmp/a.err" &
pids+=($!)
ip netns exec "$ns2" tcpdump -i "$vb" -U -w "$tmp/b.pcap" 2>"$tmp/b.err" &
pids+=($!)
for _ in $(seq 50); do
	grep -q listening "$tmp/a.err" && grep -q listening "$tmp/b.err" && break
	sleep 0.1
done

eal="--no-huge --no-shconf -m 256 --no-pci --no-telemetry"
export ZAP_TRANSPORT_QUIET=1
ip netns exec "$ns2" env ZAP_DPDK_EAL_ARGS="$eal -l 1 --vdev=net_af_packet0,iface=$vb --file-prefix=zapv2$$" \
	ZAP_DPDK_IP=10.66.0.2 ZAP_DPDK_UDP_PORT=7000 "$peer" echo 24 >"$tmp/echo.out" 2>&1 &
echo_pid=$!
pids+=($echo_pid)
ip netns exec "$ns1" env ZAP_DPDK_EAL_ARGS="$eal -l 0 --vdev=net_af_packet0,iface=$va --file-prefix=zapv1$$" \
	ZAP_DPDK_IP=10.66.0.1 ZAP_DPDK_UDP_PORT=7001 "$peer" ping 10.66.0.2:7000 24 >"$tmp/ping.out" 2>&1
rc=$?
wait "$echo_pid"; erc=$?
sleep 0.3
kill "${pids[0]}" "${pids[1]}" 2>/dev/null; wait "${pids[0]}" "${pids[1]}" 2>/dev/null
cat "$tmp/ping.out" "$tmp/echo.out"
[ $rc = 0 ] && [ $erc = 0 ] || { echo "FAIL: endpoints failed (ping $rc, echo $erc)"; exit 1; }

for f in a b; do tcpdump -r "$tmp/$f.pcap" -nn -vv 2>/dev/null; done >"$tmp/cap.txt"
arp_req=$(grep -c 'ARP.*Request who-has 10.66.0.2' "$tmp/cap.txt")
arp_rep=$(grep -c 'ARP.*Reply 10.66.0.2 is-at' "$tmp/cap.txt")
udp=$(grep -c 'proto UDP' "$tmp/cap.txt")
ok=$(grep -c 'udp sum ok' "$tmp/cap.txt")
bad=$(grep -c 'bad cksum\|bad udp cksum' "$tmp/cap.txt")
echo "capture: $arp_req ARP requests, $arp_rep ARP replies, $udp IPv4/UDP frames," \
	"$ok UDP checksums ok, $bad bad checksums"
[ "$arp_req" -ge 1 ] && [ "$arp_rep" -ge 1 ] || { echo "FAIL: no ARP exchange captured"; exit 1; }
[ "$udp" -ge 48 ] || { echo "FAIL: too few UDP frames captured"; exit 1; }
[ "$bad" = 0 ] || { grep -B1 'bad cksum\|bad udp cksum' "$tmp/cap.txt" | head; exit 1; }
[ "$ok" = "$udp" ] || { echo "FAIL: $((udp - ok)) UDP frames without a verified checksum"; exit 1; }
echo "ok - veth"
