#!/bin/bash
# Does the gateways' real-time priority make the delay line late? Same points with the
# gateways at SCHED_FIFO 5 (the lab's default) and at normal priority, interleaved rounds.
cd /work/main
export GRIDSPLIT_LAB_PREFIX=gsx
D=results/bench/2026-11-23-delay-line-rt-ab
mkdir -p $D
for k in 1 2; do
  for rt in 5 0; do
    gridsplit lab down > /dev/null
    GRIDSPLIT_LAB_GATEWAY_RT=$rt gridsplit lab up --topology paper --nodes 20 > /dev/null
    GRIDSPLIT_LAB_GATEWAY_RT=$rt gridsplit bench gather --topology paper --nodes 4,12,20 --sizes 1K,1M \
      --impl openmpi --repeat $k --budget 1 --no-report --out $D/rt$rt.jsonl
  done
done
echo RTDONE
