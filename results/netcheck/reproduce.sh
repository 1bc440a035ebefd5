#!/bin/sh
# Regenerates every netcheck result in this directory (as root, from the repository
# root, on a machine nobody else is loading; about 25 minutes on 2 cores):
#   sh results/netcheck/reproduce.sh [DATE-MACHINE]
# 1. the wizard gap at full rate: 1 Gb/s x 10 ms, untuned 170 KB hosts, 3 runs;
# 2. the g5k9 preset (rates / 10), every ordered site pair, next to seed 001's tables;
# 3. parallel flows on g5k9 rennes -> nancy (seed 001 Table 4's pair).
set -eu
export GRIDSPLIT_LAB_PREFIX=gnc
TAG=${1:-$(date +%F)-$(hostname -s)}
R=results/netcheck
REF=${GRIDSPLIT_REFERENCE:-../shared/reference}
trap 'gridsplit lab down >/dev/null 2>&1' EXIT

gridsplit lab down >/dev/null
gridsplit lab up --topology tests/data/netcheck/wizard2.toml
for i in 1 2 3; do
    gridsplit netcheck --lab --pairs bordeaux:lyon --streams 1,2,5,10 --duration 5 \
        --out $R/$TAG-wizard2-fullrate-run$i.json --png $R/wizard2-fullrate-run$i
done
gridsplit lab down >/dev/null

gridsplit lab up --topology g5k9 --no-gateways
gridsplit netcheck --lab --duration 4 --streams none --out $R/$TAG-g5k9-scaled.json --png $R/g5k9-scaled \
    --reference "$REF" --details 200
gridsplit netcheck --lab --pairs rennes:nancy --one-way --streams 1,2,5,10 --duration 5 \
    --out $R/$TAG-g5k9-scaled-parallel.json
gridsplit lab down >/dev/null
python3 $R/summarize.py $R/$TAG-*.json
