#!/bin/bash
# Ping-pong, direct vs split, at scale 1 and at scale 10: the latency one crossing adds.
# (Run as written: results went to /tmp/sc and were copied into this directory.)
cd /work/main
export GRIDSPLIT_LAB_PREFIX=gsx
for s in 1 10; do
  gridsplit bench pingpong --topology paper --scale $s --sizes 8,1K,10K \
    --impl openmpi --repeat 3 --no-report --out /tmp/sc/pp-scale$s.jsonl
done
echo PPDONE
