#!/bin/bash
# Interleaved rounds: scale 10 (default) vs scale 1, small gathers, Open MPI.
# (Run as written: results went to /tmp/sc and were copied into this directory.)
cd /work/main
export GRIDSPLIT_LAB_PREFIX=gsx
for k in 1 2 3; do
  for s in 10 1; do
    gridsplit bench gather --topology paper --scale $s --nodes 4,12,20 --sizes 1K,10K \
      --impl openmpi --repeat $k --no-report --out /tmp/sc/scale$s.jsonl
  done
done
gridsplit lab down
echo DONE
