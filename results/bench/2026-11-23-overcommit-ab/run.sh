#!/bin/sh
# A/B, alternating (README.md here): base = gridsplitd at 1ab9580 (an
# overcommitted division lifts the LAN clamps), keep = the commit that adds
# this directory (it keeps the smallest usable clamps). 20 senders, Open MPI:
# 100K split with the eager limit at 1 MiB (3 runs), then 10K/100K/1M both
# modes with the default setting; two rounds.
set -eu
cd "$(dirname "$0")"
BASE=${BASE:-/tmp/gridsplitd.base}
KEEP=${KEEP:-/tmp/gridsplitd.keep}
export GRIDSPLIT_LAB_PREFIX=gsx
for r in 1 2; do
  for v in base keep; do
    gridsplit lab down >/dev/null
    if [ "$v" = base ]; then export GRIDSPLITD=$BASE; else export GRIDSPLITD=$KEEP; fi
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes 20 --sizes 100K --impl openmpi --modes split \
        --repeat 3 --budget 1 --no-report --out "$v-eager-r$r.jsonl" --rank-env OMPI_MCA_btl_tcp_eager_limit=1048576
    gridsplit bench gather --topology paper --nodes 20 --sizes 10K,100K,1M --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$v-r$r.jsonl"
  done
done
gridsplit lab down
