#!/bin/sh
# A/B of the incast tick's cost: gridsplitd as in sweep v4 (every 5 ms tick
# reads tcp_info, the MSS and the clamp of every LAN socket and re-divides;
# GRIDSPLITD=$OLD, a build of dd59366) against the cheap check (one getsockopt
# per socket, re-divide only when something changed; GRIDSPLITD=$NEW, not
# kept in the tree). Both binaries are named explicitly. README.md here.
set -eu
out=results/bench/2026-11-22-incast-tick-ab
export GRIDSPLIT_LAB_PREFIX=gsx
: "${OLD:?set OLD to a gridsplitd built at dd59366}"
: "${NEW:?set NEW to a gridsplitd with the settled check}"
for r in ${ROUNDS:-1 2}; do
  for v in every settled; do
    gridsplit lab down >/dev/null
    if [ $v = every ]; then export GRIDSPLITD=$OLD; else export GRIDSPLITD=$NEW; fi
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes 12,20 --sizes 10K,1M --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
  done
done
gridsplit lab down
