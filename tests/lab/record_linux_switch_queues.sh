#!/bin/sh
# Records real `tc -s -j qdisc show` output of a Linux bridge port with one qdisc per transmit queue,
# for tests/fixtures/linux_switch/ (root; ~5 s). swp2 has 4 transmit queues under the `mq` root (a
# switch port's egress queues); each queue gets a tbf shaper (10-40 Mbit/s) over an 8-packet
# pfifo, so a loaded queue backs up and drops. Six TCP flows from a to b land on the queues the kernel picks
# (on this kernel's veth: mostly one).
# The recording kernel builds only htb, tbf and fifo schedulers (no fq_codel/red/prio/mqprio), so no
# qdisc here marks ECN. `nft -j list counters` is recorded too (none are defined: the queues' numbers
# all come from tc).
set -eu
P=fsrq$$; OUT=${1:?output dir}
mkdir -p "$OUT"
cleanup() { for n in sw a b; do ip netns del $P-$n 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for n in sw a b; do ip netns add $P-$n; ip -n $P-$n link set lo up; done
ip link add name swp1 netns $P-sw type veth peer name eth0 netns $P-a
ip link add name swp2 netns $P-sw numtxqueues 4 type veth peer name eth0 netns $P-b numrxqueues 4
ip -n $P-sw link add br0 type bridge
for p in swp1 swp2; do ip -n $P-sw link set $p master br0; ip -n $P-sw link set $p up; done
ip -n $P-sw link set br0 up
ip -n $P-a addr add 10.97.0.1/24 dev eth0; ip -n $P-a link set eth0 up
ip -n $P-b addr add 10.97.0.2/24 dev eth0; ip -n $P-b link set eth0 up
ip netns exec $P-a sysctl -qw net.ipv4.tcp_ecn=1; ip netns exec $P-b sysctl -qw net.ipv4.tcp_ecn=1
S="ip netns exec $P-sw"
$S tc qdisc add dev swp2 root handle 1: mq
for q in 1 2 3 4; do  # queue q-1: a tbf shaper (10-40 Mbit/s) over an 8-packet pfifo
  $S tc qdisc add dev swp2 parent 1:$q handle ${q}0: tbf rate $((q * 10))mbit burst 16k latency 100ms
  $S tc qdisc add dev swp2 parent ${q}0:1 handle ${q}1: pfifo limit 8
done
for port in 5201 5202 5203 5204 5205 5206; do
ip netns exec $P-b python3 -c "
import socket; s=socket.socket(); s.bind(('0.0.0.0',$port)); s.listen(1); c,_=s.accept()
while c.recv(1<<20): pass" &
done
sleep 0.5
for port in 5201 5202 5203 5204 5205 5206; do
ip netns exec $P-a python3 -c "
import socket,time; c=socket.create_connection(('10.97.0.2',$port)); b=b'x'*(1<<20); t=time.time()
while time.time()-t<3: c.sendall(b)
c.close()" &
done
sleep 2
$S tc -s -j qdisc show > "$OUT/tc_qdisc.json"
$S nft -j list counters > "$OUT/nft_counters.json"
wait
