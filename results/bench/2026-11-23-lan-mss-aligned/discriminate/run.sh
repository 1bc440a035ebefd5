#!/bin/bash
# 12 x 10K, the one point where the aligned MSS build was slower in both rounds
# of ../run.sh: which of its two changes? old (0f4dcde), incast (the `widest`
# change only: alignment compiled out), new (both). Three alternating rounds.
cd "$(dirname "$0")"
export GRIDSPLIT_LAB_PREFIX=gsx
for k in 1 2 3; do
  for v in old incast new; do
    case $v in old) export GRIDSPLITD=$OLD;; incast) export GRIDSPLITD=$INC;; new) export GRIDSPLITD=$NEW;; esac
    gridsplit lab down > /dev/null 2>&1
    gridsplit lab up --topology paper --nodes 20 > /dev/null
    gridsplit bench gather --nodes 12 --sizes 10K --impl openmpi --repeat $k --budget 1 --no-report --out $v.jsonl
  done
done
gridsplit lab down > /dev/null
echo DISCDONE
