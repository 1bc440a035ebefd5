"""Medians of 3 paired runs per point, default against eager (python3 cmp.py [DIR])."""
import json, os, sys, statistics as st
from collections import defaultdict
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
res = {}
for f in ("default", "eager"):
    g = defaultdict(list)
    for l in open(f"{d}/{f}.jsonl"):
        r = json.loads(l)
        if r["kind"] == "point":
            g[(r["nodes"], r["size_bytes"], r["mode"])].append(r)
    res[f] = g
print("nodes size | default: direct split ratio eff_split | eager: direct split ratio eff_split  (medians, K; ratio min-max)")
for k in sorted({(n, s) for (n, s, m) in res["default"]}):
    out = []
    for f in ("default", "eager"):
        dr = sorted(res[f][k + ("direct",)], key=lambda r: r["repeat"]); sp = sorted(res[f][k + ("split",)], key=lambda r: r["repeat"])
        ratios = [s["total_s"] / x["total_s"] for x, s in zip(dr, sp)]
        out.append(f"{st.median(r['total_s']/r['reps']*1e3 for r in dr):7.1f} {st.median(r['total_s']/r['reps']*1e3 for r in sp):7.1f} ms "
                   f"{st.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) eff {st.median(r['efficiency'] for r in sp):.2f} "
                   f"({min(r['efficiency'] for r in sp):.2f}-{max(r['efficiency'] for r in sp):.2f}) K={len(ratios)}")
    print(k, " | ".join(out))
