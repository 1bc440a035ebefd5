#!/bin/sh
# The same A/B at 20 senders, where the clamps are lifted (one round; README.md here).
set -eu
out=results/bench/2026-11-22-initrwnd-ab
export GRIDSPLIT_LAB_PREFIX=gsx
for v in 0 1; do
  gridsplit lab down >/dev/null
  GRIDSPLIT_LAB_INITRWND=$v gridsplit lab up --topology paper --nodes 20 >/dev/null
  gridsplit bench gather --topology paper --nodes 20 --sizes 10K,100K,1M --impl openmpi \
      --repeat 1 --budget 1 --no-report --out "$out/n20-initrwnd$v-r1.jsonl"
done
gridsplit lab down
