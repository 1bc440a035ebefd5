#!/bin/bash
# (1) Open MPI at 12 and 20 senders x 10K/100K/1M, K = 3: the frames each lab queue
#     carried (row field `frames`), to measure the sending gateway's short frames.
# (2) MPICH at 4 senders x 100K, UCX's rendezvous threshold default against 1 MiB
#     (every message of this size eager), three alternating rounds.
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx
gridsplit lab up --topology paper --nodes 20 > /dev/null
gridsplit bench gather --nodes 12,20 --sizes 10K,100K,1M --impl openmpi --repeat 3 --budget 1 --no-report \
    --out openmpi.jsonl
for k in 1 2 3; do
  gridsplit bench gather --nodes 4 --sizes 100K --impl mpich --repeat $k --budget 1 --no-report --out mpich-default.jsonl
  gridsplit bench gather --nodes 4 --sizes 100K --impl mpich --repeat $k --budget 1 --no-report --out mpich-eager.jsonl \
      --rank-env UCX_RNDV_THRESH=1048576
done
gridsplit lab down > /dev/null
echo FRAMESDONE
