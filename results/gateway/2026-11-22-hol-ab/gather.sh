#!/bin/bash
# Does the low-water mark cost the gather anything? paper, 4 and 12 senders,
# 100K and 1M, old and new gridsplitd alternating, two rounds (README.md here).
# Run from the repository root: OLD=/path/to/old/gridsplitd results/gateway/2026-11-22-hol-ab/gather.sh
set -eu
dir=results/gateway/2026-11-22-hol-ab
export GRIDSPLIT_LAB_PREFIX=gsx
gridsplit lab down >/dev/null
gridsplit lab up --topology paper --nodes 12 >/dev/null
for round in 1 2; do
  for build in old new; do
    if [ "$build" = old ]; then export GRIDSPLITD="$OLD"; else unset GRIDSPLITD; fi
    python3 -c "from gridsplit.lab import realize; from gridsplit.lab.names import LabNames
realize.restart_gateways(realize.load_state(LabNames.from_env()))"
    gridsplit bench gather --topology paper --nodes 4,12 --sizes 100K,1M --impl openmpi --repeat 1 \
        --budget 1 --no-report --out "$dir/gather-$build-r$round.jsonl" >/dev/null
  done
done
unset GRIDSPLITD
gridsplit lab down >/dev/null
