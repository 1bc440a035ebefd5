#!/bin/bash
# Idle CPUs polling (the delay line holds a 0 µs PM QoS request, the lab's default
# since this change) against halting (GRIDSPLIT_LAB_IDLE=halt), alternating, each
# on a freshly built mini lab: `lab check --json` (5 s per measurement).
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx
for k in 1 2 3 4; do
  for v in halt poll; do
    GRIDSPLIT_LAB_IDLE=$v gridsplit lab up --topology mini > /dev/null
    gridsplit lab check --json --seconds 5 > $v-$k.json
    gridsplit lab down > /dev/null
  done
done
