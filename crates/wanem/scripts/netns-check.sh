#!/usr/bin/env bash
# Manual integration check of gridsplit-wanem (run as root): two hosts on one L2
# segment through the delay line, in throw-away namespaces named gsx-*.
#
#   gsx-a (10.99.0.1, tbf 1gbit) ── veth ── gsx-w (wanem) ── veth ── gsx-b (10.99.0.2, tbf 1gbit)
#
# Everything happens inside the gsx-* namespaces: no host interface, route or
# sysctl is touched. Only processes this script started are stopped, by PID.
# Each phase (ping, iperf3 offloaded, iperf3 per-MTU) runs its own wanem so that
# its lateness figures (mean, p99, worst are cumulative) belong to that phase.
#
# Usage: crates/wanem/scripts/netns-check.sh [DELAY_US] [IPERF_SECONDS] [RT_PRIORITY] [MAX_SPIN_PERCENT]
set -euo pipefail

DELAY_US=${1:-5000}
SECS=${2:-10}
RT=${3:-0}
SPIN=${4:-10}
BIN=${BIN:-$(cd "$(dirname "$0")/../../.." && pwd)/target/release/gridsplit-wanem}
WORK=$(mktemp -d /tmp/gsx-wanem.XXXXXX)
WANEM_PID=""

cleanup() {
    if [[ -n "$WANEM_PID" ]]; then kill "$WANEM_PID" 2>/dev/null || true; fi
    for ns in gsx-a gsx-w gsx-b; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

for ns in gsx-a gsx-w gsx-b; do ip netns add "$ns"; done
# Create each veth pair directly inside its namespaces.
ip link add wan netns gsx-a type veth peer name wa netns gsx-w
ip link add wan netns gsx-b type veth peer name wb netns gsx-w
# The WAN namespace must stay silent: no IPv6 autoconf or DAD frames of its own.
ip netns exec gsx-w sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
for ns in gsx-a gsx-w gsx-b; do ip -n "$ns" link set lo up; done
ip -n gsx-w link set wa up
ip -n gsx-w link set wb up
ip -n gsx-a addr add 10.99.0.1/24 dev wan
ip -n gsx-b addr add 10.99.0.2/24 dev wan
for ns in gsx-a gsx-b; do
    ip -n "$ns" link set wan up
    tc -n "$ns" qdisc add dev wan root tbf rate 1gbit burst 256k limit 2mb
    # Per-namespace sysctls: a 10 ms RTT at 1 Gb/s needs windows above 1.25 MB.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 16777216" \
        net.ipv4.tcp_wmem="4096 16384 16777216"
done

cat >"$WORK/wanem.json" <<EOF
{"links":[{"name":"gsx","a":"wa","b":"wb","delay_us_ab":$DELAY_US,"delay_us_ba":$DELAY_US}],
 "stats_path":"$WORK/stats.json","stats_interval_ms":500,"late_threshold_us":200,"seed":1}
EOF
ip netns exec gsx-w "$BIN" --config "$WORK/wanem.json" --check-config

start_wanem() {
    ip netns exec gsx-w "$BIN" --config "$WORK/wanem.json" --rt-priority "$RT" \
        --max-spin-percent "$SPIN" 2>>"$WORK/wanem.log" &
    WANEM_PID=$!
    sleep 0.3
    kill -0 "$WANEM_PID" || { cat "$WORK/wanem.log"; exit 1; }
}

stop_wanem() {
    local t0 rc=0
    t0=$(date +%s%N)
    kill -TERM "$WANEM_PID"
    wait "$WANEM_PID" || rc=$?
    WANEM_PID=""
    echo "  wanem stopped: exit code $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms after SIGTERM"
}

# A stats report on demand (SIGUSR1), plus the machine's CPU counters.
snapshot() {
    kill -USR1 "$WANEM_PID"
    sleep 0.1
    cp "$WORK/stats.json" "$WORK/$1.json"
    head -1 /proc/stat >"$WORK/$1.stat"
}

# Per direction: frames, late frames and lateness; wanem's and the machine's CPU
# between two snapshots.
report() {
    python3 - "$WORK/$1" "$WORK/$2" <<'EOF'
import json, sys
a, b = (json.load(open(p + ".json")) for p in sys.argv[1:3])
sa, sb = ([int(x) for x in open(p + ".stat").read().split()[1:]] for p in sys.argv[1:3])
d = [y - x for x, y in zip(sa, sb)]
busy = 1 - (d[3] + d[4]) / sum(d)
wall = b["uptime_s"] - a["uptime_s"]
print(f"  wanem CPU {(b['cpu_s'] - a['cpu_s']) / wall * 100:.0f}% of one core over {wall:.1f} s; "
      f"whole machine (2 cores) {busy * 100:.0f}% busy, softirq {d[6] / sum(d) * 100:.0f}%")
for la, lb in zip(a["links"], b["links"]):
    d = lambda k: lb[k] - la[k]
    n = d("tx_packets")
    print(f"  {lb['dir']}: {n} frames ({d('tx_bytes') / max(n, 1):.0f} B avg), "
          f"late>{b['late_threshold_us']}us {d('late')} ({d('late') / max(n, 1) * 100:.2f}%), "
          f"lateness mean {lb['mean_late_us']} p99 {lb['p99_late_us']} worst {lb['worst_late_us']} us, "
          f"thread CPU {d('cpu_s') / wall * 100:.0f}%, wake margin {lb['wake_margin_us']} us, "
          f"drops loss/overflow/socket {d('dropped_loss')}/{d('dropped_overflow')}/{d('rx_socket_drops')}, "
          f"tx_errors {d('tx_errors')}")
EOF
}

iperf() {
    local tag=$1 srv
    start_wanem
    ip netns exec gsx-b iperf3 -s -1 -p 5201 >/dev/null &
    srv=$!
    sleep 0.3
    snapshot "before-$tag"
    ip netns exec gsx-a iperf3 -c 10.99.0.2 -p 5201 -t "$SECS" -O 1 -J >"$WORK/iperf-$tag.json"
    snapshot "after-$tag"
    wait "$srv" || true
    python3 - "$WORK/iperf-$tag.json" <<'EOF'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
e = j["end"]
steady = statistics.median(i["sum"]["bits_per_second"] for i in j["intervals"] if not i["sum"]["omitted"])
print(f"  iperf3: {e['sum_received']['bits_per_second'] / 1e6:.0f} Mb/s received over the run "
      f"(first second omitted), median 1-s interval {steady / 1e6:.0f} Mb/s, "
      f"{e['sum_sent']['retransmits']} retransmits")
EOF
    report "before-$tag" "after-$tag"
    stop_wanem
}

echo "== ping (expect RTT ~ $((2 * DELAY_US / 1000)) ms)"
start_wanem
ip netns exec gsx-a ping -q -c 1 10.99.0.2 >/dev/null # resolve ARP first
snapshot before-ping
ip netns exec gsx-a ping -q -c 200 -i 0.02 10.99.0.2 | tail -2
snapshot after-ping
report before-ping after-ping
stop_wanem

echo "== iperf3, offloads on (GSO frames up to 64 KiB cross the delay line)"
iperf offload

echo "== iperf3, TSO/GSO/GRO off in gsx-a and gsx-b (one frame per MTU)"
for ns in gsx-a gsx-b; do ip netns exec "$ns" ethtool -K wan tso off gso off gro off; done
iperf mtu

echo "== logs and stats kept in $WORK"
