"""Figures in the manner of Barchet-Estefanel and Mounié: Fig. 1 (pLogP parameters) and Figs. 2-10 (measured vs predicted).

All figures are PNGs drawn with matplotlib's Agg backend (no display needed),
from the JSON the model commands save, so they can be redrawn without a lab.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..units import fmt_size  # noqa: E402
from .plogp import ParamSet  # noqa: E402

COLORS = {"os": "tab:blue", "or": "tab:orange", "g": "tab:green"}


def fig1_plogp(ps: ParamSet, out: Path) -> Path:
    """Barchet-Estefanel and Mounié Fig. 1: os(m), or(m), g(m) against m, one panel per path, log-log."""
    kinds = list(ps.paths)
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.2), squeeze=False)
    for ax, k in zip(axes[0], kinds):
        p = ps.paths[k]
        pts = p.meta.get("points") or []
        for q, key in (("os", "os_s"), ("or", "or_s"), ("g", "g_s")):
            xs = [d["size_bytes"] for d in pts if d["size_bytes"] > 0]
            if xs:
                med = [d[key]["median"] * 1e6 for d in pts if d["size_bytes"] > 0]
                lo = [max(d[key]["median"] - d[key]["ci_lo"], 0) * 1e6 for d in pts if d["size_bytes"] > 0]
                hi = [max(d[key]["ci_hi"] - d[key]["median"], 0) * 1e6 for d in pts if d["size_bytes"] > 0]
                ax.errorbar(xs, med, yerr=[lo, hi], fmt="o", ms=3, color=COLORS[q], alpha=0.5, elinewidth=0.8)
            fit = [getattr(p, f"{q}_")[i] * 1e6 for i, s in enumerate(p.sizes) if s > 0]
            ax.plot([s for s in p.sizes if s > 0], fit, "-", color=COLORS[q], label=f"{q}(m)")
        ax.axhline(p.L * 1e6, color="grey", ls=":", label=f"L = {p.L * 1e6:.1f} µs")
        ax.set_xscale("log")
        ax.set_yscale("log")
        hosts = " → ".join(p.meta.get("hosts", []))
        ax.set_title(f"{k}: {hosts}", fontsize=9)
        ax.set_xlabel("message size m (bytes)")
        ax.set_ylabel("time (µs)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    topo = ps.meta.get("topology", {}).get("name", "?")
    fig.suptitle(f"pLogP parameters, {ps.meta.get('impl', '?')} on lab '{topo}' "
                 f"({ps.meta.get('date', '')[:10]}); points: medians with 95% CI, lines: model input")
    return _save(fig, out, dpi=110)


def _series(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return sorted((r for r in rows if all(r.get(k) == v for k, v in match.items())), key=lambda r: r["size"])


def _meas_pred(ax, rows: list[dict[str, Any]], label: str, color: str, per_byte: bool = False) -> None:
    if not rows:
        return
    xs = [r["size"] for r in rows]
    ax.errorbar(xs, [r["measured"] * 1e3 for r in rows],
                yerr=[[max(r["measured"] - r["measured_min"], 0) * 1e3 for r in rows],
                      [max(r["measured_max"] - r["measured"], 0) * 1e3 for r in rows]],
                fmt="o-", ms=4, color=color, label=f"{label} measured", lw=1)
    ax.plot(xs, [r["predicted"] * 1e3 for r in rows], "x--", color=color, label=f"{label} predicted", lw=1)


def _finish(ax, title: str, xlabel: str = "message size m (bytes)", logx: bool = True) -> None:
    if logx:
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _save(fig, out: Path, dpi: int = 100) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def _by_procs(rows, algo, title, out):
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    procs = sorted({r["P"] for r in rows if r["algo"] == algo})
    cmap = plt.get_cmap("viridis")
    for i, P in enumerate(procs):
        _meas_pred(ax, _series(rows, algo=algo, P=P), f"P={P}", cmap(i / max(len(procs) - 1, 1)))
    _finish(ax, title)
    return _save(fig, out)


def validation_figures(result: dict[str, Any], outdir: Path) -> list[Path]:
    """Figs. 2-10 of Barchet-Estefanel and Mounié redrawn from a validation result, plus the grid figures."""
    rows = result["lan"]["points"]
    tag = f"{result['meta'].get('impl', '?')}, lab {result['meta'].get('topology', {}).get('name', '?')}"
    made = []
    procs = sorted({r["P"] for r in rows})
    pmax = procs[-1] if procs else 0
    made.append(_by_procs(rows, "bcast_binomial", f"Fig. 2: binomial broadcast ({tag})", outdir / "fig02-bcast-binomial.png"))
    made.append(_by_procs(rows, "bcast_seg_chain", f"Fig. 3: segmented chain broadcast ({tag})", outdir / "fig03-bcast-seg-chain.png"))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for algo, c in (("bcast_binomial", "tab:blue"), ("bcast_seg_chain", "tab:red"), ("bcast_seg_binomial", "tab:green")):
        _meas_pred(ax, _series(rows, algo=algo, P=pmax), algo, c)
    _finish(ax, f"Fig. 4: broadcasts compared, P={pmax} ({tag})")
    made.append(_save(fig, outdir / "fig04-bcast-compare.png"))
    made.append(_by_procs(rows, "scatter_binomial", f"Fig. 5: binomial scatter ({tag})", outdir / "fig05-scatter-binomial.png"))
    made.append(_by_procs(rows, "scatter_flat", f"Fig. 6: flat scatter ({tag})", outdir / "fig06-scatter-flat.png"))
    sizes = sorted({r["size"] for r in rows})
    big = sizes[-1] if sizes else 0
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for algo, c in (("scatter_flat", "tab:blue"), ("scatter_binomial", "tab:red"), ("scatter_chain", "tab:green")):
        rs = sorted((r for r in rows if r["algo"] == algo and r["size"] == big), key=lambda r: r["P"])
        if rs:
            ax.plot([r["P"] for r in rs], [r["measured"] * 1e3 for r in rs], "o-", color=c, label=f"{algo} measured")
            ax.plot([r["P"] for r in rs], [r["predicted"] * 1e3 for r in rs], "x--", color=c, label=f"{algo} predicted")
    _finish(ax, f"Fig. 7: scatter at m = {fmt_size(big)} against P ({tag})", xlabel="processes P", logx=False)
    made.append(_save(fig, outdir / "fig07-scatter-vs-procs.png"))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for algo, c in (("alltoall_direct", "tab:blue"), ("alltoall_rotated", "tab:red")):
        rs = _series(rows, algo=algo, P=pmax)
        if rs:
            ax.errorbar([r["size"] for r in rs], [r["measured"] * 1e3 for r in rs],
                        yerr=[[max(r["measured"] - r["measured_min"], 0) * 1e3 for r in rs],
                              [max(r["measured_max"] - r["measured"], 0) * 1e3 for r in rs]], fmt="o-", color=c, label=algo)
    _finish(ax, f"Fig. 8: direct vs rotated exchange, P={pmax} ({tag})")
    made.append(_save(fig, outdir / "fig08-alltoall-direct-rotated.png"))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    rs = _series(rows, algo="alltoall_rotated", P=pmax)
    if rs:
        xs = [r["size"] for r in rs]
        ax.plot(xs, [r["measured"] * 1e3 for r in rs], "o-", color="k", label="measured")
        ax.plot(xs, [r["lower"] * 1e3 for r in rs], "--", color="tab:green", label="lower bound (Table 3)")
        ax.plot(xs, [r["upper"] * 1e3 for r in rs], "--", color="tab:red", label="upper bound (Table 3)")
        ax.plot(xs, [r["predicted"] * 1e3 for r in rs], "x:", color="tab:blue",
                label=f"prediction, γ = {result['lan']['gamma']['value']:.2f}")
    _finish(ax, f"Fig. 9: all-to-all and its bounds, P={pmax} ({tag})")
    made.append(_save(fig, outdir / "fig09-alltoall-bounds.png"))
    made.append(_by_procs(rows, "alltoall_rotated", f"Fig. 10: all-to-all predictions with γ ({tag})", outdir / "fig10-alltoall-gamma.png"))
    made.append(parity(result, outdir / "parity.png"))
    if result.get("grid", {}).get("points"):
        made.append(grid_figure(result, outdir / "grid-two-site.png"))
    return made


def parity(result: dict[str, Any], out: Path) -> Path:
    """Every (algorithm, P, m): predicted against measured, with the ±10 % and ±25 % bands."""
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    groups = [("lan", result["lan"]["points"], "o")]
    if result.get("grid", {}).get("points"):
        groups.append(("grid", result["grid"]["points"], "^"))
    if (result.get("bench") or {}).get("points"):
        groups.append(("bench κ", [{**p, "predicted": p["predicted_kappa"]} for p in result["bench"]["points"]], "s"))
    lo, hi = float("inf"), 0.0
    for name, rows, mk in groups:
        for op, c in (("bcast", "tab:blue"), ("scatter", "tab:orange"), ("gather", "tab:green"), ("alltoall", "tab:red")):
            rs = [r for r in rows if r["algo"].startswith(op)]
            if rs:
                xs = [r["measured"] * 1e3 for r in rs]
                ys = [r["predicted"] * 1e3 for r in rs]
                lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
                ax.scatter(xs, ys, s=10, marker=mk, color=c, alpha=0.6, label=f"{name} {op}")
    if hi > 0:
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=0.8)
        for f, ls in ((0.10, "--"), (0.25, ":")):
            ax.plot(xs, [x * (1 + f) for x in xs], "k", ls=ls, lw=0.6)
            ax.plot(xs, [x * (1 - f) for x in xs], "k", ls=ls, lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("predicted (ms)")
    ax.set_title("predicted vs measured (lines: ±10 %, ±25 %)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out)


def grid_figure(result: dict[str, Any], out: Path) -> Path:
    """The two-level model on the two-site layout: one panel per algorithm, direct and split,
    and the `bench gather` points against the flat gather with and without kappa."""
    rows = result["grid"]["points"]
    algos = sorted({r["algo"] for r in rows})
    bench = (result.get("bench") or {}).get("points") or []
    panels = len(algos) + (1 if bench else 0)
    cols = 3
    nrows = -(-panels // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 4.6 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    cmap = plt.get_cmap("tab10")
    for ax, algo in zip(flat, algos):
        i = 0
        for mode in ("direct", "split"):
            for n in sorted({r["nodes"] for r in rows if r["algo"] == algo}):
                _meas_pred(ax, _series(rows, algo=algo, mode=mode, nodes=n), f"{mode} n={n}", cmap(i))
                i += 1
        _finish(ax, f"{algo}: root + n remote nodes")
    if bench:
        ax = flat[len(algos)]
        i = 0
        for mode in ("direct", "split"):
            for n in sorted({r["nodes"] for r in bench if r["mode"] == mode}):
                rs = _series(bench, mode=mode, nodes=n)
                xs = [r["size"] for r in rs]
                ax.plot(xs, [r["measured"] * 1e3 for r in rs], "o-", color=cmap(i), label=f"{mode} n={n} bench", lw=1)
                ax.plot(xs, [r["predicted"] * 1e3 for r in rs], ":", color=cmap(i), lw=1)
                ax.plot(xs, [r["predicted_kappa"] * 1e3 for r in rs], "x--", color=cmap(i), lw=1)
                i += 1
        _finish(ax, "bench gather: measured (o), pLogP (:), with κ (x--)")
    for ax in flat[panels:]:
        ax.axis("off")
    fig.suptitle("two-site grid, two-level pLogP model (LAN + WAN / split parameters); error bars: min-max of run medians")
    return _save(fig, out)
