#!/bin/bash
# Does the lab's idle polling (GRIDSPLIT_LAB_IDLE=poll, the default since
# 0f4dcde) change the gateways' measured CPU? Sweep v8 (polling) read 1-7 points
# more than v7 (halting) with the same gateways. Three alternating rounds, each
# on a fresh paper lab (20 bordeaux nodes), Open MPI, 4 and 20 senders x 1M,
# both modes, --budget 1.
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx
for k in 1 2 3; do
  for v in poll halt; do
    export GRIDSPLIT_LAB_IDLE=$v
    gridsplit lab down > /dev/null 2>&1
    gridsplit lab up --topology paper --nodes 20 > /dev/null
    gridsplit bench gather --nodes 4,20 --sizes 1M --impl openmpi --repeat $k --budget 1 --no-report --out $v.jsonl
  done
done
gridsplit lab down > /dev/null
echo IDLEDONE
