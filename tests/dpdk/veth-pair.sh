# Sourced by veth.sh and spoof.sh: two network namespaces joined by a veth
# pair, both ends up, no kernel addresses (the kernel must not answer for
# the DPDK side), torn down on exit with every pid in "pids". Sets ns1,
# ns2, va, vb and tmp. A missing capability is the only reason to skip,
# and ip's own error is printed (no CAP_SYS_ADMIN, no veth module, a
# read-only /run/netns).
#
# usage: PREFIX=zapdp . veth-pair.sh
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces, veth)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip(8) (iproute2)"; exit 77; }
ns1=${PREFIX}1-$$ ns2=${PREFIX}2-$$ va=${PREFIX:0:4}a$$ vb=${PREFIX:0:4}b$$
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$ns1" 2>/dev/null
	ip netns del "$ns2" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$ns1" 2>"$tmp/ip.err" && ip netns add "$ns2" 2>>"$tmp/ip.err" ||
	{ echo "SKIP: cannot create network namespaces here: $(cat "$tmp/ip.err")"; exit 77; }
ip link add "$va" netns "$ns1" type veth peer name "$vb" netns "$ns2" 2>"$tmp/ip.err" ||
	{ echo "SKIP: cannot create a veth pair here: $(cat "$tmp/ip.err")"; exit 77; }
for ns in "$ns1" "$ns2"; do
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
	ip -n "$ns" link set lo up
done
ip -n "$ns1" link set "$va" up && ip -n "$ns2" link set "$vb" up ||
	{ echo "FAIL: cannot bring the veth pair up"; exit 1; }
