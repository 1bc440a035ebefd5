"""gridsplit model: Barchet-Estefanel and Mounié's formulas against hand-computed values, the segment search,
the CLI's refusals, and one small measure -> predict -> validate run in a real lab."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import gridsplit, gw_topo
from gridsplit.errors import GridsplitError
from gridsplit.model import collectives as C
from gridsplit.model import grid
from gridsplit.model.plogp import ParamSet, PLogP, monotone

ROOT = Path(__file__).resolve().parent.parent
US = 1e-6
MS = 1e-3


def linear(name: str = "t", L: float = 50 * US) -> PLogP:
    """g(m) = 10 us + 80 ns/B, os(m) = 20 us + 40 ns/B, or(m) = 30 us + 40 ns/B (so os(1000) = 60 us, or(1000) = 70 us)."""
    return PLogP(name, L, [0, 1_000_000], [20 * US, 20 * US + 0.04], [30 * US, 30 * US + 0.04], [10 * US, 10 * US + 0.08])


# Hand-computed with g(1000) = 90 us, g(1) = 10.08 us, g(250) = 30 us, g(2000) = 170 us,
# g(3000) = 250 us, g(4000) = 330 us, L = 50 us.
HAND = [
    ("bcast_flat", 4, 1000, None, 3 * 90 + 50),                          # Table 1 l.1
    ("bcast_flat_rdv", 4, 1000, None, 3 * 90 + 2 * 10.08 + 3 * 50),      # l.2
    ("bcast_seg_flat", 4, 1000, 250, 3 * (30 * 4) + 50),                 # l.3, k = 4
    ("bcast_chain", 4, 1000, None, 3 * (90 + 50)),                       # l.4
    ("bcast_chain_rdv", 4, 1000, None, 3 * (90 + 2 * 10.08 + 3 * 50)),   # l.5
    ("bcast_seg_chain", 4, 1000, 250, 3 * (30 + 50) + 30 * 3),           # l.6
    ("bcast_binary", 5, 1000, None, 3 * (2 * 90 + 50)),                  # l.7, ceil(log2 5) = 3
    ("bcast_binomial", 5, 1000, None, 2 * 90 + 3 * 50),                  # l.8, floor 2, ceil 3
    ("bcast_binomial_rdv", 5, 1000, None, 2 * 90 + 3 * (2 * 10.08 + 3 * 50)),  # l.9
    ("bcast_seg_binomial", 5, 1000, 250, 2 * 30 * 4 + 3 * 50),           # l.10
    ("scatter_flat", 4, 1000, None, 3 * 90 + 50),                        # Table 2 l.1
    ("scatter_chain", 4, 1000, None, 90 + 170 + 250 + 3 * 50),           # l.2
    ("scatter_binomial", 5, 1000, None, 90 + 170 + 330 + 3 * 50),        # l.3
    ("gather_binomial", 4, 1000, None, 90 + 170 + 2 * 50),               # mirror, ceil(log2 4) = 2
]


@pytest.mark.parametrize("algo,P,m,s,want_us", HAND)
def test_formulas_match_hand_computed(algo, P, m, s, want_us):
    got = C.predict(algo, linear(), P, m, segment=s).seconds
    assert got == pytest.approx(want_us * US, rel=1e-9)


def test_alltoall_bounds_and_gamma():
    p = linear()
    # Table 3: upper 3 os + 3 or + L = 3*60 + 3*70 + 50; lower 3 g + L = 3*90 + 50
    assert C.alltoall_upper(p, 4, 1000) == pytest.approx(440 * US)
    assert C.alltoall_lower(p, 4, 1000) == pytest.approx(320 * US)
    assert C.alltoall(p, 4, 1000, 0.25) == pytest.approx((320 + 0.25 * 120) * US)
    pts = [(C.alltoall_lower(p, P, m), C.alltoall_upper(p, P, m), C.alltoall(p, P, m, 0.4))
           for P in (3, 4, 8) for m in (1000, 100000)]
    assert C.fit_gamma(pts) == pytest.approx(0.4)
    with pytest.raises(GridsplitError):
        C.fit_gamma([(1.0, 1.0, 2.0)])


def test_one_process_costs_nothing_and_logs():
    p = linear()
    assert C.floor_log2(5) == 2 and C.ceil_log2(5) == 3 and C.ceil_log2(4) == 2 and C.ceil_log2(1) == 0
    for algo in C.ALGORITHMS:
        assert C.predict(algo, p, 1, 1000, segment=100).seconds == 0.0


def test_segment_search_finds_convex_optimum():
    """A known convex cost A s + B m / s: the optimum is sqrt(B m / A), found by the climb."""
    A, B, m = 3e-9, 2e-6, 1_000_000
    fn = lambda _p, _P, mm, s: A * s + B * mm / s
    s, t = C.best_segment(fn, None, 0, m)
    s_star = (B * m / A) ** 0.5  # 25820 bytes, not a power-of-two fraction of m
    assert abs(s - s_star) <= 1
    assert t == pytest.approx(fn(None, 0, m, s_star), rel=1e-9)
    coarse = min(fn(None, 0, m, m >> i) for i in range(m.bit_length()))
    assert t < coarse  # the climb improves on the m/2^i stage


def test_segment_search_on_the_pipeline_model():
    """Segmented chain with linear g: continuous optimum sqrt(a m / ((P-2) b)) ~ 5590 B;
    with whole segments the search must match a brute-force scan."""
    p, P, m = linear(L=50 * US), 6, 1_000_000
    a, b = 10 * US, 80e-9
    s_star = (a * m / ((P - 2) * b)) ** 0.5
    s, t = C.best_segment(C.bcast_seg_chain, p, P, m)
    brute = min(C.bcast_seg_chain(p, P, m, x) for x in range(1000, 20001))
    assert abs(s - s_star) / s_star < 0.15
    assert t <= brute * 1.001
    assert t == pytest.approx(C.bcast_seg_chain(p, P, m, s))


def test_selector_orders_and_picks_pipeline_for_large_messages():
    p = linear()
    small = C.select("bcast", p, 16, 10)
    big = C.select("bcast", p, 16, 1_000_000)
    assert [x.seconds for x in big] == sorted(x.seconds for x in big)
    assert big[0].algo in ("bcast_seg_chain", "bcast_seg_binomial")
    assert small[0].algo in ("bcast_flat", "bcast_seg_flat")  # L dominates: one level of latency
    assert {x.algo for x in big} == set(C.algorithms_of("bcast"))


def test_interpolation_extrapolation_and_monotone_fit():
    assert monotone([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    p = PLogP("x", 1e-5, [0, 100, 200], [0, 1, 2], [0, 1, 2], [1.0, 3.0, 2.0])  # a stall at 100 B
    assert p.g_ == [1.0, 2.5, 2.5]
    q = linear()
    assert q.g(500_000) == pytest.approx(10 * US + 0.04)
    assert q.g(3_000_000) == pytest.approx(10 * US + 0.24)  # the last slope, continued
    with pytest.raises(GridsplitError):
        PLogP("bad", 0, [10, 5], [0, 0], [0, 0], [0, 0])


def test_two_level_grid_formulas():
    lan, wan = linear("lan", L=50 * US), linear("wan", L=5000 * US)
    # The first sender's message whole, the other three at the wire's gap (80 us per 1000 B).
    assert grid.gather_flat(lan, wan, 4, 1000) == pytest.approx((5000 + 90 + 3 * 80) * US)
    assert grid.bcast_chain(lan, wan, 3, 1000) == pytest.approx((90 + 5000 + 2 * (90 + 50)) * US)
    lo, up = grid.alltoall_bounds(lan, wan, 3, 1000)
    assert lo == pytest.approx(max(3 * 90 + 5000, 2 * 90 + 90 + 5000) * US)
    assert up == pytest.approx(max(3 * 130 + 5000, 2 * 130 + 130 + 5000) * US)
    two = grid.predict("gather_two_level", lan, wan, 4, 1000)
    assert two.seconds == pytest.approx(C.select("gather", lan, 4, 1000)[0].seconds + wan.g(4000) + wan.L)
    # The benchmark's iteration: the barrier's crossing, then the (congested) gather.
    assert grid.bench_gather(lan, wan, 4, 1000, kappa=2.0) == pytest.approx((5000 + 5000 + 90 + 2 * 3 * 80) * US)
    # kappa fitted on such points, with the barrier in the fixed part, is recovered exactly.
    pts = [(wan.L + grid.gather_parts(wan, n, m)[0], grid.gather_parts(wan, n, m)[1], grid.bench_gather(lan, wan, n, m, 1.7))
           for n in (2, 8) for m in (1000, 10**6)]
    assert grid.fit_kappa(pts) == pytest.approx(1.7)


def test_grid_gather_pays_one_rendezvous_round_trip_not_one_per_sender():
    # A WAN path whose gap jumps by a 10 ms handshake at 64 KiB (Open MPI's rendezvous),
    # 80 ns/B on the wire: one sender's back-to-back 1 MB sends are 90 ms apart, but
    # four senders' handshakes overlap and the root's link takes 80 ms per message.
    wan = PLogP("wan", 5 * MS, [0, 65535, 65536, 2_000_000], [0.0] * 4, [0.0] * 4,
                [10 * US, 10 * US + 65535 * 80e-9, 10 * MS + 65536 * 80e-9, 10 * MS + 2_000_000 * 80e-9])
    assert wan.g(1_000_000) == pytest.approx(90 * MS)
    assert grid.wire_gap(wan, 1_000_000) == pytest.approx(80 * MS)
    assert grid.gather_flat(linear(), wan, 4, 1_000_000) == pytest.approx((5 + 90 + 3 * 80) * MS)
    assert grid.bcast_flat(linear(), wan, 4, 1_000_000) == pytest.approx((4 * 90 + 5) * MS)  # one sender: handshakes in turn
    assert grid.wire_gap(wan, 1000) == pytest.approx(80 * US)  # eager: the senders' 10 us per message overlap too
    flat = PLogP("flat", 5 * MS, [0, 1000, 2000], [0.0] * 3, [0.0] * 3, [1 * MS, 2 * MS, 2 * MS])  # no bandwidth
    assert grid.wire_gap(flat, 1500) == pytest.approx(flat.g(1500))


def test_models_cover_every_collalgo_algorithm():
    src = (ROOT / "mpi" / "collalgo.c").read_text()
    block = src[src.index("static const char *const ops[]"):]
    names = set(re.findall(r'"([a-z_0-9]+)"', block[:block.index("NULL")]))
    assert names == set(C.ALGORITHMS) | set(C.ALLTOALL_ALGOS)


def test_paramset_roundtrip_and_refusals(tmp_path):
    ps = ParamSet({"lan": linear("lan")}, {"impl": "openmpi"})
    f = tmp_path / "p.json"
    ps.save(f)
    back = ParamSet.load(f)
    assert back.path("lan").g(1000) == pytest.approx(90 * US)
    with pytest.raises(GridsplitError, match="no 'wan' parameters"):
        back.path("wan")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    cp = gridsplit("model", "predict", "--params", str(bad), "--op", "bcast", "-P", "4", "--size", "1K", check=False)
    assert cp.returncode == 2 and "not a pLogP parameter file" in cp.stderr and "Traceback" not in cp.stderr
    for args, msg in ((["--gamma=nan"], "--gamma nan"), (["--gamma=-1"], "--gamma -1"), (["--size", "0"], "--size 0")):
        cp = gridsplit("model", "predict", "--op", "alltoall", "-P", "4", "--size", "1K", *args, check=False)
        assert cp.returncode == 2 and msg in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_advise_from_shipped_files_without_a_lab():
    cp = gridsplit("model", "advise", "--topology", "paper", "--nodes", "8", "--size", "1M", "--json")
    d = json.loads(cp.stdout)
    assert {a["op"] for a in d["answers"]} == {"gather", "bcast", "alltoall"}
    for a in d["answers"]:
        assert a["verdict"] is not None and a["best"]["seconds"] > 0
        assert {c["mode"] for c in a["candidates"]} == {"direct", "split"}
    assert not d["notes"]  # the shipped parameters were measured on paper at this scale
    far = json.loads(gridsplit("model", "advise", "--topology", "g5k9", "--size", "100K", "--json").stdout)
    assert far["notes"]  # another grid: carried-over parameters are flagged
    cp = gridsplit("model", "advise", "--topology", "paper", "--size", "12Q", check=False)
    assert cp.returncode == 2 and "size" in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.lab
@pytest.mark.mpi
def test_measure_predict_validate_in_the_lab(lab, tmp_path):
    """A small end-to-end run on the mini lab: parameters, one prediction, a scored validation."""
    params = tmp_path / "p.json"
    gridsplit("model", "measure", "--pairs", "lan,wan", "--max-size", "64K", "--reps", "20", "--ci", "0.1",
              "--refine", "0", "--out", str(params), "--no-plot", timeout=300)
    ps = ParamSet.load(params)
    lan, wan = ps.path("lan"), ps.path("wan")
    # The WAN's latency is the configured one-way delay (mini: 5 ms) and the LAN's far below it.
    assert 4e-3 < wan.L < 8e-3 and lan.L < 1e-3
    pred = json.loads(gridsplit("model", "predict", "--params", str(params), "--op", "bcast", "-P", "2",
                                "--size", "64K", "--json").stdout)
    assert pred["predictions"][0]["seconds"] > 0
    out = tmp_path / "v"
    gridsplit("model", "validate", "--params", str(params), "--procs", "2", "--sizes", "4K,64K", "--repeat", "1",
              "--reps", "3", "--grid-nodes", "1", "--modes", "direct", "--out", str(out), timeout=600)
    res = json.loads((out / "validation.json").read_text())
    pts = res["lan"]["points"]
    assert {p["algo"] for p in pts} == set(C.ALGORITHMS) | set(C.ALLTOALL_ALGOS)
    assert all(p["measured"] > 0 and p["predicted"] > 0 for p in pts)
    # A gross pipeline fault (wrong units, wrong path, wrong P) would be off by orders of magnitude.
    assert res["lan"]["errors"]["ge_64K"]["median"] < 1.0
    assert res["grid"]["points"] and res["grid"]["errors"]["ge_64K"]["median"] < 1.0
    assert (out / "fig02-bcast-binomial.png").stat().st_size > 10000


def test_advise_carries_split_parameters_to_the_gateways_nic():
    """Split parameters scale with the split path's bottleneck, which holds the gateways' NICs;
    direct (wan) parameters do not see them."""
    from gridsplit.model.advise import carry_over
    measured = gw_topo()
    ps = ParamSet({"lan": linear("lan"), "wan": linear("wan", 5 * MS), "split": linear("split", 5 * MS)},
                  {"topology": measured.to_dict()})
    m = 1_000_000
    g0 = {k: ps.path(k).g(m) - ps.path(k).g(0) for k in ("wan", "split")}

    same, notes = carry_over(ps, measured, "root", "far")
    assert not notes and same.path("split").g(m) == ps.path("split").g(m)

    # Gateways at half the nodes' rate: the split path's per-byte gap doubles, the direct path's does not move.
    slow, notes = carry_over(ps, gw_topo("gateway_nic_mbps = 50\n"), "root", "far")
    assert slow.path("split").g(m) - slow.path("split").g(0) == pytest.approx(2 * g0["split"])
    assert slow.path("wan").g(m) == ps.path("wan").g(m) and slow.path("lan").g(m) == ps.path("lan").g(m)
    assert len(notes) == 1 and "split parameters" in notes[0] and "from a 100 to a 50 Mb/s" in notes[0]

    # Faster gateways do not lift a path the nodes' NICs still cap.
    fast, notes = carry_over(ps, gw_topo("gateway_nic_mbps = 400\n"), "root", "far")
    assert not notes and fast.path("split").g(m) == ps.path("split").g(m)

    # Measured with slow gateways, asked with default ones: split gaps shrink by the same ratio.
    ps_slow = ParamSet(ps.paths, {"topology": gw_topo("gateway_nic_mbps = 50\n").to_dict()})
    back, notes = carry_over(ps_slow, measured, "root", "far")
    assert back.path("split").g(m) - back.path("split").g(0) == pytest.approx(g0["split"] / 2)
    assert back.path("wan").g(m) == ps.path("wan").g(m) and len(notes) == 1

    # Parameter files written before gateway_nic_mbps: the gateways ran at the sites' NIC rate.
    old = measured.to_dict()
    for s in old["sites"]:
        del s["gateway_nic_mbps"]
    same, notes = carry_over(ParamSet(ps.paths, {"topology": old}), measured, "root", "far")
    assert not notes and same.path("split").g(m) == ps.path("split").g(m)
