"""`gridsplit model validate`: run the modelled algorithms in the lab and score the predictions.

Two parts, both with mpi/collalgo.c (the seed's algorithms on MPI point-to-point):

* lan: P ranks on one site, every algorithm of Tables 1-3 over a grid of
  (P, m); segmented algorithms run with the segment the model's search chose;
* grid: the root on one site and n nodes on the other (the MPI5000 layout),
  direct and through the gateways, for the algorithms of grid.GRID_ALGOS.

Each configuration is run `repeat` times, interleaved so that a noisy period
of this shared VM spreads over all of them; a point's measured time is the
median of the runs' medians. Scores: relative error |pred - meas| / meas
(median and max, split at 64 KB), and the selector's penalty: the measured
time of the algorithm the model picks divided by the best measured one.
Gamma (Table 3) is fitted per network, and the all-to-all errors are
cross-validated (gamma fitted without the P, or n, being predicted).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable

from .. import machine
from ..units import fmt_size
from ..errors import GridsplitError
from ..lab.realize import LabState
from . import grid
from .collectives import (ALGORITHMS, ALLTOALL_ALGOS, alltoall, alltoall_bounds, fit_gamma, op_of, predict,
                          rel_error)
from .labrun import RANK_ENV, layout, nodes_by_site, run_json
from .plogp import ParamSet

BIG = 64000  # "messages >= 64 KB" of the targets (sizes are decimal, as in the MPI programs)
TARGET_BIG, TARGET_SMALL, TARGET_PENALTY = 0.10, 0.25, 0.03
LAN_ALGOS = [*ALGORITHMS, *ALLTOALL_ALGOS]


def _collalgo(algos: list[str], sizes: list[int], reps: int, segs: list[int] | None = None) -> list[str]:
    argv = ["collalgo", "-o", ",".join(algos), "-s", ",".join(map(str, sizes)), "-r", str(reps), "-w", "1"]
    return argv + (["--seg", ",".join(map(str, segs))] if segs else [])


def _row(d: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"algo": d["op"], "size": d["size_bytes"], "median_s": d["median_s"], "min_s": d["min_s"],
            "max_s": d["max_s"], **extra}


def run_lan(state: LabState, ps: ParamSet, impl: str, procs: list[int], sizes: list[int], repeat: int, reps: int,
            progress: Callable[[str], None]) -> list[dict[str, Any]]:
    lan = ps.path("lan")
    site, hosts_all = max(nodes_by_site(state).items(), key=lambda kv: (len(kv[1]), kv[0]),
                          default=(state.topo.sites[0].name, []))
    if max(procs) > len(hosts_all):
        raise GridsplitError(f"--procs {max(procs)}: site {site} has {len(hosts_all)} nodes; bring the lab up with more "
                             f"(`gridsplit lab up --topology {state.topo.name} --nodes {max(procs)}`) or lower --procs")
    plain = [a for a in LAN_ALGOS if not (a in ALGORITHMS and ALGORITHMS[a].segmented)]
    seg = [a for a in ALGORITHMS if ALGORITHMS[a].segmented]
    raw = []
    for run in range(repeat):
        for P in procs:
            hosts = hosts_all[:P]
            progress(f"lan run {run + 1}/{repeat}, P={P}: {len(plain) + len(seg)} algorithms x {len(sizes)} sizes")
            for d in run_json(state, impl, hosts, _collalgo(plain, sizes, reps)):
                raw.append(_row(d, P=P, run=run, segment=None))
            for a in seg:
                segs = [predict(a, lan, P, m).segment or m for m in sizes]
                for d in run_json(state, impl, hosts, _collalgo([a], sizes, reps, segs)):
                    raw.append(_row(d, P=P, run=run, segment=segs[sizes.index(d["size_bytes"])]))
    return raw


def run_grid(state: LabState, ps: ParamSet, impl: str, nodes: list[int], modes: list[str], sizes: list[int],
             repeat: int, reps: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    raw = []
    plain = [a for a in grid.GRID_ALGOS if a != "bcast_seg_chain"]
    for run in range(repeat):
        for n in nodes:
            hosts = layout(state, n)
            for mode in modes:
                lan, x = grid.paths(ps, mode)
                progress(f"grid run {run + 1}/{repeat}, root {hosts[0].name} + {n} remote nodes, {mode}")
                for d in run_json(state, impl, hosts, _collalgo(plain, sizes, reps), split=mode == "split"):
                    raw.append(_row(d, nodes=n, mode=mode, run=run, segment=None))
                segs = [grid.predict("bcast_seg_chain", lan, x, n, m).segment or m for m in sizes]
                for d in run_json(state, impl, hosts, _collalgo(["bcast_seg_chain"], sizes, reps, segs),
                                  split=mode == "split"):
                    raw.append(_row(d, nodes=n, mode=mode, run=run, segment=segs[sizes.index(d["size_bytes"])]))
    return raw


def _aggregate(raw: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple, dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in raw:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = {}
    for k, rs in groups.items():
        meds = [r["median_s"] for r in rs]
        out[k] = {"measured": statistics.median(meds), "measured_min": min(meds), "measured_max": max(meds),
                  "runs": len(rs), "segment": rs[0]["segment"]}
    return out


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    def stats(es: list[float]) -> dict[str, Any]:
        return {"n": len(es), "median": statistics.median(es) if es else None, "max": max(es) if es else None}
    big = [p["error"] for p in points if p["size"] >= BIG]
    small = [p["error"] for p in points if p["size"] < BIG]
    out = {"all": stats([p["error"] for p in points]), "ge_64K": stats(big), "lt_64K": stats(small), "by_op": {}}
    for op in sorted({op_of(p["algo"]) for p in points}):
        out["by_op"][op] = {"ge_64K": stats([p["error"] for p in points if op_of(p["algo"]) == op and p["size"] >= BIG]),
                            "lt_64K": stats([p["error"] for p in points if op_of(p["algo"]) == op and p["size"] < BIG])}
    out["target_ge_64K_met"] = out["ge_64K"]["median"] is not None and out["ge_64K"]["median"] <= TARGET_BIG
    out["target_lt_64K_met"] = out["lt_64K"]["median"] is not None and out["lt_64K"]["median"] <= TARGET_SMALL
    return out


def _gamma_cv(pts: list[tuple[Any, float, float, float]]) -> tuple[float, dict[Any, float]]:
    """Gamma on all points, and per group the gamma fitted without that group (leave-one-out)."""
    g_all = fit_gamma([(lo, up, t) for _, lo, up, t in pts])
    groups = sorted({k for k, *_ in pts})
    cv = {}
    for k in groups:
        rest = [(lo, up, t) for kk, lo, up, t in pts if kk != k]
        cv[k] = fit_gamma(rest) if rest else g_all
    return g_all, cv


def analyse_lan(raw: list[dict[str, Any]], ps: ParamSet) -> dict[str, Any]:
    lan = ps.path("lan")
    agg = _aggregate(raw, ("algo", "P", "size"))
    a2a = [(P, *alltoall_bounds(lan, P, m), v["measured"])
           for (a, P, m), v in agg.items() if a in ALLTOALL_ALGOS]
    gamma, gamma_cv = _gamma_cv(a2a) if a2a else (0.0, {})
    points = []
    for (a, P, m), v in sorted(agg.items()):
        row = {"algo": a, "P": P, "size": m, **v}
        if a in ALLTOALL_ALGOS:
            g = gamma_cv.get(P, gamma)
            lo, up = alltoall_bounds(lan, P, m)
            row.update(predicted=alltoall(lan, P, m, g), gamma_used=g, lower=lo, upper=up)
        else:
            row["predicted"] = predict(a, lan, P, m, segment=v["segment"]).seconds
        row["error"] = rel_error(row["predicted"], row["measured"])
        points.append(row)
    # Selector: per (op, P, m), the model's pick among the measured algorithms.
    sel = []
    for op in ("bcast", "scatter", "gather"):
        for P, m in sorted({(p["P"], p["size"]) for p in points if op_of(p["algo"]) == op}):
            cands = [p for p in points if op_of(p["algo"]) == op and p["P"] == P and p["size"] == m]
            pick = min(cands, key=lambda p: p["predicted"])
            best = min(cands, key=lambda p: p["measured"])
            sel.append({"op": op, "P": P, "size": m, "chosen": pick["algo"], "best": best["algo"],
                        "penalty": pick["measured"] / best["measured"] - 1})
    pens = [s["penalty"] for s in sel]
    return {"points": points, "errors": summarize(points),
            "gamma": {"value": gamma, "cross_validated": {str(k): v for k, v in gamma_cv.items()},
                      "fitted_on": "all-to-all points, relative least squares; errors use the gamma fitted without the P predicted"},
            "selector": {"cases": sel, "median": statistics.median(pens) if pens else None,
                         "mean": statistics.mean(pens) if pens else None, "max": max(pens) if pens else None,
                         "target_met": bool(pens) and statistics.median(pens) <= TARGET_PENALTY}}


def analyse_grid(raw: list[dict[str, Any]], ps: ParamSet) -> dict[str, Any]:
    if not raw:
        return {}
    agg = _aggregate(raw, ("algo", "mode", "nodes", "size"))
    gammas: dict[str, Any] = {}
    for mode in sorted({k[1] for k in agg}):
        lan, x = grid.paths(ps, mode)
        pts = [(n, *grid.alltoall_bounds(lan, x, n, m), v["measured"]) for (a, md, n, m), v in agg.items()
               if md == mode and a.startswith("alltoall")]
        if pts:
            g, cv = _gamma_cv(pts)
            gammas[mode] = {"value": g, "cross_validated": {str(k): v for k, v in cv.items()}}
    points = []
    for (a, mode, n, m), v in sorted(agg.items()):
        lan, x = grid.paths(ps, mode)
        g = None
        if a.startswith("alltoall"):
            g = float(gammas[mode]["cross_validated"].get(str(n), gammas[mode]["value"]))
        pred = grid.predict(a, lan, x, n, m, gamma=g, segment=v["segment"]).seconds
        points.append({"algo": a, "mode": mode, "nodes": n, "size": m, **v, "predicted": pred,
                       "error": rel_error(pred, v["measured"]), **({"gamma_used": g} if g is not None else {})})
    by_mode = {mode: summarize([p for p in points if p["mode"] == mode]) for mode in sorted({p["mode"] for p in points})}
    return {"points": points, "errors": summarize(points), "errors_by_mode": by_mode, "gamma": gammas}


def bench_rows(files: list[Path]) -> list[dict[str, Any]]:
    """Gather points from `gridsplit bench gather` JSONL files (docs/bench.md)."""
    rows = []
    for f in files:
        try:
            lines = f.read_text().splitlines()
        except OSError as e:
            raise GridsplitError(f"{f}: cannot read ({e.strerror})") from None
        topo: dict[str, Any] = {}
        for line in lines:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("kind") == "meta":
                topo = d.get("topology") or {}
            elif d.get("kind") == "point" and d.get("op") == "gather":
                rows.append({**d, "file": str(f), "topology": (topo.get("name"), topo.get("scale"))})
    return rows


def analyse_bench(rows: list[dict[str, Any]], ps: ParamSet) -> dict[str, Any]:
    """The flat-gather model against `gridsplit bench gather` points: pure pLogP, and
    with a congestion factor kappa per mode (grid.fit_kappa), cross-validated by
    leaving out the node count being predicted. Each point is a barrier plus the
    gather (grid.bench_gather), since that is what the benchmark times."""
    impl = ps.meta.get("impl")
    t = ps.meta.get("topology") or {}
    where = (t.get("name"), t.get("scale"))
    modes = {md for md, k in (("direct", "wan"), ("split", "split")) if k in ps.paths}
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        # Only points of the grid (and rate scale) the parameters were measured on, and of the same library.
        if (impl and r.get("impl") != impl) or r.get("topology") != where or r.get("mode") not in modes:
            continue
        try:
            groups.setdefault((r["mode"], int(r["nodes"]), int(r["size_bytes"])), []).append(float(r["per_rep_s"]["median"]))
        except (KeyError, TypeError, ValueError):
            continue
    kappa: dict[str, Any] = {}
    for mode in sorted({k[0] for k in groups}):
        lan, x = grid.paths(ps, mode)
        # The fixed part holds the barrier's crossing too (grid.bench_gather).
        pts = [(n, x.L + a, b, statistics.median(v)) for (md, n, m), v in groups.items() if md == mode
               for a, b in [grid.gather_parts(x, n, m)]]
        allk = grid.fit_kappa([p[1:] for p in pts])
        cv = {str(n): grid.fit_kappa([p[1:] for p in pts if p[0] != n]) if len({p[0] for p in pts}) > 1 else allk
              for n in sorted({p[0] for p in pts})}
        kappa[mode] = {"value": allk, "cross_validated": cv}
    points = []
    for (mode, n, m), meds in sorted(groups.items()):
        lan, x = grid.paths(ps, mode)
        pred = grid.bench_gather(lan, x, n, m)
        k = kappa[mode]["cross_validated"][str(n)]
        predk = grid.bench_gather(lan, x, n, m, k)
        meas = statistics.median(meds)
        points.append({"algo": "gather_flat", "mode": mode, "nodes": n, "size": m, "measured": meas,
                       "measured_min": min(meds), "measured_max": max(meds), "runs": len(meds), "predicted": pred,
                       "error": rel_error(pred, meas), "predicted_kappa": predk, "kappa_used": k,
                       "error_kappa": rel_error(predk, meas)})
    used = sorted({r["file"] for r in rows if r.get("topology") == where})
    return {"points": points, "errors": summarize(points) if points else None,
            "errors_by_mode": {md: summarize([p for p in points if p["mode"] == md])
                               for md in sorted({p["mode"] for p in points})},
            "errors_kappa": summarize([{**p, "error": p["error_kappa"]} for p in points]) if points else None,
            "errors_kappa_by_mode": {md: summarize([{**p, "error": p["error_kappa"]} for p in points if p["mode"] == md])
                                     for md in sorted({p["mode"] for p in points})},
            "kappa": kappa, "files": used, "impl": impl}


def report_lines(result: dict[str, Any]) -> list[str]:
    """A markdown summary of a validation result (also printed by the CLI)."""
    m = result["meta"]
    L = []
    L.append(f"# pLogP model validation, {m.get('date', '')[:10]}")
    L.append("")
    L.append(f"Machine: {m.get('cpu', '?')}, {m.get('cores')} vCPU, kernel {m.get('kernel')}, load at start "
             f"{m.get('loadavg_1m_at_start')}; git {m.get('git')}. Lab topology `{m.get('topology', {}).get('name')}` "
             f"(scale {m.get('topology', {}).get('scale')}), {m.get('impl')} with {m.get('rank_env')}.")
    L.append(f"Grid: P = {m.get('procs')}, m = {', '.join(fmt_size(s) for s in m.get('sizes', []))}; "
             f"{m.get('repeat')} interleaved runs of {m.get('reps')} timed reps each (medians of run medians).")
    L.append(f"Regenerate: `{m.get('command')}`")
    if m.get("rescored"):
        r = m["rescored"]
        L.append(f"Scored again on {r.get('date', '')[:10]} from the raw runs above, with the models of git "
                 f"{m.get('git_rescored', '?')}: `{r.get('command')}`")
    L.append("")

    def err_row(name: str, e: dict[str, Any]) -> str:
        f = lambda s: "-" if s["median"] is None else f"{100 * s['median']:.1f} % / {100 * s['max']:.0f} % (n={s['n']})"
        return f"| {name} | {f(e['ge_64K'])} | {f(e['lt_64K'])} |"
    L.append("| prediction error, median / max | m >= 64 KB (target <= 10 %) | m < 64 KB (target <= 25 %) |")
    L.append("|---|---|---|")
    lan = result["lan"]
    L.append(err_row("**single site, all algorithms**", lan["errors"]))
    for op, e in lan["errors"]["by_op"].items():
        L.append(err_row(f"single site, {op}", e))
    if result.get("grid", {}).get("points"):
        for mode, e in result["grid"]["errors_by_mode"].items():
            L.append(err_row(f"**two sites, {mode}**", e))
            for op, eo in e["by_op"].items():
                L.append(err_row(f"two sites, {mode}, {op}", eo))
    if result.get("bench", {}).get("points"):
        b = result["bench"]
        L.append(err_row("`bench gather` points, pure pLogP (barrier crossing + flat gather)", b["errors"]))
        for mode, e in b["errors_kappa_by_mode"].items():
            if mode in b.get("errors_by_mode", {}):
                L.append(err_row(f"`bench gather` points, {mode}, pure pLogP", b["errors_by_mode"][mode]))
            L.append(err_row(f"`bench gather` points, {mode}, with kappa = {b['kappa'][mode]['value']:.2f} (cross-validated)", e))
    L.append("")
    s = lan["selector"]
    if s["median"] is not None:
        L.append(f"Selector penalty (measured time of the model's pick / best measured - 1), over "
                 f"{len(s['cases'])} (op, P, m) cases: median {100 * s['median']:.2f} %, mean {100 * s['mean']:.2f} %, "
                 f"max {100 * s['max']:.1f} % (target: median <= 3 %; C4.5 trees in the literature: 2.08 % mean).")
        worst = sorted(s["cases"], key=lambda c: -c["penalty"])[:5]
        L.append("Worst picks: " + "; ".join(f"{c['op']} P={c['P']} m={fmt_size(c['size'])}: {c['chosen']} "
                                            f"instead of {c['best']} (+{100 * c['penalty']:.0f} %)" for c in worst if c["penalty"] > 0))
    L.append(f"Gamma (Table 3): single site {lan['gamma']['value']:.3f}" + "".join(
        f"; two sites {k} {v['value']:.3f}" for k, v in result.get("grid", {}).get("gamma", {}).items()))
    return L


def validate(state: LabState, ps: ParamSet, impl: str, procs: list[int], sizes: list[int], repeat: int, reps: int,
             grid_nodes: list[int], modes: list[str], bench_files: list[Path], command: str,
             progress: Callable[[str], None]) -> dict[str, Any]:
    if ps.meta.get("impl") and ps.meta["impl"] != impl:
        raise GridsplitError(f"the parameters were measured with {ps.meta['impl']}, not {impl}; measure again with "
                             f"`gridsplit model measure --impl {impl}` or validate with --impl {ps.meta['impl']}")
    if "split" in modes and not state.data.get("gateways"):
        raise GridsplitError("split mode needs the lab's gateways; bring the lab up with a gateway topology or pass --modes direct")
    meta = {**machine.facts(), "topology": state.topo.to_dict(), "impl": impl, "rank_env": RANK_ENV.get(impl, {}),
            "procs": procs, "sizes": sizes, "repeat": repeat, "reps": reps, "grid_nodes": grid_nodes, "modes": modes,
            "params": ps.meta.get("source", ""), "command": command}
    raw_lan = run_lan(state, ps, impl, procs, sizes, repeat, reps, progress) if procs else []
    raw_grid = run_grid(state, ps, impl, grid_nodes, modes, sizes, repeat, reps, progress) if grid_nodes else []
    return analyse(raw_lan, raw_grid, ps, meta, bench_files)


def analyse(raw_lan, raw_grid, ps: ParamSet, meta: dict[str, Any], bench_files: list[Path]) -> dict[str, Any]:
    result = {"kind": "gridsplit-model-validation", "version": 1, "meta": meta,
              "lan": analyse_lan(raw_lan, ps), "grid": analyse_grid(raw_grid, ps),
              "raw": {"lan": raw_lan, "grid": raw_grid}}
    if bench_files:
        result["bench"] = analyse_bench(bench_rows(bench_files), ps)
    return result
