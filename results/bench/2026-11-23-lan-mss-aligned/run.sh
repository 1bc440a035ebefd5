#!/bin/bash
# The gateway's LAN MSS aligned to the window unit (1420 offered, 1408-byte
# segments: one segment's window is exactly 11 units of 128) against the
# interface's (1448-byte segments, filled 1448 + 88 into a 1536-byte window).
# OLD: gridsplitd built from git 0f4dcde (interface MSS, incast `widest` from
# rcv_ssthresh); NEW: the working tree's (aligned MSS, `widest` from what was
# offered or from full segments seen). Three alternating rounds, each on a fresh
# paper lab (20 bordeaux nodes), Open MPI, 4/12/20 senders x 10K/100K/1M.
# ROUNDS and DIR (where old.jsonl and new.jsonl go) let with-delack/run.sh reuse it.
cd "${DIR:-$(dirname "$0")}"
export GRIDSPLIT_LAB_PREFIX=gsx
for k in $(seq 1 "${ROUNDS:-3}"); do
  for v in old new; do
    if [ $v = old ]; then export GRIDSPLITD=$OLD; else export GRIDSPLITD=$NEW; fi
    gridsplit lab down > /dev/null 2>&1
    gridsplit lab up --topology paper --nodes 20 > /dev/null
    gridsplit bench gather --nodes 4,12,20 --sizes 10K,100K,1M --impl openmpi --repeat $k --budget 1 --no-report \
        --out $v.jsonl
  done
done
gridsplit lab down > /dev/null
echo ALIGNDONE
