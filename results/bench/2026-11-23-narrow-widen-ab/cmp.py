"""Old against new, medians over rounds (min-max): split time per gather, split/direct,
local retransmissions and timeouts, and the receiving gateway's CPU (of which softirq).
Usage: python3 cmp.py [DIR]"""
import glob, json, os, statistics as st, sys
from collections import defaultdict

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def rows(pattern):
    out = defaultdict(lambda: defaultdict(list))
    for f in sorted(glob.glob(os.path.join(d, pattern))):
        for l in open(f):
            r = json.loads(l)
            if r["kind"] == "point":
                out[(r["nodes"], r["size_bytes"])][r["mode"]].append(r)
    return out


def med(xs, fmt):
    xs = [x for x in xs if x is not None]
    return f"{fmt(st.median(xs))} ({fmt(min(xs))}-{fmt(max(xs))})" if xs else "-"


for label, pat in (("default eager limit", "{v}-r*.jsonl"), ("eager limit 1 MiB", "{v}-eager-r*.jsonl")):
    print(f"## {label}")
    print("| point | variant | split ms/gather | split/direct | local retrans | local RTOs | bordeaux gw CPU % | of which softirq % |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for v in ("old", "new"):
        for k, by in sorted(rows(pat.format(v=v)).items()):
            sp, dr = by["split"], by["direct"]
            ratio = [s["total_s"] / x["total_s"] for s, x in zip(sp, dr)]
            loc = [r["counters"]["traced"]["local"] for r in sp]
            gw = [r["cpu"]["gateways"]["bordeaux"] for r in sp]
            print(f"| {k[0]} x {k[1] // 1000}K | {v} | {med([r['total_s'] / r['reps'] * 1e3 for r in sp], lambda x: f'{x:.1f}')} "
                  f"| {med(ratio, lambda x: f'{x:.2f}')} | {med([x['retrans_segs'] for x in loc], lambda x: f'{x:g}')} "
                  f"| {med([x['rto_timeouts'] for x in loc], lambda x: f'{x:g}')} | {med([g['pct'] for g in gw], lambda x: f'{x:.1f}')} "
                  f"| {med([g.get('softirq_pct') for g in gw], lambda x: f'{x:.1f}')} |")
    print()
