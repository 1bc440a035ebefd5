#!/bin/sh
# Second A/B, alternating rounds (README.md here): old (gridsplitd at 664fdc9,
# sweep v4's) against widen (an intermediate build: roomy buffers for grown
# whole-segment shares, young sockets held narrow, narrow grown flows widened
# as many at a time as the budget has room for; collect/incast.rs). The
# interface's MSS.
set -eu
out=results/bench/2026-11-23-lan-mss-ab
OLD=${OLD:-/tmp/oldgw/target/release/gridsplitd}
NEW=${NEW:-$PWD/target/release/gridsplitd}
export GRIDSPLIT_LAB_PREFIX=gsx GRIDSPLIT_LAB_LAN_MSS=0
for r in ${ROUNDS:-3 4 5}; do
  for v in ${VARIANTS:-old widen}; do
    gridsplit lab down >/dev/null
    if [ "$v" = old ]; then export GRIDSPLITD=$OLD; else export GRIDSPLITD=$NEW; fi
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes ${NODES:-4,12,20} --sizes ${SIZES:-10K,100K,1M} --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
  done
done
gridsplit lab down
