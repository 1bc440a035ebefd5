"""Ping times (ms) per lab build: calibration, minimum, 1st percentile, median, probes under the configured RTT."""
import statistics
from pathlib import Path

here = Path(__file__).parent
print("| calibration | binary | run | compensation (µs) | pings | min | 1st pct | median | under 10.0 ms | under 9.9 ms |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for sub, name in (("median-calibration", "median of 30"), ("p10-calibration", "10th pct of 50"), (".", "fastest of 50")):
    for f in sorted((here / sub).glob("*.txt")):
        v = sorted(float(x) for x in f.read_text().split())
        comp = f.with_suffix(".comp")
        c = comp.read_text().strip() if comp.exists() else "not recorded"
        binary, run = f.stem.split("-")
        print(f"| {name} | {binary} | {run} | {c} | {len(v)} | {v[0]:.2f} | {v[len(v) // 100]:.2f} | "
              f"{statistics.median(v):.2f} | {sum(x < 10.0 for x in v)} | {sum(x < 9.9 for x in v)} |")
