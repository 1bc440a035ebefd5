#!/bin/sh
# A/B of the gateway hosts' one-segment initial receive window (README.md here).
# Two rounds; in each, a fresh lab with the kernel's default (10 segments), then
# one with gridsplit's (1), and the same sweep. Run from the repository root,
# nothing else running.
set -eu
out=results/bench/2026-11-22-initrwnd-ab
export GRIDSPLIT_LAB_PREFIX=gsx
for r in 1 2; do
  for v in 0 1; do
    gridsplit lab down >/dev/null
    GRIDSPLIT_LAB_INITRWND=$v gridsplit lab up --topology paper --nodes 12 >/dev/null
    gridsplit bench gather --topology paper --nodes 4,12 --sizes 10K,100K,1M --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/initrwnd$v-r$r.jsonl"
  done
done
gridsplit lab down
