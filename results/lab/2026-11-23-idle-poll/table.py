"""Late frames, worst lateness, steal and WAN throughput per `lab check` run, by idle setting."""
import json
import statistics
import sys
from pathlib import Path

here = Path(__file__).parent
for v in ("halt", "poll"):
    runs = [json.loads(f.read_text()) for f in sorted(here.glob(f"{v}-*.json"))]
    print(f"## {v}: {len(runs)} checks")
    print("| run | late frames | worst (ms) | steal (ms) | WAN throughput | check |")
    print("|---|---:|---:|---:|---:|---|")
    for i, r in enumerate(runs, 1):
        e = r["emulator"]
        wan = next(t for t in r["throughput"] if t["rtt_ms"] > 0)
        print(f"| {i} | {e['late_fraction']:.1%} | {e['worst_late_us'] / 1000:.1f} | {e['steal_ms']:.0f} | "
              f"{wan['fraction']:.1%} | {'ok' if r['ok'] else 'FAIL'} |")
    lf = [r["emulator"]["late_fraction"] for r in runs]
    print(f"\nmedian late {statistics.median(lf):.1%} (min-max {min(lf):.1%}-{max(lf):.1%}); "
          f"{sum(r['ok'] for r in runs)} of {len(runs)} checks passed\n")
