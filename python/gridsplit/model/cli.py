"""`gridsplit model ...`: pLogP measurement, Barchet-Estefanel and Mounié's collective models, validation and grid advice.

measure   pLogP parameters of the lab's LAN, WAN and split paths (mpi/plogp.c)
predict   the models of Tables 1-3 for one (op, P, m), fastest first
validate  run the modelled algorithms (mpi/collalgo.c) in the lab and score the models
plot      redraw figures from saved parameter or validation files (no lab)
advise    per site pair, split or direct (split model), which algorithm (pLogP), how sure: no lab
validate-split  score the split model against committed bench results, no lab
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
from pathlib import Path

import click
from rich.table import Table

from .. import machine
from ..units import fmt_size, int_list, parse_size
from ..console import emit_json, out
from ..errors import GridsplitError
from ..lab.names import LabNames
from ..lab.realize import load_state
from ..sysdeps import repo_root
from ..topology_file import load_topology
from . import advise as advice
from . import measure as measuring
from . import splitadvise, splitmodel, splitrecord, splitvalidate
from . import validate as validation
from .advise import load_validation, shipped, summary_of
from .collectives import ALGORITHMS, select
from .plogp import KIND, ParamSet, read_kind

# Outputs go under the current directory, never into the source tree.
OUTDIR = Path("gridsplit-out/model")


def _con():
    return out


def _state():
    return load_state(LabNames.from_env())


def _sizes(text: str) -> list[int]:
    sizes = [parse_size(t) for t in text.split(",") if t.strip()]
    if not sizes or any(s < 1 for s in sizes):
        raise GridsplitError(f"--sizes {text!r}: give positive sizes, comma-separated, e.g. 1K,64K,1M")
    return sorted(set(sizes))


def _params(path: str | None):
    p = Path(path) if path else shipped("params.json")
    ps = ParamSet.load(p)
    ps.meta["source"] = str(path) if path else f"shipped with gridsplit ({p.name}, measured {ps.meta.get('date', '?')[:10]})"
    return ps


def _command() -> str:
    return "gridsplit " + shlex.join(sys.argv[1:])


@click.group()
def model() -> None:
    """pLogP collective-performance prediction (Barchet-Estefanel and Mounié) and grid advice.

    \b
    gridsplit model measure                      # LAN, WAN and split pLogP parameters of the running lab
    gridsplit model predict --op bcast -P 16 --size 1M
    gridsplit model validate --measure           # the committed benchmark, regenerated in one command
    gridsplit model advise --topology paper --nodes 8 --size 1M   # split or direct per site pair, no lab
    gridsplit model validate-split               # the split model against committed bench results, no lab
    """


@model.command()
@click.option("--impl", type=click.Choice(["openmpi", "mpich"]), default="openmpi", show_default=True)
@click.option("--pairs", default="lan,wan,split", show_default=True, help="Which paths to measure.")
@click.option("--max-size", default="2M", show_default=True, help="Largest message size (the models extrapolate beyond).")
@click.option("--ci", type=click.FloatRange(0.001, 1), default=0.05, show_default=True,
              help="Stop sampling when the median's 95% CI half-width is within this fraction.")
@click.option("--reps", type=click.IntRange(5, 10000), default=60, show_default=True, help="Most samples per quantity and size.")
@click.option("--refine", type=click.FloatRange(0, 10), default=0.10, show_default=True,
              help="Add a midpoint where interpolation is off by more than this (0: no refinement).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Parameter file to write [gridsplit-out/model/plogp-DATE-TOPOLOGY-IMPL.json].")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Also draw Fig. 1 next to the file.")
@click.option("--sizes", "extra", default="", help="Sizes to measure exactly besides the powers of four (e.g. the ones you will predict).")
def measure(impl: str, pairs: str, max_size: str, ci: float, reps: int, refine: float, out: str | None, plot: bool,
            extra: str) -> None:
    """Measure L, os(m), or(m), g(m) on the lab's LAN, WAN and split paths (needs `gridsplit lab up`)."""
    from .plots import fig1_plogp  # matplotlib: loaded only by the commands that draw
    state = _state()
    ms = parse_size(max_size)
    if ms < 1024:
        raise GridsplitError(f"--max-size {max_size}: at least 1K, so that the bandwidth part of g(m) is measured")
    con = _con()
    ps = measuring.measure(state, impl, [p.strip() for p in pairs.split(",") if p.strip()], ms, ci, reps, refine,
             progress=lambda msg: con.print(f"[dim]·[/dim] {msg}"), extra_sizes=_sizes(extra) if extra.strip() else None)
    ps.meta["command"] = _command()
    path = Path(out) if out else measuring.default_out(state, impl, OUTDIR)
    ps.save(path)
    con.print(f"parameters written to {path}")
    _print_params(ps)
    if plot:
        con.print(f"Fig. 1: {fig1_plogp(ps, path.with_suffix('.png'))}")


def _print_params(ps) -> None:
    t = Table("path", "hosts", "L", "g(1)", "g(1K)", "g(64K)", "g(1M)", "os(1M)", "or(1M)", "bandwidth", title="pLogP parameters")
    for k, p in ps.paths.items():
        us = lambda v: f"{v * 1e6:.1f} µs" if v < 1e-3 else f"{v * 1e3:.2f} ms"
        bw = p.bandwidth_Bps()
        t.add_row(k, " → ".join(p.meta.get("hosts", [])), us(p.L), us(p.g(1)), us(p.g(1000)), us(p.g(64000)),
                  us(p.g(1000000)), us(p.os(1000000)), us(p.or_at(1000000)),
                  "-" if bw == float("inf") else f"{bw * 8 / 1e6:.1f} Mb/s")
    _con().print(t)


@model.command()
@click.option("--params", type=click.Path(dir_okay=False), default=None, help="Parameter file [shipped defaults].")
@click.option("--path", "path_kind", type=click.Choice(["lan", "wan", "split"]), default="lan", show_default=True,
              help="Which measured path (wan and split: every rank pair crosses it).")
@click.option("--op", type=click.Choice(["bcast", "scatter", "gather", "alltoall"]), required=True)
@click.option("-P", "--procs", type=click.IntRange(1, 100000), required=True, help="Number of processes.")
@click.option("--size", required=True, help="m: bytes per rank (K/M suffixes, powers of ten).")
@click.option("--gamma", type=float, default=None, help="All-to-all congestion factor [from the shipped validation].")
@click.option("--json", "as_json", is_flag=True)
def predict(params: str | None, path_kind: str, op: str, procs: int, size: str, gamma: float | None, as_json: bool) -> None:
    """Every algorithm of one operation for (P, m), fastest predicted first, with its Barchet-Estefanel and Mounié formula."""
    ps = _params(params)
    p = ps.path(path_kind)
    m = parse_size(size)
    if m < 1:
        raise GridsplitError(f"--size {size}: must be at least 1 byte")
    if gamma is not None and not (math.isfinite(gamma) and gamma >= 0):
        raise GridsplitError(f"--gamma {gamma}: give a finite factor of 0 or more (T = lower + gamma (upper - lower), "
                             f"docs/model.md §2)")
    if op == "alltoall" and gamma is None:
        gamma = load_validation(shipped("validation.json")).get("gamma", {}).get(path_kind if path_kind == "lan" else
                                                                                  ("direct" if path_kind == "wan" else "split"))
        if gamma is None:
            raise GridsplitError("no gamma for this path in the shipped validation; give --gamma")
    preds = select(op, p, procs, m, gamma=gamma)
    if as_json:
        emit_json({"op": op, "P": procs, "size": m, "path": path_kind, "params": ps.meta.get("source"),
                   "predictions": [{"algo": x.algo, "seconds": x.seconds, "segment": x.segment} for x in preds]})
        return
    t = Table("algorithm", "model", "predicted", "segment", title=f"{op}, P={procs}, m={fmt_size(m)}, {path_kind} parameters")
    for i, x in enumerate(preds):
        cite = ALGORITHMS[x.algo].cite if x.algo in ALGORITHMS else f"Table 3 + γ={gamma:.2f}"
        t.add_row(("[bold]" if i == 0 else "") + x.algo, cite, f"{x.seconds * 1e3:.3f} ms",
                  fmt_size(x.segment) if x.segment else "-")
    _con().print(t)
    _con().print(f"[dim]parameters: {ps.meta.get('source')}[/dim]")


@model.command()
@click.option("--impl", type=click.Choice(["openmpi", "mpich"]), default="openmpi", show_default=True)
@click.option("--params", type=click.Path(dir_okay=False), default=None,
              help="Parameter file measured on this lab [with --measure: measured now; else the newest gridsplit-out/model/plogp-*-TOPOLOGY-IMPL.json].")
@click.option("--measure", "do_measure", is_flag=True, help="Measure the pLogP parameters first (into the output directory).")
@click.option("--procs", default="2,3,4", show_default=True, help="P values for the single-site part.")
@click.option("--sizes", default="1K,4K,16K,64K,256K,1M", show_default=True)
@click.option("--repeat", type=click.IntRange(1, 100), default=3, show_default=True, help="Interleaved runs per configuration.")
@click.option("--reps", type=click.IntRange(1, 10000), default=5, show_default=True, help="Timed repetitions per run.")
@click.option("--grid-nodes", default="1,2,4", show_default=True, help="Remote node counts for the two-site part ('' to skip).")
@click.option("--modes", default="direct,split", show_default=True)
@click.option("--bench", "bench_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="`gridsplit bench gather` JSONL files to score the gather model against [results/bench/*.jsonl].")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output directory [gridsplit-out/model/DATE-TOPOLOGY-IMPL].")
@click.option("--rescore", "rescore", type=click.Path(file_okay=False, exists=True), default=None,
              help="No lab: score the raw runs kept in DIR/validation.json again (with DIR/plogp.json unless --params, "
                   "and the --bench files), after a change to the models; rewrites DIR's report, summary and figures.")
def validate(impl, params, do_measure, procs, sizes, repeat, reps, grid_nodes, modes, bench_files, out, rescore) -> None:
    """Run the modelled algorithms in the lab over (P, m) and score the predictions (needs `gridsplit lab up`)."""
    from .plots import fig1_plogp  # matplotlib: loaded only by the commands that draw
    con = _con()
    progress = lambda msg: con.print(f"[dim]·[/dim] {msg}")
    if rescore:
        if do_measure or out:
            raise GridsplitError("--rescore rewrites DIR from its own raw runs; it takes neither --measure nor --out")
        return _rescore(Path(rescore), params, bench_files, con)
    state = _state()
    outdir = Path(out) if out else OUTDIR / f"{time.strftime('%Y-%m-%d')}-{state.topo.name}-{impl}"
    mode_list = [x.strip() for x in modes.split(",") if x.strip()]
    for md in mode_list:
        if md not in ("direct", "split"):
            raise GridsplitError(f"--modes: unknown mode {md!r}; use direct and/or split")
    pairs = ["lan"] + (["wan"] if "direct" in mode_list else []) + (["split"] if "split" in mode_list else [])
    if do_measure:
        ps = measuring.measure(state, impl, pairs, 2000000, 0.05, 40, 0.10, progress, extra_sizes=_sizes(sizes))
        ps.meta["command"] = _command()
        ps.save(outdir / "plogp.json")
        fig1_plogp(ps, outdir / "fig01-plogp.png")
        ps.meta["source"] = str(outdir / "plogp.json")
    else:
        if params is None:
            found = sorted(OUTDIR.glob(f"plogp-*-{state.topo.name}-{impl}.json"))
            if not found:
                raise GridsplitError(f"no parameters for lab {state.topo.name!r} and {impl}: run with --measure, or `gridsplit model measure` first, or give --params")
            params = str(found[-1])
        ps = ParamSet.load(params)
        ps.meta["source"] = params
    bench = [Path(b) for b in bench_files] or _default_bench()
    result = validation.validate(state, ps, impl, sorted(set(int_list(procs, "--procs", 2, "2,3,4"))) if procs.strip() else [], _sizes(sizes), repeat, reps,
                 sorted(set(int_list(grid_nodes, "--grid-nodes", 1, "2,4,8"))) if grid_nodes.strip() else [], mode_list, bench, _command(), progress)
    _write_validation(result, outdir, con)


def _default_bench() -> list[Path]:
    return sorted((repo_root() / "results" / "bench").glob("*.jsonl")) if repo_root() is not None else []


def _rescore(outdir: Path, params: str | None, bench_files: tuple[str, ...], con) -> None:
    """Scores a committed validation's raw runs again: the measurements stay, the models' answers change."""
    vfile = outdir / "validation.json"
    try:
        old = json.loads(vfile.read_text())
        raw, meta = old["raw"], old["meta"]
        raw_lan, raw_grid = raw["lan"], raw["grid"]
    except FileNotFoundError:
        raise GridsplitError(f"--rescore: {vfile} does not exist; give the directory a `model validate` run wrote") from None
    except (ValueError, KeyError, TypeError) as e:
        raise GridsplitError(f"--rescore: {vfile} is not a validation with its raw runs ({e}); run `model validate` again") from None
    pfile = Path(params) if params else outdir / "plogp.json"
    if not pfile.exists():
        raise GridsplitError(f"--rescore: no parameters at {pfile}; give --params FILE")
    ps = ParamSet.load(str(pfile))
    ps.meta["source"] = str(pfile)
    bench = [Path(b) for b in bench_files] or _default_bench()
    meta = {**meta, "git_rescored": machine.facts().get("git"),
            "rescored": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": _command(),
                         "bench": [str(b) for b in bench]}}
    _write_validation(validation.analyse(raw_lan, raw_grid, ps, meta, bench), outdir, con)


def _write_validation(result: dict, outdir: Path, con) -> None:
    from .plots import validation_figures  # matplotlib: loaded only by the commands that draw
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "validation.json").write_text(json.dumps(result, indent=1) + "\n")
    (outdir / "summary.json").write_text(json.dumps(summary_of(result), indent=1) + "\n")
    lines = validation.report_lines(result)
    figs = validation_figures(result, outdir)
    (outdir / "README.md").write_text("\n".join(lines) + "\n\nFigures: " + ", ".join(f"[{f.name}]({f.name})" for f in figs) + "\n")
    for line in lines:
        con.print(line, markup=False)
    con.print(f"results in {outdir}/ (validation.json, summary.json, README.md, {len(figs)} figures)")


@model.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(), default=None,
              help="PNG (parameters) or directory (validation) [gridsplit-out/model/DIR-NAME.png or "
                   "gridsplit-out/model/DIR/: FILE's directory and name].")
def plot(file: str, out: str | None) -> None:
    """Redraw Fig. 1 from a parameter file, or Figs. 2-10 from a validation.json (no lab needed)."""
    from .plots import fig1_plogp, validation_figures  # matplotlib: loaded only by the commands that draw
    p = Path(file)
    d = read_kind(p, (KIND, "gridsplit-model-validation"), "a parameter file or a validation.json of `gridsplit model`",
                  "give one written by `gridsplit model measure` or `gridsplit model validate`")
    if d["kind"] == KIND:
        # Not beside FILE by default: committed results would gain generated figures.
        _con().print(str(fig1_plogp(ParamSet.from_dict(d, str(p)), Path(out) if out else
                                    Path("gridsplit-out/model") / f"{p.resolve().parent.name}-{p.stem}.png")))
    else:
        for f in validation_figures(d, Path(out) if out else Path("gridsplit-out/model") / p.parent.resolve().name):
            _con().print(str(f))
        for line in validation.report_lines(d):
            _con().print(line, markup=False)


@model.command()
@click.option("--topology", "-t", default="paper", show_default=True, metavar="NAME|FILE")
@click.option("--nodes", "-n", type=click.IntRange(1, 250), default=None, help="Nodes of the topology's variable site.")
@click.option("--scale", type=float, default=None, help="Rate scale of the topology (as `lab up --scale`) [the topology's own].")
@click.option("--size", required=True, help="m: bytes per rank (K/M suffixes, powers of ten).")
@click.option("--op", "ops", multiple=True, metavar="OP",
              help=f"Operations to advise on: {', '.join(splitmodel.OPS)} [gather, bcast, alltoall].")
@click.option("--impl", default="openmpi", show_default=True, metavar="LIB", help="MPI library: openmpi or mpich.")
@click.option("--params", type=click.Path(dir_okay=False), default=None, help="pLogP parameter file [shipped defaults].")
@click.option("--validation", type=click.Path(dir_okay=False), default=None,
              help="pLogP validation.json or summary.json for gamma and error bands [shipped].")
@click.option("--split-validation", type=click.Path(dir_okay=False), default=None,
              help="`model validate-split` result or summary for the split model's error bands [shipped].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable answer (docs/model.md §5.4; `version` field).")
def advise(topology, nodes, scale, size, ops, impl, params, validation, split_validation, as_json) -> None:
    """Per site pair, split or direct (the split model, any number of sites), and which algorithm (pLogP) (no lab)."""
    topo = load_topology(topology, nodes, scale)
    m = parse_size(size)
    if m < 1:
        raise GridsplitError("--size must be at least 1 byte")
    if ops and not any(o.strip() for op in ops for o in op.split(",")):
        raise GridsplitError(f"--op is empty: name operations ({', '.join(splitmodel.OPS)}), or leave --op out "
                             f"for gather, bcast and alltoall")
    ops = [o.strip() for op in ops for o in op.split(",") if o.strip()] or ["gather", "bcast", "alltoall"]
    for op in ops:
        if op not in splitmodel.OPS:
            raise GridsplitError(f"--op {op}: the split model does not cover it (it covers {', '.join(splitmodel.OPS)}); "
                                 f"measure it direct and split side by side with `gridsplit bench` on your grid")
    if impl not in splitmodel.IMPLS:
        raise GridsplitError(f"--impl {impl}: unknown to the model (it knows {', '.join(splitmodel.IMPLS)}); its eager "
                             f"limit sets the round trips, measure them with `gridsplit model measure --impl`")
    bands = splitadvise.load_bands(Path(split_validation) if split_validation else None)
    pairs = splitadvise.pair_cells(topo, ops, m, impl, bands)
    notes = splitadvise.outside(topo, m, None, bands["ranges"])
    if impl not in bands.get("impls", []):
        notes.append(f"impl {impl} was not in the validation; `gridsplit bench gather --impl {impl}` measures it")
    if impl == "mpich" and m > splitmodel.IMPLS[impl]["eager"]:
        # UCX's rendezvous costs far more across a WAN than the round trip the model charges
        # (results/matrix/2026-11-28-mpich-rendezvous).
        notes.append(f"MPICH (UCX) sends {fmt_size(m)} messages by rendezvous, which across a WAN cost a 100 KB "
                     f"all-to-all 2.3-4x its eager time on two lab grids, more than this model counts: set UCX_RNDV_THRESH=inf "
                     f"for the ranks (`bench --rank-env`) and measure direct and split with it")
    plogp_ops = [op for op in ops if op in advice.OP_ALGOS]
    res: dict = {}
    if plogp_ops:
        ps = _params(params)
        v = load_validation(Path(validation) if validation else shipped("validation.json"))
        if v["kind"] == "gridsplit-model-validation":
            v = summary_of(v)
        v["source"] = validation or "shipped with gridsplit"
        res = advice.advise(ps, v, topo, m, plogp_ops)
        pair = next(p for p in pairs if set(p["sites"]) == {res["root_site"], res["remote_site"]})
        for a in res["answers"]:
            c = next(x for x in pair["ops"] if x["op"] == a["op"])
            a["verdict"] = _split_verdict(c)
    res = {"kind": splitadvise.ADVICE_KIND, "version": splitadvise.ADVICE_VERSION, "topology": topo.name,
           "scale": topo.scale, "size": m, "impl": impl, **res, "pairs": pairs, "split_model": {"notes": notes},
           "validation_split": {"date": bands.get("date"), "source": split_validation or "shipped with gridsplit",
                                **bands["overall"]},
           # What `gridsplit gateway config` writes for this grid: the jobs the topology names
           # (`[gateways] policy_ops`, `policy_sizes`; unset: the job unknown) and the pairs checked
           # together (docs/model.md §5.6), so it can differ from a pair's answer above.
           "policy_jobs": [[op, size] for op, size in topo.gateways.policy_jobs],
           "policy": [{"sites": list(p), "split": yes, "reason": why, "why": splitadvise.policy_short(topo)[p]}
                      for p, (yes, why) in splitadvise.split_policy(topo).items()]}
    if as_json:
        emit_json(res)
        return
    _print_advice(res, m)


def _split_verdict(c: dict) -> dict:
    r, b = c["split_over_direct"], c["band"]
    lo, hi = c["range"]
    return {"split_over_direct": r, "split_helps": c["split"], "confident": c["confident"], "band": b["p90"],
            "range": c["range"], "model": "splitmodel",
            "text": (f"split model: {'split' if c['split'] else 'stay direct'}, split/direct = {r:.2f} "
                     f"({lo:.2f}-{hi:.2f}: 90 % of validated cells within a factor {b['factor']:.2f}"
                     f"{'' if b['validated'] else '; this op not validated'})")}


def _print_advice(res: dict, m: int) -> None:
    con = _con()
    fmt_t = lambda s: f"{s * 1e3:.2f} ms" if s < 10 else f"{s:.1f} s"
    con.print(f"[bold]{res['topology']}[/bold] (scale {res['scale']:g}), m = {fmt_size(m)} per rank, {res['impl']}")
    for n in res["split_model"]["notes"]:
        con.print(f"[yellow]note:[/yellow] {n}")
    t = Table("sites", "op", "direct", "split", "split/direct (90 % band)", "advice", "WAN streams K",
              title="split or direct, per site pair (split model)")
    for p in res["pairs"]:
        for c in p["ops"]:
            lo, hi = c["range"]
            band = f"{c['split_over_direct']:.2f} ({lo:.2f}-{hi:.2f})" + ("" if c["band"]["validated"] else " not validated")
            advice_txt = ("[green]split[/green]" if c["split"] else "direct") + (
                " (no direct route)" if not c["direct_possible"] else "" if c["confident"] else " (within band)")
            t.add_row(" – ".join(p["sites"]), c["op"], fmt_t(c["direct_s"]), fmt_t(c["split_s"]), band, advice_txt,
                      str(c["streams"]) if c["streams"] else "-")
    con.print(t)
    if res["policy"]:
        jobs = {}
        for op, size in res["policy_jobs"]:
            jobs.setdefault(op, []).append(fmt_size(size))
        weighs = "; ".join(f"{op} {', '.join(sizes)}" for op, sizes in jobs.items())
        con.print(f"default policy (`gridsplit gateway config`; weighs {weighs}; pairs checked together):")
        for p in res["policy"]:
            con.print(f"  {' – '.join(p['sites'])}: {'[green]split[/green]' if p['split'] else 'direct'} ({p['why']})")
    for n in res.get("notes", []):
        con.print(f"[yellow]note:[/yellow] {n} (pLogP parameters extrapolated: their error bands widened by 25 points)")
    band = lambda c: "-" if c["error_median"] is None else f"±{100 * c['error_median']:.0f} % (worst {100 * c['error_max']:.0f} %)"
    for a in res.get("answers", []):
        t = Table("mode", "algorithm", "expected (pLogP)", "error band (validation)", "notes",
                  title=f"{a['op']}: which algorithm, root on {res['root_site']}, {res['nodes']} nodes on {res['remote_site']}")
        for c in a["candidates"]:
            star = "[bold]" if c is a["best"] else ""
            note = (c["detail"] + "; " if c["detail"] else "") + ("" if c["validated"] else "model only, not validated")
            if c["segment"]:
                note = f"segment {fmt_size(c['segment'])}; " + note
            if "gamma" in c:
                note = f"γ = {c['gamma']:.2f}; " + note
            t.add_row(c["mode"], star + c["algo"], fmt_t(c["seconds"]), band(c), note.strip("; "))
        con.print(t)
        con.print(f"  → {a['verdict']['text']}")
        b = a["best_by_mode"].get("split" if a["verdict"]["split_helps"] else "direct", a["best"])
        con.print(f"  → use {b['algo']} ({b['mode']}): {fmt_t(b['seconds'])} (pLogP)")
    v = res["validation_split"]
    con.print(f"[dim]split model validation: {v['source']} ({str(v['date'])[:10]}): decisions right in "
              f"{100 * v['decision_accuracy']:.0f} % of {v['cells']} cells, median error {v['median_abs_error']:.2f}"
              + (f"; pLogP parameters: {res['params']['source']}" if "params" in res else "") + "[/dim]")


@model.command("validate-split")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output directory [gridsplit-out/model/DATE-split].")
def validate_split(files, out) -> None:
    """Score the split model against `gridsplit bench` result files, no lab [the committed ones of issue 22].

    Writes validation.json (every cell), summary.json (what `advise` quotes) and README.md.
    """
    root = repo_root()
    if files:
        paths = [Path(f) for f in files]
    elif root is None:
        raise GridsplitError("no result files given and not in a gridsplit checkout; give `gridsplit bench` JSONL files")
    else:
        paths = splitvalidate.default_files(root)
    result = splitvalidate.validate(paths, _command(), root)
    outdir = Path(out) if out else OUTDIR / f"{time.strftime('%Y-%m-%d')}-split"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "validation.json").write_text(json.dumps(result, indent=1) + "\n")
    # summary.json (the bands `advise` quotes) needs predicted cells; app runs score decisions only.
    written = ["validation.json", "README.md"]
    if result["overall"]["cells"]:
        (outdir / "summary.json").write_text(json.dumps(splitadvise.bands(result), indent=1) + "\n")
        written.insert(1, "summary.json")
    lines = splitvalidate.report_lines(result)
    (outdir / "README.md").write_text("\n".join(lines) + "\n")
    for line in lines[:16]:
        _con().print(line, markup=False)
    _con().print(f"results in {outdir}/ ({', '.join(written)})")


@model.command("record-predictions")
@click.argument("topologies", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory for README.md and predictions.jsonl.")
@click.option("--run-policy-from", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A predictions.jsonl whose recorded split policy the measuring lab applies [the model's own].")
@click.option("--split", "split", default="policy", show_default=True,
              help="Which site pairs the measuring runs split, as `bench --split` takes it: policy (each grid's "
                   "own), all, none, or pairs joined by '+' (e.g. east-west+east-north).")
def record_predictions(topologies, out, run_policy_from, split) -> None:
    """Record the split model's predictions for grids before they are measured (a held-out test), no lab."""
    if run_policy_from and split != "policy":
        raise GridsplitError(f"--split {split} and --run-policy-from both say which pairs the runs split; give one")
    res = splitrecord.record(list(topologies), Path(out), _command(), Path(run_policy_from) if run_policy_from else None,
                             split)
    _con().print(f"{len(res['rows'])} predictions of {len(topologies)} grids in {out}/ (README.md, predictions.jsonl)")
