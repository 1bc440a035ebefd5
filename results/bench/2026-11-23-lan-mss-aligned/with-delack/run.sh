#!/bin/bash
# The aligned LAN MSS again, now with its delayed-ACK cap (gridsplitd offers
# 1420 and caps LAN delayed ACKs at 5 ms when [lan] mss and delack_max_us are
# unset) against gridsplitd at 0f4dcde. Alternating rounds on fresh paper labs
# (20 bordeaux nodes), Open MPI, 4/12/20 senders x 10K/100K/1M, --budget 1.
# OLD/NEW: the two gridsplitd binaries.
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx
for k in 1 2; do
  for v in old new; do
    if [ $v = old ]; then export GRIDSPLITD=$OLD; else export GRIDSPLITD=$NEW; fi
    gridsplit lab down > /dev/null 2>&1
    gridsplit lab up --topology paper --nodes 20 > /dev/null
    gridsplit bench gather --nodes 4,12,20 --sizes 10K,100K,1M --impl openmpi --repeat $k --budget 1 --no-report \
        --out $v.jsonl
  done
done
gridsplit lab down > /dev/null
echo DELACKDONE
