#!/usr/bin/env bash
# Single-machine acceptance test behind `make -C mpi test`: runs every
# benchmark with 4 ranks under MPICH and Open MPI with --check and small
# sizes, and also proves the negative paths (corrupted payload -> exit 1 and
# verified:false, bad flag -> exit 2), so a green run means the verifier can
# actually fail. Each launch is capped at 120 s.
set -u

BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build/mpi}
NP=4
SIZES=0,1,1K,100K
NSIZES=4
REPS=20
WARMUP=2
T="timeout 120"

ROOTFLAG=()
[ "$(id -u)" = 0 ] && ROOTFLAG=(--allow-run-as-root)
launcher() { # impl -> launch command, one word per line
    case $1 in
    mpich) printf '%s\n' mpiexec.mpich -n "$NP" ;; # hydra forwards the environment
    openmpi)
        printf '%s\n' mpirun.openmpi "${ROOTFLAG[@]}" --oversubscribe \
            --mca pml ob1 --mca btl tcp,self,vader -n "$NP"
        ;;
    esac
    return 0
}

pass=0
fail=0
ok() { pass=$((pass + 1)); printf 'ok    %s\n' "$1"; }
ko() { fail=$((fail + 1)); printf 'FAIL  %s\n' "$1"; [ -n "${2:-}" ] && sed 's/^/      | /' "$2" | head -20; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# check_json FILE IMPL OP VERIFIED NLINES: every stdout line is one JSON
# object with the expected fields and verdict, and there are NLINES of them.
check_json() {
    python3 - "$@" <<'EOF'
import json, sys
path, impl, op, verified, nlines = sys.argv[1:6]
want = {"true": True, "false": False}[verified]
lines = [l for l in open(path).read().splitlines() if l.strip()]
assert len(lines) == int(nlines), f"{len(lines)} lines, want {nlines}"
keys = {"op", "impl", "impl_version", "ranks", "size_bytes", "reps", "warmup",
        "timing", "total_s", "mean_s", "min_s", "median_s", "max_s", "verified"}
for l in lines:
    d = json.loads(l)
    missing = keys - d.keys()
    assert not missing, f"missing {missing}"
    assert d["op"] == op and d["impl"] == impl, l
    assert d["verified"] is want, f"verified={d['verified']}"
    assert d["ranks"] == 4 and d["reps"] == 20 and d["warmup"] == 2, l
    assert 0 <= d["min_s"] <= d["median_s"] <= d["max_s"], l
    assert d["impl_version"], l
    if op == "pingpong":
        assert "bandwidth_MBps" in d, l
EOF
}

run_case() { # impl prog op(for report) extra-args...
    local impl=$1 prog=$2 op=$3
    shift 3
    local name="$impl $op" log="$OUT/$impl-$op"
    mapfile -t L < <(launcher "$impl")
    $T "${L[@]}" "$BUILD/$impl/$prog" "$@" -s $SIZES -r $REPS -w $WARMUP --check \
        >"$log.out" 2>"$log.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
        ko "$name: exit $rc" "$log.err"
        return
    fi
    if check_json "$log.out" "$impl" "$op" true $NSIZES 2>"$log.py"; then
        ok "$name: $NSIZES sizes verified"
    else
        cat "$log.out" >>"$log.py"
        ko "$name: bad output" "$log.py"
    fi
}

run_fault() { # a corrupted payload must give exit 1 and verified:false
    local impl=$1 prog=$2 op=$3
    shift 3
    local name="$impl $op fault-injection" log="$OUT/$impl-$op-fault"
    mapfile -t L < <(launcher "$impl")
    $T "${L[@]}" "$BUILD/$impl/$prog" "$@" -s 1K -r $REPS -w $WARMUP \
        --check --inject-fault >"$log.out" 2>"$log.err"
    local rc=$?
    if [ $rc -ne 1 ]; then
        ko "$name: exit $rc, want 1" "$log.err"
    elif ! check_json "$log.out" "$impl" "$op" false 1 2>"$log.py"; then
        ko "$name: bad output" "$log.py"
    elif ! grep -q "wrong at byte" "$log.err"; then
        ko "$name: no diagnostic on stderr" "$log.err"
    else
        ok "$name: detected"
    fi
}

for impl in mpich openmpi; do
    for p in gather pingpong; do
        run_case "$impl" "$p" "$p"
        run_fault "$impl" "$p" "$p"
    done
    for op in scatter bcast alltoall gather_mpi halo; do
        run_case "$impl" coll "$op" -o "$op"
        run_fault "$impl" coll "$op" -o "$op"
    done

    # OSU mode: header lines start with '#', one row per size, all "pass".
    mapfile -t L < <(launcher "$impl")
    log="$OUT/$impl-osu"
    if $T "${L[@]}" "$BUILD/$impl/gather" --osu -s $SIZES -r $REPS -w $WARMUP --check \
        >"$log.out" 2>"$log.err" &&
        [ "$(grep -vc '^#' "$log.out")" = $NSIZES ] &&
        [ "$(grep -v '^#' "$log.out" | grep -c ' pass$')" = $NSIZES ]; then
        ok "$impl gather --osu"
    else
        ko "$impl gather --osu" "$log.out"
    fi

    # Bad flag: exit 2 and exactly one line from the program on stderr.
    log="$OUT/$impl-usage"
    $T "${L[@]}" "$BUILD/$impl/gather" -s 12Q >"$log.out" 2>"$log.err"
    rc=$?
    if [ $rc = 2 ] && [ "$(grep -c '^gather: ' "$log.err")" = 1 ] && [ ! -s "$log.out" ]; then
        ok "$impl bad flag: exit 2, one line"
    else
        ko "$impl bad flag: exit $rc" "$log.err"
    fi
done

# The study's traffic is TCP: make sure MPICH's UCX TCP path works too.
mapfile -t L < <(launcher mpich)
log="$OUT/mpich-tcp"
# MPICH 4.0.2 can hang in MPI_Finalize (pmodels/mpich#6596, see README): over
# UCX's TCP transport it hung in 2 of 9 runs of this command on 2026-11-22, after
# printing every result. The run takes 1.5 s, so each attempt gets 30 s and a
# hang (exit 124) is tried again, up to three attempts; any other failure, or a
# third hang, fails the test with what the run printed.
mpich_tcp() {
    UCX_TLS=tcp,self timeout 30 "${L[@]}" "$BUILD/mpich/gather" -s $SIZES -r $REPS -w $WARMUP --check \
        >"$log.out" 2>"$log.err"
    local rc=$?
    [ $rc = 0 ] || { echo "exit $rc" >>"$log.err"; return $rc; }
    check_json "$log.out" mpich gather true $NSIZES 2>>"$log.err"
}
for attempt in 1 2 3; do
    mpich_tcp
    rc=$?
    [ $rc = 124 ] && [ $attempt -lt 3 ] || break
    echo "      (attempt $attempt timed out: MPICH finalize hang; trying again)"
done
if [ $rc = 0 ]; then
    ok "mpich gather over UCX_TLS=tcp,self"
else
    ko "mpich gather over UCX_TLS=tcp,self" "$log.err"
fi

# gridsplit model programs (issue 6): collalgo runs every modelled algorithm
# with --check at 1, 4 and 5 ranks (5: trees that are not complete), and
# catches a corrupted payload; plogp prints one valid line per size.
ALGOS=$("$BUILD/openmpi/collalgo" --help 2>/dev/null | sed -n 's/.*one of: \(.*\) (default.*/\1/p' | tr ' ' ',')
NALGOS=$(echo "$ALGOS" | tr ',' '\n' | grep -c .)
for impl in mpich openmpi; do
    for np in 1 4 5; do
        mapfile -t L < <(NP=$np launcher "$impl")
        log="$OUT/$impl-collalgo-$np"
        if $T "${L[@]}" "$BUILD/$impl/collalgo" -o "$ALGOS" -s 1,1000,70001 --seg 1,333,7000 -r 3 -w 1 --check \
            >"$log.out" 2>"$log.err" && [ "$NALGOS" -ge 18 ] &&
            [ "$(grep -c '"verified":true' "$log.out")" = $((NALGOS * 3)) ]; then
            ok "$impl collalgo: $NALGOS algorithms x 3 sizes verified on $np ranks"
        else
            ko "$impl collalgo on $np ranks" "$log.err"
        fi
    done
    mapfile -t L < <(launcher "$impl")
    log="$OUT/$impl-collalgo-fault"
    $T "${L[@]}" "$BUILD/$impl/collalgo" -o bcast_seg_chain,scatter_binomial,gather_chain \
        -s 1000 --seg 300 -r 2 --check --inject-fault >"$log.out" 2>"$log.err"
    rc=$?
    if [ $rc = 1 ] && [ "$(grep -c '"verified":false' "$log.out")" = 3 ]; then
        ok "$impl collalgo fault-injection: detected"
    else
        ko "$impl collalgo fault-injection: exit $rc" "$log.out"
    fi
    mapfile -t L < <(NP=2 launcher "$impl")
    log="$OUT/$impl-plogp"
    if $T "${L[@]}" "$BUILD/$impl/plogp" -s 1,1000,100000 -r 10 --refine 0 >"$log.out" 2>"$log.err" &&
        python3 - "$log.out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
pts = [r for r in rows if r["op"] == "plogp"]
assert [r["size_bytes"] for r in pts] == [0, 1, 1000, 100000], pts
for r in pts:
    for q in ("rtt_s", "os_s", "or_s", "g_s"):
        e = r[q]
        assert 0 <= e["ci_lo"] <= e["median"] <= e["ci_hi"] and e["n"] >= 8, (q, e)
assert rows[-1]["op"] == "plogp_L" and rows[-1]["L_s"] > 0
assert pts[-1]["g_s"]["median"] > pts[1]["g_s"]["median"]  # 100 KB cost more than 1 B
PY
    then
        ok "$impl plogp: 4 sizes, medians inside their CIs"
    else
        ko "$impl plogp" "$log.err"
    fi
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
