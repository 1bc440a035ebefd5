#!/bin/sh
# run_bench.sh LIB TESTBIN_DIR [N] - overhead of libgridsplit on calls it does not
# redirect (see tests/bench.c): once without LD_PRELOAD (both paths are libc, the
# difference is the noise floor) and once with it.
set -eu
LIB=$1
TB=$2
N=${3:-10000000}
env -u LD_PRELOAD "$TB/bench" "$N"
LD_PRELOAD="$LIB" GRIDSPLIT_CONFIG=/dev/null "$TB/bench" "$N"
