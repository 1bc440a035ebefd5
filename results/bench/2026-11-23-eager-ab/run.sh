#!/bin/bash
# Open MPI's eager limit, default (64 KiB) against 1 MiB, side by side: three
# rounds, each running the default file's repetition and then the eager one's
# (resume appends repetition k when --repeat k is given).
# Needs the paper lab up with 20 nodes:  GRIDSPLIT_LAB_PREFIX=gsx gridsplit lab up --topology paper --nodes 20
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=${GRIDSPLIT_LAB_PREFIX:-gsx}
for k in 1 2 3; do
  gridsplit bench gather --nodes 4,12,20 --sizes 100K,500K,1M --impl openmpi --repeat $k --budget 1 --no-report \
      --out default.jsonl
  gridsplit bench gather --nodes 4,12,20 --sizes 100K,500K,1M --impl openmpi --repeat $k --budget 1 --no-report \
      --out eager.jsonl --rank-env OMPI_MCA_btl_tcp_eager_limit=1048576
done
