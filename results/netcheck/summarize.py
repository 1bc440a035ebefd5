"""Key figures of netcheck reports, for results/netcheck/*.md: medians and min-max over cells and runs.

Usage: python3 results/netcheck/summarize.py REPORT.json ... [--reference ../shared/reference]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def stat(xs: list[float]) -> str:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return "-"
    return f"median {statistics.median(xs):.3g}, min-max {xs[0]:.3g}-{xs[-1]:.3g} (n={len(xs)})"


def main(argv: list[str]) -> None:
    ref_dir = None
    if "--reference" in argv:
        i = argv.index("--reference")
        ref_dir = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    groups: dict[str, list[dict]] = {}
    for p in argv:
        rep = json.loads(Path(p).read_text())
        key = Path(p).name.split("-run")[0]
        groups.setdefault(key, []).append(rep)
    for key, reps in groups.items():
        cells = [c for r in reps for c in r["cells"] if c.get("status") != "unmeasured"]
        print(f"## {key}: {len(reps)} run(s), {len(cells)} measured cells; machine {reps[0]['machine']['cpu']}, "
              f"{reps[0]['machine']['cores']} cores, kernel {reps[0]['machine']['kernel']}, "
              f"load at start {[r['machine']['loadavg_1m_at_start'] for r in reps]}")
        for phase in ("untuned", "tuned"):
            fr = [c["diagnosis"][phase].get("fraction") for c in cells]
            gp = [(c.get(phase) or {}).get("goodput_mbps") for c in cells]
            v = Counter(c["diagnosis"][phase]["verdict"] for c in cells)
            late = [((c.get(phase) or {}).get("emulator") or {}).get("late_fraction") for c in cells]
            print(f"- {phase}: goodput Mb/s {stat(gp)}; fraction of achievable {stat(fr)}; verdicts {dict(v)}; "
                  f"delay-line late frames {stat(late)}")
        ratio = [c["tuned"]["goodput_mbps"] / c["untuned"]["goodput_mbps"] for c in cells
                 if (c.get("tuned") or {}).get("goodput_mbps") and (c.get("untuned") or {}).get("goodput_mbps")]
        print(f"- tuned / untuned in the same run: {stat(ratio)}")
        rtt_err = [abs(c["rtt"]["median_ms"] - r["target"]["topology"]["wan"][0]["delay_ms_ab"] * 2)
                   for r in reps for c in r["cells"] if "median_ms" in (c.get("rtt") or {}) and len(r["target"].get("topology", {}).get("wan", [])) == 1]
        if rtt_err:
            print(f"- |RTT median - configured| ms: {stat(rtt_err)}")
        par: dict[int, list] = {}
        for c in cells:
            for p in c.get("parallel", []):
                if "error" not in p:
                    par.setdefault(p["streams"], []).append(p)
        for n, ps in sorted(par.items()):
            print(f"- {n} streams: aggregate {stat([p['goodput_mbps'] for p in ps])}; "
                  f"Jain {stat([p['jain'] for p in ps])}; retransmits {stat([p['retransmits'] for p in ps])}")
        if ref_dir:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
            from gridsplit.netcheck.render import read_reference
            ref = read_reference(ref_dir)
            for phase in ("untuned", "tuned"):
                seed = [ref[phase].get((c["src_site"], c["dst_site"])) for c in cells]
                seed = [s / 941 for s in seed if s]
                if seed:
                    print(f"- seed 001 {phase}, fraction of 941 Mb/s on the same pairs: {stat(seed)}")


def side_by_side(path: str, ref_dir: str, phase: str) -> str:
    """A markdown matrix (row = destination, column = source): ours (rates / scale) / the seed's, as % of capacity."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from gridsplit.netcheck.render import read_reference
    rep = json.loads(Path(path).read_text())
    ref = read_reference(ref_dir)
    cells = {(c["src_site"], c["dst_site"]): c for c in rep["cells"]}
    sites = rep["sites"]
    key = {"rtt": "rtt", "untuned": "untuned", "tuned": "tuned"}[phase]
    lines = ["| dst \\ src | " + " | ".join(s[:5] for s in sites) + " |", "|---" * (len(sites) + 1) + "|"]
    for d in sites:
        row = [f"**{d}**"]
        for s_ in sites:
            c = cells.get((s_, d))
            if s_ == d or c is None:
                row.append("")
                continue
            seed = ref.get(key, {}).get((s_, d))
            if phase == "rtt":
                row.append(f"{c['rtt'].get('avg_ms', 0):.1f} / {seed:.1f}" if seed else f"{c['rtt'].get('avg_ms', 0):.1f}")
            else:
                f = (c["diagnosis"][phase].get("fraction") or 0) * 100
                row.append(f"{f:.0f} / {seed / 9.41:.0f}" if seed else f"{f:.0f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--markdown":
        print(side_by_side(sys.argv[2], sys.argv[3], sys.argv[4]))
        sys.exit(0)
    main(sys.argv[1:])
