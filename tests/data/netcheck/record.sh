#!/bin/sh
# Re-records the iperf3 JSON that tests/test_netcheck.py's rule tests read, from real
# runs in the lab (prefix gnc). Run as root from the repository root, on a quiet
# machine: sh tests/data/netcheck/record.sh   (about 2 minutes)
# Each file is {"context": what netcheck measured with it, "iperf3": iperf3's own -J output}.
set -eu
export GRIDSPLIT_LAB_PREFIX=gnc
D=tests/data/netcheck
T=$(mktemp -d)
trap 'gridsplit lab down >/dev/null 2>&1; rm -rf "$T"' EXIT

gridsplit lab down >/dev/null
# 1 Gb/s x 10 ms, untuned 170 KB hosts: window-limited; 10 parallel flows with tuned buffers.
gridsplit lab up --topology $D/wizard2.toml
gridsplit netcheck --lab --pairs bordeaux:lyon --one-way --streams 10 --duration 5 --keep-raw "$T/w" --details 0
cp "$T/w/bordeaux-lyon-untuned.json" $D/window_untuned_1g.json
cp "$T/w/bordeaux-lyon-parallel10.json" $D/parallel10.json
# A firewall (here: nothing listening): iperf3's own error JSON, wrapped like the rest.
ip netns exec gnc-bordeaux-1 iperf3 -J -c 10.71.2.1 -p 9 -t 1 > "$T/refused.json" || true
python3 -c "import json,sys,time; json.dump({'context': {'phase': 'untuned', 'note': 'iperf3 -c to a closed port', 'recorded': time.strftime('%Y-%m-%dT%H:%M:%S%z')}, 'iperf3': json.load(open(sys.argv[1]))}, open(sys.argv[2], 'w'), indent=1)" "$T/refused.json" $D/refused.json
gridsplit lab down >/dev/null

# A healthy 100 Mb/s x 10 ms path (switch buffers of one BDP), tuned: OK.
gridsplit lab up --topology $D/ok2.toml
gridsplit netcheck --lab --pairs bordeaux:lyon --one-way --streams none --duration 5 --keep-raw "$T/o" --details 0
cp "$T/o/bordeaux-lyon-tuned.json" $D/ok_tuned.json
gridsplit lab down >/dev/null

# 0.2 % random loss each way, tuned hosts: loss-limited.
gridsplit lab up --topology $D/lossy2.toml
gridsplit netcheck --lab --pairs bordeaux:lyon --one-way --streams none --duration 5 --keep-raw "$T/l" --details 0
cp "$T/l/bordeaux-lyon-tuned.json" $D/loss_tuned.json
echo "recorded: $(ls $D/*.json | tr '\n' ' ')"
