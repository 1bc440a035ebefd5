"""Split-mode time per gather (ms) and frames into the sending gateway, per variant and point."""
import json
import statistics
from collections import defaultdict
from pathlib import Path

from gridsplit.bench.units import fmt_size

here = Path(__file__).parent


def rows(path):
    return [r for r in (json.loads(l) for l in path.read_text().splitlines() if l.strip()) if r.get("kind") == "point"]


def port_frame(r):
    f = r.get("frames", {}).get("bordeaux switch → bordeaux-gw")
    return None if not f else f["bytes"] / f["packets"]


for title, d, variants in (("Main A/B (run.sh; interrupted in round 2)", here, ("old", "new")),
                           ("12 × 10K, which change (discriminate/run.sh)", here / "discriminate", ("old", "incast", "new"))):
    print(f"\n### {title}\n")
    by = defaultdict(dict)
    for v in variants:
        p = d / f"{v}.jsonl"
        if not p.exists():
            continue
        for r in rows(p):
            if r["mode"] == "split":
                by[(r["nodes"], r["size_bytes"])].setdefault(v, []).append(r)
    print("| point | " + " | ".join(f"{v}: ms per gather (runs)" for v in variants)
          + " | " + " | ".join(f"{v}: port frame (B)" for v in variants) + " |")
    print("|---|" + "---:|" * (2 * len(variants)))
    for (n, m), vs in sorted(by.items()):
        cells, frames = [], []
        for v in variants:
            rs = vs.get(v, [])
            t = [r["total_s"] / r["reps"] * 1e3 for r in rs]
            cells.append("-" if not t else ", ".join(f"{x:.1f}" for x in t))
            fr = [port_frame(r) for r in rs if port_frame(r)]
            frames.append("-" if not fr else f"{statistics.median(fr):.0f}")
        print(f"| {n} × {fmt_size(m)} | " + " | ".join(cells) + " | " + " | ".join(frames) + " |")
