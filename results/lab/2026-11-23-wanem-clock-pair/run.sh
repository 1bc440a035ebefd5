#!/bin/bash
# The delay line's clock-offset reading, before (a plain realtime-monotonic pair per
# batch) and after (the tightest of a few bracketed reads), alternating on fresh mini
# labs with idle CPUs halting (the noisier setting): 3000 pings east-1 -> west-1 at
# 2 ms while an iperf3 flow crosses the same WAN link, times as ping prints them.
# OLD/NEW: the two gridsplit-wanem binaries. Writes V-K.txt (ping times, ms) and
# V-K.comp (the calibration's delay compensation, µs per direction). median-calibration/
# holds the first run, made while `lab up` still calibrated with the median of 30 probes;
# p10-calibration/ the second, with the 10th percentile of 50; the top level, the fastest of 50.
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx GRIDSPLIT_LAB_IDLE=halt
for k in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then export GRIDSPLIT_WANEM=$OLD; else export GRIDSPLIT_WANEM=$NEW; fi
    gridsplit lab up --topology mini > /dev/null
    gridsplit lab status --json | python3 -c "import json,sys; print(json.load(sys.stdin)['emulation']['delay_compensation_us'])" > $v-$k.comp
    ip netns exec gsx-west-1 iperf3 -s -1 -p 5399 > /dev/null 2>&1 &
    sleep 0.5
    ip netns exec gsx-east-2 iperf3 -c 10.71.2.1 -p 5399 -t 8 -C cubic > /dev/null 2>&1 &
    C=$!
    ip netns exec gsx-east-1 ping -i 0.002 -c 3000 10.71.2.1 | grep -o 'time=[0-9.]*' | cut -d= -f2 > $v-$k.txt
    wait $C
    gridsplit lab down > /dev/null
  done
done
