"""Per point: split/direct, split efficiency, and each mode's data-path hop with the shortest frames."""
import statistics
import sys
from pathlib import Path

from gridsplit.bench.report import data_path_frames
from gridsplit.bench.sweep import frame_ceiling, read_rows, summarize
from gridsplit.bench.units import fmt_size

here = Path(__file__).parent
for name in sys.argv[1:] or ["openmpi.jsonl", "mpich-default.jsonl", "mpich-eager.jsonl"]:
    rows = [r for r in read_rows(here / name) if r.get("kind") == "point"]
    if not rows:
        continue
    print(f"\n### {name}\n")
    print("| point | split/direct (min-max) | split eff. (min-max) | direct eff. | direct: shortest frames | "
          "split: shortest frames | delay line behind (runs) |")
    print("|---|---:|---:|---:|---|---|---:|")
    for s in summarize(rows):
        pts = [r for r in rows if (r["impl"], r["nodes"], r["size_bytes"]) == (s["impl"], s["nodes"], s["size_bytes"])]
        cells = []
        for mode in ("direct", "split"):
            hop = data_path_frames([r for r in pts if r["mode"] == mode])
            cells.append("-" if hop is None else f"{hop[1]:.0f} B at {hop[0]} (ceiling {frame_ceiling(hop[1]):.2f})")
        effs = [r["efficiency"] for r in pts if r["mode"] == "split"]
        deff = statistics.median(r["efficiency"] for r in pts if r["mode"] == "direct")
        behind = sum(1 for r in pts if r.get("emulator") and (r["emulator"]["late_fraction"] > 0.02 or r["emulator"]["stall"]))
        print(f"| {s['impl']} {s['nodes']} × {fmt_size(s['size_bytes'])} | {s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f}) | "
              f"{statistics.median(effs):.2f} ({min(effs):.2f}-{max(effs):.2f}) | {deff:.2f} | {cells[0]} | {cells[1]} | "
              f"{behind} of {len(pts)} |")
