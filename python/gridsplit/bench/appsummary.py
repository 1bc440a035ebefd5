"""`gridsplit bench app` runs summarised: per (app, impl, split variant), medians of each
mode's time, the per-round split/direct ratios (median, min-max) and correctness. Data
only (no rendering), so that the model's validation reads it without the report."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any

from .results import median_of, variant_tag


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok"]


def outcome_diff(direct: list[dict], split: list[dict]) -> dict[str, Any] | None:
    """Tests whose outcome differs between runs (mpi4py): test id -> {mode: sorted outcomes seen}."""
    runs = [r for r in direct + split if r.get("tests")]
    if not runs:
        return None
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for r in runs:
        ids = set()
        for outcome, tids in r["tests"].items():
            for t in tids:
                seen[t][r["mode"]].add(outcome)
                ids.add(t)
        for t in set(seen) - ids:
            seen[t][r["mode"]].add("absent")
    differs = {t: {m: sorted(o) for m, o in by.items()} for t, by in seen.items()
               if len(set().union(*by.values())) > 1}
    first = runs[0]["tests"]
    return {"runs": len(runs), "identical": not differs, "differs": differs,
            "counts": {k: len(v) for k, v in first.items()}}


def summarize_apps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (app, impl, split variant): medians of each mode's time over its ok runs, the per-round
    split/direct ratios (median, min-max), run status counts and correctness."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("kind") == "app":
            groups[(r["app"], r["impl"])].append(r)
    out = []
    for (app, impl), rs in sorted(groups.items()):
        direct = [r for r in rs if r["mode"] == "direct"]
        for tag in sorted({variant_tag(r) for r in rs if r["mode"] == "split"}) or [None]:
            split = [r for r in rs if r["mode"] == "split" and variant_tag(r) == tag]
            d_by = {r["repeat"]: r["time_s"] for r in _ok(direct)}
            ratios = [r["time_s"] / d_by[r["repeat"]] for r in _ok(split) if d_by.get(r["repeat"])]
            sames = {json.dumps(r["same"]) for r in _ok(direct + split) if r.get("same") is not None}
            figs = sorted({k for r in _ok(direct + split) for k in r.get("figures", {})})
            out.append({
                "app": app, "impl": impl, "variant": tag, "ranks": rs[0]["ranks"],
                "sites": rs[0]["placement"]["sites"],
                "time_source": "app" if any(r["app_time_s"] is not None for r in rs) else "wall",
                "direct_s": median_of(r["time_s"] for r in _ok(direct)),
                "split_s": median_of(r["time_s"] for r in _ok(split)),
                "ratio": statistics.median(ratios) if ratios else None,
                "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                "rounds": len(ratios),
                "status": {m: {s: sum(1 for r in x if r["status"] == s) for s in ("ok", "failed", "timeout")}
                           for m, x in (("direct", direct), ("split", split))},
                "verified": {m: [sum(1 for r in x if r["verified"] is True), len(x)]
                             for m, x in (("direct", direct), ("split", split))},
                "checked": any(r["verified"] is not None for r in direct + split),
                # the app's own checks (HPCC's parts) that did not pass in some run, with their verdicts
                "checks_not_passed": sorted({f"{k} {v}" for r in direct + split
                                             for k, v in (r.get("checks") or {}).items() if v != "passed"}),
                "same_identical": None if not sames else len(sames) == 1,
                "tests": outcome_diff(direct, split),
                "figures": {f: {m: median_of(r["figures"].get(f) for r in _ok(x))
                                for m, x in (("direct", direct), ("split", split))} for f in figs},
                "wan_retrans": {m: median_of(r["counters"]["distant"]["RetransSegs"] for r in x)
                                for m, x in (("direct", direct), ("split", split))},
                "wan_rto_split": max((r["counters"]["distant"]["TCPTimeouts"] for r in split), default=None),
                "gw_cpu_pct": median_of(max((g["pct"] or 0 for g in r["cpu"]["gateways"].values()), default=None)
                                        for r in _ok(split)),
            })
    return out


def side_ratios(rows: list[dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """`bench app --a/--b`: per (app, impl), B's time over A's per round (the two sides ran in the same
    round, back to back), median and min-max over rounds."""
    by: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in _ok([r for r in rows if r.get("kind") == "app" and r["mode"] == "split"]):
        by[(r["app"], r["impl"], r["repeat"])][(r.get("variant") or {}).get("ab")] = r["time_s"]
    ratios: dict[tuple, list[float]] = defaultdict(list)
    for (app, impl, _), t in sorted(by.items()):
        if t.get(a) and b in t:
            ratios[(app, impl)].append(t[b] / t[a])
    return [{"app": app, "impl": impl, "ratio": statistics.median(x), "ratio_min": min(x), "ratio_max": max(x),
             "rounds": len(x)} for (app, impl), x in ratios.items()]


def correctness(s: dict[str, Any]) -> str:
    """One cell: verified counts, identical results or test sets, timeouts and failures."""
    parts = []
    v = s["verified"]
    if s["checked"]:
        parts.append(f"verified {v['direct'][0]}/{v['direct'][1]} direct, {v['split'][0]}/{v['split'][1]} split")
    if s["checks_not_passed"]:
        parts.append("own checks: " + ", ".join(s["checks_not_passed"]))
    if s["same_identical"] is not None:
        parts.append("results identical" if s["same_identical"] else "RESULTS DIFFER")
    if s["tests"]:
        t = s["tests"]
        c = t["counts"]
        parts.append(f"tests {c.get('passed', 0)} passed {c.get('failed', 0)} failed {c.get('skipped', 0)} skipped: "
                     + ("identical sets" if t["identical"] else f"{len(t['differs'])} DIFFER"))
    bad = {m: {k: n for k, n in st.items() if k != "ok" and n} for m, st in s["status"].items()}
    for m, b in bad.items():
        if b:
            parts.append(f"{m}: " + ", ".join(f"{n} {k}" for k, n in b.items()))
    return "; ".join(parts) or "-"
