#!/bin/sh
# A/B of sub-segment LAN windows at 20 senders: clamps lifted when whole
# segments do not fit (lift: GRIDSPLIT_LAB_SUB_SEGMENT=0, the old behaviour)
# against sub-segment shares for narrow flows (sub: the default). Alternating
# rounds; README.md here. (nowide-r1.jsonl: the first try, which gave every
# flow a sub-segment share; kept for the stall it shows.)
set -eu
out=results/bench/2026-11-22-submss-ab
export GRIDSPLIT_LAB_PREFIX=gsx
for r in ${ROUNDS:-4 5}; do
  for v in ${VARIANTS:-lift sub}; do
    gridsplit lab down >/dev/null
    if [ "$v" = lift ]; then export GRIDSPLIT_LAB_SUB_SEGMENT=0; else export GRIDSPLIT_LAB_SUB_SEGMENT=1; fi
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes ${NODES:-4,20} --sizes ${SIZES:-10K,100K,1M} --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
  done
done
gridsplit lab down
