#!/bin/sh
# A/B of the gateway hosts' pacing ratios (README.md here). Three rounds; in each,
# a fresh lab with the kernel's ratios, then one with gridsplit's, and the same
# small-to-mid gather sweep. Run from the repository root, nothing else running.
set -eu
out=results/bench/2026-11-22-wan-pacing-ratio-ab
export GRIDSPLIT_LAB_PREFIX=gsx
for r in 1 2 3; do
  for v in kernel tuned; do
    gridsplit lab down >/dev/null
    GRIDSPLIT_LAB_PACING_RATIO=$v gridsplit lab up --topology paper --nodes 12 >/dev/null
    gridsplit bench gather --topology paper --nodes 4,12 --sizes 1K,10K,100K --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
  done
done
gridsplit lab down
