#!/bin/sh
# A/B, alternating rounds (README.md here): old (gridsplitd at 444fadd, sweep
# v5's clamps) against new (narrow flows widened to the smallest window, one
# at a time); 20 senders, Open MPI with its default eager limit and with 1 MiB.
set -eu
out=results/bench/2026-11-23-narrow-widen-ab
OLD=${OLD:-/tmp/gridsplitd.444fadd}
NEW=${NEW:-$PWD/target/release/gridsplitd}
export GRIDSPLIT_LAB_PREFIX=gsx
for r in ${ROUNDS:-1 2 3}; do
  for v in ${VARIANTS:-old new}; do
    gridsplit lab down >/dev/null
    if [ "$v" = old ]; then export GRIDSPLITD=$OLD; else export GRIDSPLITD=$NEW; fi
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes 20 --sizes ${SIZES:-10K,100K,1M} --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
    gridsplit bench gather --topology paper --nodes 20 --sizes 100K --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-eager-r$r.jsonl" \
        --rank-env OMPI_MCA_btl_tcp_eager_limit=1048576
  done
done
gridsplit lab down
