#!/bin/bash
# Head-of-line A/B (README.md here): a 1 KB ping-pong east-2 <-> west-2 through
# the gateways, alone and while a bulk iperf3 flow east-1 -> west-1 shares the
# WAN link, for strategies fair and fifo, with the gridsplitd in $OLD (before the
# low-water mark) and this checkout's. Run from the repository root as root,
# nothing else running:  OLD=/path/to/old/gridsplitd results/gateway/2026-11-22-hol-ab/run.sh
set -eu
dir=results/gateway/2026-11-22-hol-ab
export GRIDSPLIT_LAB_PREFIX=gsx
P=$GRIDSPLIT_LAB_PREFIX; W=$PWD
PRE="env LD_PRELOAD=$W/build/libgridsplit.so GRIDSPLIT_CONFIG=/run/gridsplit/lab/$P/sites.toml"
ns() { ip netns exec "$P-$1" "${@:2}"; }
ping1k() { ns east-2 $PRE "$W/build/bench/relaybench" ping 10.71.2.2 6001 --count 200 --warmup 5 --size 1000; }
gridsplit lab down >/dev/null
gridsplit lab up --topology "$dir/slowwan.toml" >/dev/null
out="$dir/results.jsonl"; : > "$out"
for round in 1 2 3; do
  for build in old new; do
    for strategy in fair fifo; do
      if [ "$build" = old ]; then export GRIDSPLITD="$OLD"; else unset GRIDSPLITD; fi
      python3 -c "from gridsplit.lab import realize; from gridsplit.lab.names import LabNames
realize.restart_gateways(realize.load_state(LabNames.from_env()), strategy='$strategy')"
      ns west-2 $PRE "$W/build/bench/relaybench" server 10.71.2.2 6001 >/dev/null 2>&1 & srv=$!
      ns west-1 $PRE iperf3 -s -p 6002 -D -I /tmp/gsx-hol-iperf.pid --logfile /dev/null; sleep 0.5
      alone=$(ping1k)
      ns east-1 $PRE iperf3 -c 10.71.2.1 -p 6002 -t 10 -J > /tmp/gsx-hol-bulk.json & bulk=$!
      sleep 2
      loaded=$(ping1k)
      wait $bulk
      # The ping server exits with its one client; the iperf3 server is ours by pid.
      kill "$srv" "$(cat /tmp/gsx-hol-iperf.pid)" 2>/dev/null || true; wait "$srv" 2>/dev/null || true
      python3 - "$round" "$build" "$strategy" "$alone" "$loaded" >> "$out" <<'PY'
import json, sys
r, b, s, alone, loaded = sys.argv[1:]
bulk = json.load(open("/tmp/gsx-hol-bulk.json"))["end"]["sum_received"]["bits_per_second"]
print(json.dumps({"round": int(r), "build": b, "strategy": s, "alone": json.loads(alone)["rtt_us"],
                  "under_bulk": json.loads(loaded)["rtt_us"], "bulk_bps": bulk}))
PY
      tail -1 "$out"
    done
  done
done
unset GRIDSPLITD
gridsplit lab down >/dev/null
