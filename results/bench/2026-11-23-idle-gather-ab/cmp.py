"""Idle polling against halting (run.sh): per point and mode, time per gather and, in
split mode, the busier gateway's CPU and its two parts. Medians of 3 (min-max)."""
import json
import statistics
from pathlib import Path

here = Path(__file__).parent


def med(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


runs = {v: [r for r in map(json.loads, (here / f"{v}.jsonl").read_text().splitlines()) if r["kind"] == "point"]
        for v in ("poll", "halt")}
print("| point | idle | direct ms | split ms | busier gateway CPU % | of which softirq % | its own % |")
print("|---|---|---:|---:|---:|---:|---:|")
for n in (4, 20):
    for v in ("poll", "halt"):
        rs = [r for r in runs[v] if r["nodes"] == n]
        d = [r["total_s"] / r["reps"] * 1e3 for r in rs if r["mode"] == "direct"]
        sp = [r for r in rs if r["mode"] != "direct"]
        gw = [max(r["cpu"]["gateways"].values(), key=lambda g: g["pct"]) for r in sp]
        print(f"| {n} × 1M | {v} | {med(d)} | {med([r['total_s'] / r['reps'] * 1e3 for r in sp])} | "
              f"{med([g['pct'] for g in gw])} | {med([g['softirq_pct'] for g in gw])} | "
              f"{med([g['pct'] - g['softirq_pct'] for g in gw])} |")
