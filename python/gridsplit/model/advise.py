"""`gridsplit model advise`: expected times direct vs split, the algorithm to use, and how sure.

Works without a lab, from saved files: pLogP parameters (`gridsplit model
measure`) and a validation summary (`gridsplit model validate`), which give
gamma per network and the error bands quoted with every answer. Without
--params it uses the parameters shipped in the package (data/, measured in
the lab on the `paper` topology; see docs/model.md).

When the asked topology is not the one the parameters were measured on, the
parameters are carried over, not re-measured: the WAN latency is shifted by
the difference in half round trips, and the per-byte part of every gap (what
the message's size adds above g(0)) is scaled by the ratio of bottleneck
rates. Split parameters use the split path's bottleneck, which also holds both
gateways' NICs (`gateway_nic_mbps`): every relayed byte crosses them. The
answer then says it is extrapolated and widens its error band.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import GridsplitError
from ..topology import Topology
from . import grid
from .collectives import select
from .plogp import ParamSet, PLogP, read_kind
from .validate import BIG

# Added to the validation's error band when parameters are carried over to
# another topology: the carry-over keeps latency and bandwidth right but not
# TCP's window dynamics, which a different RTT x rate changes (our judgement).
EXTRAPOLATION_PENALTY = 0.25
# The two-site algorithms compared per operation (grid.predict's names).
OP_ALGOS = {"gather": ("gather_flat", "gather_two_level"),
            "bcast": ("bcast_flat", "bcast_chain", "bcast_seg_chain", "bcast_two_level"),
            "alltoall": ("alltoall_rotated",)}


def shipped(name: str) -> Path:
    p = resources.files("gridsplit.model").joinpath("data", name)
    return Path(str(p))


def load_validation(path: Path) -> dict[str, Any]:
    return read_kind(path, ("gridsplit-model-validation", "gridsplit-model-validation-summary"),
                     "a validation result", "give one written by `gridsplit model validate`")


def summary_of(result: dict[str, Any]) -> dict[str, Any]:
    """What advise needs from a validation: gammas and error bands (shipped in the package)."""
    g = result.get("grid", {}) or {}
    return {"kind": "gridsplit-model-validation-summary", "version": 1, "meta": result["meta"],
            "gamma": {"lan": result["lan"]["gamma"]["value"], **{k: v["value"] for k, v in g.get("gamma", {}).items()}},
            "errors": {"lan": result["lan"]["errors"], **{k: v for k, v in g.get("errors_by_mode", {}).items()}},
            "selector": {k: result["lan"]["selector"][k] for k in ("median", "mean", "max")},
            "gather_bench": gather_bench_summary(result.get("bench") or {})}


def gather_bench_summary(bench: dict[str, Any]) -> dict[str, Any]:
    """Per mode, the flat-gather model `advise` uses and its error on `bench gather` points:
    with kappa only where kappa's cross-validated error beats pure pLogP's (a factor
    fitted on a lossless mode mostly fits noise)."""
    out = {}
    for mode, k in bench.get("kappa", {}).items():
        pure = (bench.get("errors_by_mode") or {}).get(mode)
        withk = (bench.get("errors_kappa_by_mode") or {}).get(mode)
        use = withk is not None and (pure is None or withk["all"]["median"] < pure["all"]["median"])
        out[mode] = {"kappa": k["value"] if use else None, "errors": withk if use else pure}
    return out


def _band(summary: dict[str, Any], where: str, op: str, m: int) -> tuple[float | None, float | None]:
    e = summary.get("errors", {}).get(where)
    if not e:
        return None, None
    cls = "ge_64K" if m >= BIG else "lt_64K"
    s = e.get("by_op", {}).get(op, {}).get(cls) or e.get(cls) or {}
    return s.get("median"), s.get("max")


def _adapt(p: PLogP, dL: float, rate_factor: float) -> PLogP:
    def scale(ys: list[float]) -> list[float]:
        return [ys[0] + (y - ys[0]) * rate_factor for y in ys]
    return replace(p, L=max(p.L + dL, 0.0), g_=scale(p.g_), os_=scale(p.os_), or_=scale(p.or_), meta={**p.meta, "adapted": {"dL_s": dL, "rate_factor": rate_factor}})


def two_sites(topo: Topology) -> tuple[str, str]:
    """(root site, remote site): the site with the fewest nodes holds the root (sophia in `paper`)."""
    order = sorted((s for s in topo.sites if s.nodes), key=lambda s: (s.nodes, s.index))
    if len(order) < 2:
        raise GridsplitError(f"topology {topo.name!r} has fewer than two sites with nodes; advise compares direct and "
                             f"split traffic between two (`gridsplit netcheck` measures the sites of a real grid)")
    return order[0].name, order[-1].name


def carry_over(ps: ParamSet, topo: Topology, root: str, remote: str) -> tuple[ParamSet, list[str]]:
    """Parameters for `topo`, and the notes saying what was carried over."""
    src = ps.meta.get("topology") or {}
    notes = []
    try:
        s_site = max(src["sites"], key=lambda s: s["nodes"])
        s_nic = float(s_site["nic_mbps"])
        s_wan = src["wan"][0]
        s_rtt = float(s_wan["delay_ms_ab"]) + float(s_wan["delay_ms_ba"])
        s_bottle = min(s_nic, float(s_wan["rate_mbps"]), min(float(s["nic_mbps"]) for s in src["sites"]))
        # Files written before gateway_nic_mbps existed: the gateways ran at the sites' NIC rate.
        s_split = min(s_bottle, min(float(s.get("gateway_nic_mbps", s["nic_mbps"])) for s in src["sites"]))
    except (KeyError, IndexError, TypeError, ValueError):
        raise GridsplitError("the parameter file does not record the topology it was measured on; measure it with `gridsplit model measure`") from None
    t_nic = topo.site(remote).nic_mbps
    w = topo.wan(root, remote)
    t_bottle = min(t_nic, topo.site(root).nic_mbps, w.rate_mbps, topo.site(remote).uplink_mbps)
    t_split = min(t_bottle, topo.site(root).gateway_nic_mbps, topo.site(remote).gateway_nic_mbps)
    lan_f, dL = s_nic / t_nic, (w.rtt_ms - s_rtt) / 2e3
    factor = {"wan": s_bottle / t_bottle, "split": s_split / t_split}
    paths = dict(ps.paths)
    if abs(lan_f - 1) > 1e-9:
        paths["lan"] = _adapt(ps.paths["lan"], 0.0, lan_f)
        notes.append(f"LAN gaps scaled from {s_nic:g} to {t_nic:g} Mb/s NICs")
    for k in ("wan", "split"):
        if k in paths and (abs(factor[k] - 1) > 1e-9 or abs(dL) > 1e-6):
            paths[k] = _adapt(ps.paths[k], dL, factor[k])
    if abs(factor["wan"] - 1) > 1e-9 or abs(dL) > 1e-6:
        notes.append(f"WAN parameters carried over from RTT {s_rtt:g} ms / {s_bottle:g} Mb/s to RTT {w.rtt_ms:g} ms / {t_bottle:g} Mb/s")
    if "split" in paths and abs(factor["split"] - factor["wan"]) > 1e-9:
        notes.append(f"split parameters carried over from a {s_split:g} to a {t_split:g} Mb/s bottleneck "
                     f"(the gateways' NICs are on the split path)")
    return ParamSet(paths, ps.meta), notes


def advise(ps: ParamSet, summary: dict[str, Any], topo: Topology, m: int, ops: list[str]) -> dict[str, Any]:
    root, remote = two_sites(topo)
    n = topo.site(remote).nodes
    ps2, notes = carry_over(ps, topo, root, remote)
    extra = EXTRAPOLATION_PENALTY if notes else 0.0
    modes = [md for md in ("direct", "split") if ("wan" if md == "direct" else "split") in ps2.paths]
    if "lan" not in ps2.paths or not modes:
        raise GridsplitError("the parameter file needs lan and wan (and split, for the gateway comparison) paths; measure them with `gridsplit model measure`")
    if "split" in modes and not topo.site(root).gateway:
        notes.append(f"site {root} has no gateway in this topology: split times assume one is added")
    gam = summary.get("gamma", {})
    answers = []
    for op in ops:
        cands = []
        for mode in modes:
            lan, x = grid.paths(ps2, mode)
            gb = summary.get("gather_bench", {}).get(mode) or {}
            kappa = gb.get("kappa")
            for a in OP_ALGOS[op]:
                g = gam.get(mode, gam.get("lan"))
                pr = grid.predict(a, lan, x, n, m, gamma=g)
                med, mx = _band(summary, mode, op, m)
                if a == "gather_flat" and gb.get("errors"):
                    # Scored on `bench gather` (validate.analyse_bench): n senders converging on one port.
                    if kappa is not None:
                        pr = grid.GridPrediction(a, grid.gather_congested(lan, x, n, m, kappa), None,
                                                 f"with congestion factor kappa = {kappa:.2f} from bench gather")
                    s = gb["errors"].get("ge_64K" if m >= BIG else "lt_64K") or {}
                    med, mx = s.get("median", med), s.get("max", mx)
                cands.append({"mode": mode, "algo": a, "seconds": pr.seconds, "segment": pr.segment, "detail": pr.detail,
                              "error_median": None if med is None else med + extra,
                              "error_max": None if mx is None else mx + extra,
                              "validated": a in grid.GRID_ALGOS,
                              **({"gamma": g} if op == "alltoall" else {})})
        best = min(cands, key=lambda c: c["seconds"])
        by_mode = {md: min((c for c in cands if c["mode"] == md), key=lambda c: c["seconds"]) for md in modes}
        verdict = None
        if len(by_mode) == 2:
            d, s = by_mode["direct"], by_mode["split"]
            ratio = s["seconds"] / d["seconds"]
            band = (d["error_median"] or 0) + (s["error_median"] or 0)
            helps = ratio < 1
            sure = abs(1 - ratio) > band
            verdict = {"split_over_direct": ratio, "split_helps": helps, "confident": sure, "band": band,
                       "text": (f"splitting {'helps' if helps else 'does not help'}: split/direct = {ratio:.2f} "
                                f"({'beyond' if sure else 'within'} the models' combined median error of {100 * band:.0f} %)")}
        answers.append({"op": op, "candidates": sorted(cands, key=lambda c: c["seconds"]), "best": best,
                        "best_by_mode": by_mode, "verdict": verdict})
    # The selection inside the remote site, for users who run a single-site collective there.
    local = {op: [{"algo": p.algo, "seconds": p.seconds, "segment": p.segment} for p in select(op, ps2.path("lan"), n, m)[:3]]
             for op in ("bcast", "scatter", "gather") if n > 1}
    return {"topology": topo.name, "scale": topo.scale, "root_site": root, "remote_site": remote, "nodes": n,
            "size": m, "notes": notes, "answers": answers, "local": local,
            "params": {"source": ps.meta.get("source", ""), "date": ps.meta.get("date", ""),
                       "measured_on": (ps.meta.get("topology") or {}).get("name"), "impl": ps.meta.get("impl")},
            "validation": {"date": summary.get("meta", {}).get("date", ""), "source": summary.get("source", "")}}
