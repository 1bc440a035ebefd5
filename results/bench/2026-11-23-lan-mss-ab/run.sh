#!/bin/sh
# A/B/C, alternating rounds (README.md here):
#   old     gridsplitd at 664fdc9 (sweep v4's), the interface's LAN MSS;
#   new     the window-clamp buffer fix (collect/incast.rs `clamp`), same MSS;
#   newmss  the fix plus a reduced LAN MSS (GRIDSPLIT_LAB_LAN_MSS=auto:
#           one whole segment per site node fits the switch port; initrwnd 2).
# first/: the first A/B (before the fix: base = old, mss = newmss without it).
set -eu
out=results/bench/2026-11-23-lan-mss-ab
OLD=${OLD:-/tmp/oldgw/target/release/gridsplitd}
NEW=${NEW:-$PWD/target/release/gridsplitd}
export GRIDSPLIT_LAB_PREFIX=gsx
for r in ${ROUNDS:-1 2 3}; do
  for v in ${VARIANTS:-old new newmss}; do
    gridsplit lab down >/dev/null
    case $v in
      old) export GRIDSPLITD=$OLD GRIDSPLIT_LAB_LAN_MSS=0 ;;
      new) export GRIDSPLITD=$NEW GRIDSPLIT_LAB_LAN_MSS=0 ;;
      newmss) export GRIDSPLITD=$NEW GRIDSPLIT_LAB_LAN_MSS=auto ;;
    esac
    gridsplit lab up --topology paper --nodes 20 >/dev/null
    gridsplit bench gather --topology paper --nodes ${NODES:-4,12,20} --sizes ${SIZES:-10K,100K,1M} --impl openmpi \
        --repeat 1 --budget 1 --no-report --out "$out/$v-r$r.jsonl"
  done
done
gridsplit lab down
