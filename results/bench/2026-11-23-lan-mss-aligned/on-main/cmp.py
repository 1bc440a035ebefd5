"""Old (main) against new (aligned LAN MSS + 5 ms delayed-ACK cap), five rounds:
per point, split mode's time per gather, split/direct of each round's side-by-side
pair, the busier gateway's CPU, and the data path's shortest frames. Medians (min-max)."""
import json
import statistics
from pathlib import Path

from gridsplit.bench.report import data_path_frames
from gridsplit.bench.sweep import frame_ceiling
from gridsplit.bench.units import fmt_size
from gridsplit.lab.queues import fell_behind

here = Path(__file__).parent
runs = {v: [r for r in map(json.loads, (here / f"{v}.jsonl").read_text().splitlines()) if r["kind"] == "point"]
        for v in ("old", "new")}


def med(xs, f="{:.1f}"):
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))})" if xs else "-"


def ms(r):
    return r["total_s"] / r["reps"] * 1e3


print("| point | old: split ms | new: split ms | old: split/direct | new: split/direct | old: gw CPU % | new: gw CPU %"
      " | old: frame B (ceiling) | new: frame B (ceiling) | runs kept on schedule, old/new |")
print("|---|" + "---:|" * 9)
for n in (4, 12, 20):
    for m in (10_000, 100_000, 1_000_000):
        t, ratio, cpu, frame, kept = [], [], [], [], []
        for v in ("old", "new"):
            pt = [r for r in runs[v] if r["nodes"] == n and r["size_bytes"] == m]
            split = {r["repeat"]: r for r in pt if r["mode"] == "split"}
            direct = {r["repeat"]: r for r in pt if r["mode"] == "direct"}
            t.append(med([ms(r) for r in split.values()]))
            ratio.append(med([ms(split[k]) / ms(direct[k]) for k in split if k in direct], "{:.2f}"))
            cpu.append(med([max(g["pct"] for g in r["cpu"]["gateways"].values()) for r in split.values()]))
            q, mean = data_path_frames(list(split.values()))
            frame.append(f"{mean:.0f} ({frame_ceiling(mean):.2f})")
            kept.append(str(sum(not fell_behind(r["emulator"]) for r in split.values())))
        print(f"| {n} × {fmt_size(m)} | " + " | ".join(t + ratio + cpu + frame) + f" | {'/'.join(kept)} of 5 |")
