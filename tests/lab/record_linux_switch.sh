#!/bin/sh
# Records real `tc -s -j qdisc show` and `nft -j list counters` output of a Linux bridge port under
# a tbf+pfifo shaper and an nft CE-marking rule, for tests/fixtures/linux_switch/ (root; ~5 s).
set -eu
P=fsrec$$; OUT=${1:?output dir}
mkdir -p "$OUT"
cleanup() { for n in sw a b; do ip netns del $P-$n 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for n in sw a b; do ip netns add $P-$n; ip -n $P-$n link set lo up; done
ip link add name swp1 netns $P-sw type veth peer name eth0 netns $P-a
ip link add name swp2 netns $P-sw type veth peer name eth0 netns $P-b
ip -n $P-sw link add br0 type bridge
for p in swp1 swp2; do ip -n $P-sw link set $p master br0; ip -n $P-sw link set $p up; done
ip -n $P-sw link set br0 up
ip -n $P-a addr add 10.98.0.1/24 dev eth0; ip -n $P-a link set eth0 up
ip -n $P-b addr add 10.98.0.2/24 dev eth0; ip -n $P-b link set eth0 up
ip netns exec $P-a sysctl -qw net.ipv4.tcp_ecn=1; ip netns exec $P-b sysctl -qw net.ipv4.tcp_ecn=1
S="ip netns exec $P-sw"
$S nft -f - <<NFT
add table bridge lab
add counter bridge lab ecn_swp1
add counter bridge lab ecn_swp2
add counter bridge lab fcs_swp1
add counter bridge lab fcs_swp2
add chain bridge lab ports { type filter hook forward priority 0 ; policy accept ; }
add rule bridge lab ports oifname swp2 ip ecn ect0 numgen random mod 100 < 30 counter name ecn_swp2 ip ecn set ce
add rule bridge lab ports iifname swp1 numgen random mod 1000 < 20 counter name fcs_swp1 drop
NFT
$S tc qdisc add dev swp2 root handle 1: tbf rate 50mbit burst 16k latency 5ms
$S tc qdisc add dev swp2 parent 1:1 handle 10: pfifo limit 20
ip netns exec $P-b python3 -c "
import socket; s=socket.socket(); s.bind(('0.0.0.0',5201)); s.listen(1); c,_=s.accept()
while c.recv(1<<20): pass" &
sleep 0.5
ip netns exec $P-a python3 -c "
import socket,time; c=socket.create_connection(('10.98.0.2',5201)); b=b'x'*(1<<20); t=time.time()
while time.time()-t<2: c.sendall(b)
c.close()"
wait
$S tc -s -j qdisc show > "$OUT/tc_qdisc.json"
$S nft -j list counters > "$OUT/nft_counters.json"
