"""Per variant and point: ms per gather, local retransmissions and timeouts, bordeaux gateway CPU, run by run. python3 cmp.py"""
import glob, json, statistics as st, os
d = os.path.dirname(os.path.abspath(__file__))
for v in ("base", "keep"):
    for pat, lab in (("%s-eager-r*.jsonl", "eager 20x100K split"), ("%s-r*.jsonl", "default")):
        rows = [json.loads(l) for f in sorted(glob.glob(os.path.join(d, pat % v))) for l in open(f)]
        pts = [r for r in rows if r["kind"] == "point"]
        by = {}
        for r in pts:
            by.setdefault((r["size_bytes"], r["mode"]), []).append(r)
        for k, rs in sorted(by.items()):
            t = [r["total_s"] / r["reps"] * 1e3 for r in rs]
            loc = [r["counters"]["traced"]["local"] for r in rs]
            print(v, lab, k, "ms", [round(x) for x in t], "local retrans", [x["retrans_segs"] for x in loc], "rto", [x["rto_timeouts"] for x in loc],
                  "gwcpu", [r["cpu"]["gateways"].get("bordeaux", {}).get("pct") for r in rs])
