"""gridsplit model, the split model (splitmodel.py, docs/model.md §5): each term against a hand-computed
case, then the commands (advise per site pair, validate-split, record-predictions) on committed results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gridsplit, gw_topo
from gridsplit.model import splitadvise, splitvalidate
from gridsplit.model import splitmodel as SM
from gridsplit.model import splitterms as ST

ROOT = Path(__file__).resolve().parent.parent

C100 = 100e6 / 8 * 1448 / 1514          # a 100 Mb/s NIC's payload rate, B/s (full frames)
THREE = ROOT / "results/matrix/2026-11-26-three-sites-alltoall"
SPLIT_SHIPPED = ROOT / "python/gridsplit/model/data/split-validation.json"
LOSSY = ROOT / "results/matrix/2026-11-26-lossy-gather"


def test_split_capacity_counts_a_one_nic_gateway_twice_per_direction():
    assert SM.Bps(100) == pytest.approx(C100)
    topo = gw_topo()            # far: 4 nodes, root: 1 node, every NIC and both gateways at 100 Mb/s
    job = SM.Job("alltoall", 10_000)   # eager: every message at once
    direct = SM.alltoall(topo, job, set())
    split = SM.alltoall(topo, job, {frozenset(("far", "root"))})
    # Direct: the root's node sends 4 x 10 KB and receives as much; a far node 4 x 10 KB too.
    assert direct["parts"]["transfer"] == pytest.approx(40_000 / C100)
    # Split: far's gateway takes in what far sends (4 x 10 KB) and what comes for far (4 x 10 KB).
    assert split["bottleneck"].endswith("gateway NIC in") and split["parts"]["transfer"] == pytest.approx(80_000 / C100)
    # A gateway with 4x the nodes' NIC is no bottleneck any more.
    fast = SM.alltoall(gw_topo("gateway_nic_mbps = 400\n"), job, {frozenset(("far", "root"))})
    assert fast["parts"]["transfer"] == pytest.approx(40_000 / C100)


def test_split_incast_window_rounds_and_recovery():
    # ACK-clocked senders: the port holds its buffer and the path's rate x RTT.
    assert SM.port_window(25_000, C100, 0.0106, 4 * C100, False) == pytest.approx(25_000 + C100 * 0.0106)
    # Bursts at 4x the port's rate: it drains a quarter while they arrive.
    assert SM.port_window(25_000, C100, 0.0106, 4 * C100, True) == pytest.approx(25_000 / 0.75)
    assert SM.port_window(25_000, C100, 0.0106, C100, True) == float("inf")
    # 4 initial windows (57,920 B): 43,440 queue, 18,440 lost; their retransmission (13,830) fits.
    assert SM.burst_rounds(4 * SM.IW, 25_000, C100, 4 * C100) == 1
    assert SM.burst_rounds(2 * SM.IW, 25_000, C100, 4 * C100) == 0
    # Fast retransmit at the RTT of the connection that lost, or a timeout below 4 segments of window.
    assert SM.recovery_s(5 * SM.MSS, 0.0106) == 0.0106 and SM.recovery_s(5 * SM.MSS, 100e-6) == 100e-6
    assert SM.recovery_s(2 * SM.MSS, 0.0106) == ST.RTO_MIN
    # Split LAN legs without clamps lose at LAN RTT: the gateway's port still runs at its rate.
    import dataclasses
    topo = gw_topo()
    untuned = dataclasses.replace(topo, gateways=dataclasses.replace(topo.gateways, lan_tuning=False))
    s = SM.one_to_many(untuned, SM.Job("gather", 1_000_000), True, True)
    assert s["rate_Bps"] == pytest.approx(C100) and s["parts"]["incast"] == 0
    d = SM.one_to_many(gw_topo("switch_buffer_bytes = 25000\n"), SM.Job("gather", 100_000), False, True)
    assert d["loss_rounds"] > 0 and d["parts"]["incast"] >= d["loss_rounds"] * 0.010


def test_split_slow_start_and_idle_restart():
    # 1 MB from IW10 at 100 Mb/s over 20 ms: five round trips below the pipe (14.5, 29, 58, 116, 232 KB).
    want = 5 * 0.020 - 14_480 * 31 / C100
    assert SM.slow_start_s(1e6, 1, SM.IW, C100, 0.020) == pytest.approx(want)
    assert SM.slow_start_s(10_000, 1, SM.IW, C100, 0.020) == 0   # fits in the first window
    assert SM.restart_window(240_000, 0.1, 0.020) == 240_000      # idle under one RTO
    assert SM.restart_window(240_000, 0.5, 0.020) == 60_000       # two RTOs: halved twice
    assert SM.restart_window(240_000, 5.0, 0.020) == SM.IW
    # A gather of 4 x 2 MB keeps each sender idle past its RTO: its direct connection resumes with a
    # halved window and slow-starts over the WAN again; the split WAN link is warm.
    topo = gw_topo()
    job = SM.Job("gather", 2_000_000)
    direct, split = SM.one_to_many(topo, job, False, True), SM.one_to_many(topo, job, True, True)
    assert direct["cold"] and direct["parts"]["slow_start"] > 0 and split["parts"]["slow_start"] == 0
    # A ping-pong loop never idles past an RTO: warm in both modes, split only adds the relays.
    ping = SM.Job("pingpong", 1_000_000)
    d, s = SM.pingpong(topo, ping, False), SM.pingpong(topo, ping, True)
    assert d["parts"]["slow_start"] == 0 and s["seconds"] - d["seconds"] == pytest.approx(SM.RELAY_S)


def test_split_random_loss_mathis_per_connection_and_striped_streams():
    mathis = 1448 / 0.020 * 1.5 ** 0.5 / 0.0005 ** 0.5       # one Reno connection, B/s
    # 4 MB meet 1.4 losses on one connection: the Mathis bound holds it.
    assert SM.random_loss_rate(C100, 4e6, 0.020, 0.0005, 1) == pytest.approx(mathis)
    # Four connections: 4 x Mathis exceeds the NIC, so the NIC's rate stands.
    assert SM.random_loss_rate(C100, 4e6, 0.020, 0.0005, 4) == pytest.approx(C100)
    # 100 KB meet 0.035 losses: the connection mostly keeps its window.
    assert SM.random_loss_rate(C100, 1e5, 0.020, 0.0005, 1) > 0.9 * C100
    topo = splitvalidate.topology_from_meta(json.loads((LOSSY / "gather.jsonl").read_text().splitlines()[0])["topology"], "x")
    a, b = SM.pair_sites(topo)
    from gridsplit.capacity import wan_streams
    assert SM.streams_for(topo, a, b, SM.Job("gather", 1)) == wan_streams(100, 20, 0.0005)[0] == 4
    one = SM.cell(topo, SM.Job("gather", 1_000_000, streams=1))
    four = SM.cell(topo, SM.Job("gather", 1_000_000))
    assert one["ratio"] > 1 > four["ratio"] and four["streams"] == 4   # as measured: 1.35 and 0.60


def test_split_model_on_the_issue_example():
    """Issue 22: paper, 8 nodes x 500 KB gather, measured split/direct 0.83 (Open MPI) and 0.33 (MPICH)."""
    from gridsplit.topology_file import load_topology
    topo = load_topology("paper", nodes=8)
    assert SM.cell(topo, SM.Job("gather", 500_000, "openmpi"))["ratio"] == pytest.approx(0.83, abs=0.1)
    assert SM.cell(topo, SM.Job("gather", 500_000, "mpich"))["ratio"] == pytest.approx(0.33, abs=0.1)
    policy = splitadvise.split_policy(load_topology(str(THREE / "three-gw4.toml")))
    from gridsplit.capacity import split_pairs
    assert set(policy) == set(split_pairs(load_topology(str(THREE / "three-gw4.toml"))))
    assert all(why.startswith("split" if yes else "direct") for yes, why in policy.values())


def test_split_policy_checks_the_pairs_it_splits_together():
    """A site's gateway carries every relayed pair's bytes at once: the policy takes the pairs that pass
    on their own in order of gain, each only while the exchanges with all of them relayed lose nothing.
    On ev4 under the default policy, east-north passes on its own, and with north-south relayed too the
    model predicts the 1 MB all-to-all to lose. On the third held-out grid, beta-gamma alone loses its
    100 KB halo at gamma's gateway port (term (h): measured 1.05-1.56 there at 2026-11-27)."""
    from dataclasses import replace
    from gridsplit.topology_file import load_topology
    ev4 = ROOT / "results/matrix/2026-11-27-wan-pacing/ev4-full.toml"
    pol = splitadvise.split_policy(load_topology(str(ev4)))
    assert [p for p, (yes, _) in pol.items() if yes] == [("north", "south")]
    # `model advise` shows the same policy beside its per-pair answers.
    d = json.loads(gridsplit("model", "advise", "-t", str(ev4), "--size", "1M", "--op", "alltoall", "--json").stdout)
    assert [(tuple(p["sites"]), p["split"]) for p in d["policy"]] == [(p, yes) for p, (yes, _) in pol.items()]
    en = next(p for p in d["policy"] if p["sites"] == ["east", "north"])
    assert "together with north-south" in en["reason"] and en["why"].startswith("relayed together with north-south, the ")
    assert next(p["why"] for p in d["policy"] if p["sites"] == ["north", "south"]).endswith("K gains")
    yes, why = pol[("east", "north")]
    assert not yes and "together with north-south" in why and "would lose" in why and "on its own: predicted" in why
    h3 = load_topology(str(ROOT / "results/matrix/2026-11-27-holdout3/holdout3.toml"))
    auto = splitadvise.split_policy(replace(h3, gateways=replace(h3.gateways, split="auto")))
    yes, why = auto[("beta", "gamma")]
    assert not yes and float(why.split("halo 100K ")[1].split(",")[0]) > 1 + ST.TOLERANCE, why
    assert all(yes for yes, _ in splitadvise.split_policy(h3).values())   # split = "all" is obeyed
    for name in ("results/matrix/2026-11-26-evidence/ev4.toml", "results/matrix/2026-11-27-holdout3/holdout3.toml",
                 "results/matrix/2026-11-26-three-sites-alltoall/three-gw4.toml"):
        t = load_topology(str(ROOT / name))
        t = replace(t, gateways=replace(t.gateways, split="auto"))
        split = frozenset(frozenset(p) for p, (yes, _) in splitadvise.split_policy(t).items() if yes)
        for op, m in t.gateways.policy_jobs:
            if op in SM.EXCHANGES and split:
                run = SM.alltoall if op == "alltoall" else SM.halo
                job = SM.Job(op, m)
                assert run(t, job, split)["seconds"] <= (1 + ST.TOLERANCE) * run(t, job, frozenset())["seconds"], (name, op, m)


def test_wan_split_pins_a_pair_and_the_policy_checks_the_others_with_it(tmp_path):
    """`[[wan]] split = "always"` or "never" decides its pair whatever the model predicts, and a pair
    pinned split counts in the joint check of the others: with north-south pinned direct on ev4, the
    pair the policy took with it is taken no longer, and east-north, kept direct beside it, is split."""
    from gridsplit.topology_file import load_topology
    text = (ROOT / "results/matrix/2026-11-27-wan-pacing/ev4-full.toml").read_text()
    pinned = tmp_path / "ev4-pinned.toml"
    pinned.write_text(text.replace('sites = ["north", "south"]', 'sites = ["north", "south"]\nsplit = "never"', 1))
    pol = splitadvise.split_policy(load_topology(str(pinned)))
    assert pol[("north", "south")] == (False, 'direct: [[wan]] split = "never"')
    assert pol[("east", "north")][0]
    # The same pair pinned split: the others are checked together with it, as when the policy took it.
    pinned.write_text(text.replace('sites = ["north", "south"]', 'sites = ["north", "south"]\nsplit = "always"', 1))
    pol = splitadvise.split_policy(load_topology(str(pinned)))
    assert [p for p, (yes, _) in pol.items() if yes] == [("north", "south")]
    assert "together with north-south" in pol[("east", "north")][1]
    # A bench side's split=PAIRS is the same pins (Topology.with_split); the gateways' and nodes' configs say why.
    t = load_topology(str(ROOT / "results/matrix/2026-11-27-wan-pacing/ev4-full.toml")).with_split("east-west+west-south")
    assert {p for p, (yes, _) in splitadvise.split_policy(t).items() if yes} == {("east", "west"), ("west", "south")}
    from gridsplit.gateway import nodes_conf
    conf = nodes_conf(t)
    assert "site east " in conf and "direct_to=north,south" in conf and '[[wan]] split = "never"' in conf


def test_validate_split_on_a_committed_file(tmp_path):
    gridsplit("model", "validate-split", str(LOSSY / "gather.jsonl"), "--out", str(tmp_path))
    res = json.loads((tmp_path / "validation.json").read_text())
    assert res["kind"] == "gridsplit-split-validation" and res["overall"]["cells"] == 8
    assert {c["variant"] for c in res["cells"]} == {"fair:cubic", "fair:cubic:1-streams"}
    assert all(c["predicted_ratio"] > 0 and c["measured_ratio"] > 0 for c in res["cells"])
    assert "validate-split" in (tmp_path / "README.md").read_text()
    # The default files (issue 22's): the score committed in results/model is this model's on them
    # (the targets are reported there, measured, not asserted here); the held-out grid's cells are
    # scored apart, and the bands `model advise` ships cover them all.
    full = splitvalidate.validate(splitvalidate.default_files(ROOT), "test", ROOT)
    committed = json.loads((ROOT / "results/model/2026-11-28-policy-score/validation.json").read_text())
    parts = [p for p in ("overall", "fitted_on", "held_out", "split_runs") if p in committed]
    assert parts == [p for p in ("overall", "fitted_on", "held_out", "split_runs") if p in full]
    for part in parts:
        assert {k: full[part][k] for k in ("cells", "right", "median_abs_error")} == \
            {k: committed[part][k] for k in ("cells", "right", "median_abs_error")}, part
    # No accuracy target is asserted: the committed score above pins the model, so a change that
    # moves any cell must rewrite it, where review sees the figures (0.111 in sample once the
    # sixth held-out grid was revealed, against issue 22's 0.10).
    shipped = splitadvise.load_bands()
    assert shipped["overall"]["cells"] == full["split_runs"]["cells"]
    assert shipped["by_op"]["alltoall"]["p90_log_error"] == full["by_op_split"]["alltoall"]["p90_log_error"]


def test_validate_split_scores_the_policy_on_app_runs(tmp_path):
    """Application cells score the default policy's decision for the pairs a job spans."""
    from gridsplit.model import appvalidate
    paper = ROOT / "results/app/2026-11-26-paper/paper-openmpi.jsonl"
    res = splitvalidate.validate([paper], "test", ROOT)
    cells = res["apps"]["cells"]
    assert {c["app"] for c in cells} >= {"lammps-lj", "lammps-pppm"} and res["overall"] == {"cells": 0}
    for c in cells:   # paper runs split every pair; the policy keeps paper direct
        assert c["run_split"] == ["bordeaux-sophia"] and c["policy_split"] == []
        assert c["right"] == (c["measured_ratio"] >= 1 - appvalidate.TOLERANCE)
    # A run whose split policy was applied but not recorded cannot be scored: one line says so.
    rows = [json.loads(l) for l in paper.read_text().splitlines()]
    rows[0]["topology"]["gateways"]["split"] = "auto"
    rows[0]["lab"].pop("split_policy", None)
    f = tmp_path / "old.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cp = gridsplit("model", "validate-split", str(f), "--out", str(tmp_path / "v"), check=False)
    assert cp.returncode != 0 and "does not record the lab's split policy" in cp.stderr
    assert "Traceback" not in cp.stderr
    # Recorded: the lab's node file split the pair, which the model's policy would not.
    rows[0]["lab"]["split_policy"] = {"bordeaux-sophia": "split: predicted ..."}
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for c in splitvalidate.validate([f], "test")["apps"]["cells"]:
        assert c["run_split"] == ["bordeaux-sophia"] and c["policy_split"] == []
        assert c["right"] == (c["measured_ratio"] >= 1 - appvalidate.TOLERANCE)


def test_validate_split_compares_an_ab_choice_with_the_policys():
    """An A/B whose one side applied the policy scores the two choices against each other."""
    from gridsplit.bench.appsummary import side_ratios
    from gridsplit.bench.results import read_rows
    f = ROOT / "results/app/2026-11-27-three-sites-pairs/three-pairs-hpcc-both.jsonl"
    cells = splitvalidate.validate([f], "test", ROOT)["apps"]["cells"]
    vs = [c for c in cells if " vs " in c["variant"]]
    assert [c["variant"] for c in vs] == ["both-north vs policy"]
    c = vs[0]
    assert c["policy_split"] == ["east-north"] and c["run_split"] == ["east-north", "north-west"]
    # side_ratios gives side B (policy) over side A (both-north); the cell is the other way round.
    (r,) = side_ratios(read_rows(f), "both-north", "policy")
    assert abs(c["measured_ratio"] * r["ratio"] - 1) < 1e-12 and c["measured_min"] <= c["measured_ratio"] <= c["measured_max"]
    assert c["right"] == (c["measured_ratio"] >= 0.95)
    # Each side against direct is scored as before: the policy's side by its own measure, the other not at all.
    basis = {x["variant"]: x["right"] for x in cells if " vs " not in x["variant"]}
    assert basis["both-north"] is None and basis["policy"] is not None


def test_advise_per_site_pair_and_its_bad_input_lines(tmp_path):
    d = json.loads(gridsplit("model", "advise", "-t", str(THREE / "three-gw4.toml"), "--size", "1M", "--json").stdout)
    assert d["kind"] == "gridsplit-model-advice" and d["version"] == 3
    assert len(d["pairs"]) == 3 and not d["split_model"]["notes"]
    for p in d["pairs"]:
        for c in p["ops"]:
            assert c["direct_s"] > 0 and c["split_s"] > 0 and c["range"][0] <= c["split_over_direct"] <= c["range"][1]
            # The band is a factor: the range is the prediction divided and multiplied by it.
            r, (lo, hi), f = c["split_over_direct"], c["range"], c["band"]["factor"]
            assert f > 1 and lo > 0 and abs(lo * f - r) < 1e-9 and abs(hi - r * f) < 1e-9
            assert c["split"] == (c["split_over_direct"] < SM.DECIDE_BELOW)
            assert (c["streams"] is None) == (c["op"] == "alltoall")
    # MPICH above UCX's measured rendezvous threshold (19 KB, not Open MPI's 64 KiB) gets the note that UCX's
    # rendezvous is not modelled; below it, and Open MPI, none.
    notes = lambda size, impl: json.loads(gridsplit("model", "advise", "-t", str(THREE / "three-gw4.toml"), "--size", size,
                                                    "--impl", impl, "--json").stdout)["split_model"]["notes"]
    rndv = lambda ns: any("UCX_RNDV_THRESH" in n for n in ns)
    assert rndv(notes("32K", "mpich")) and rndv(notes("100K", "mpich"))
    assert not rndv(notes("10K", "mpich")) and not rndv(notes("100K", "openmpi"))
    one = tmp_path / "one.toml"
    one.write_text('name = "one"\n[[site]]\nname = "solo"\nnodes = 4\n')
    bad = [("-t", str(one), "--size", "1M"), ("-t", "paper", "--size", "1M", "--op", "scatter"),
           ("-t", "paper", "--size", "1M", "--impl", "mvapich")]
    # A summary written before the factor bands (version 1) is refused with the command that rewrites it.
    old = json.loads(SPLIT_SHIPPED.read_text())
    old["version"] = 1
    for v in (old["overall"], *old["by_op"].values()):
        del v["p90_log_error"]
    (tmp_path / "v1.json").write_text(json.dumps(old))
    cp = gridsplit("model", "advise", "-t", "paper", "--size", "1M", "--split-validation", str(tmp_path / "v1.json"),
                   check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
    assert "version 1" in cp.stderr and "gridsplit model validate-split" in cp.stderr
    for args in bad:
        cp = gridsplit("model", "advise", *args, check=False)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
        assert "measure" in cp.stderr or "netcheck" in cp.stderr
    # The gateway configs of a single site would split nothing: refused alike.
    for args in (("nodes-config", "-t", str(one)), ("config", "-t", str(one), "--site", "solo")):
        cp = gridsplit("gateway", *args, check=False)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
        assert "would" in cp.stderr, cp.stderr
    full = json.loads(gridsplit("model", "advise", "-t", "paper", "--scale", "1", "--size", "1M", "--json").stdout)
    notes = full["split_model"]["notes"]
    assert any(n.startswith("nic_mbps 1000 is outside") and "netcheck" in n for n in notes)


# -- issue 22's terms: a gateway feeding a node's port, a one-NIC gateway both ways, the halo ------------

HOLDOUT = ROOT / "results/matrix/2026-11-26-holdout"


def test_split_fed_port_loses_only_where_a_gateway_outruns_the_node_it_feeds():
    # 6 flows into a 32 KB port fed at twice its rate: KAPPA x 6 x 1448 / (0.3 x 32000) of its time.
    want = ST.FED_PORT_KAPPA * 6 * 1448 / (0.3 * 32_000)
    assert ST.fed_port_excess(6, 32_000, C100, 2 * C100) == pytest.approx(want)
    assert ST.fed_port_excess(6, 32_000, C100, 2 * C100, bursty=True) == pytest.approx(2 * want)
    assert ST.fed_port_excess(6, 32_000, C100, C100) == 0       # a gateway no faster than the node
    assert ST.fed_port_excess(1, 32_000, C100, 4 * C100) == 0   # one flow, paced at the node's rate
    assert ST.fed_port_excess(200, 32_000, C100, 4 * C100) == 1.0
    from gridsplit.topology_file import load_topology
    holdout = load_topology(str(HOLDOUT / "holdout.toml"))
    job = SM.Job("gather", 1_000_000, "openmpi")
    s = SM.one_to_many(holdout, job, True, True)
    # Measured 720 ms per 6 x 1 MB split gather (Open MPI); the root's NIC alone would give 541.
    assert s["fed_port"] > 0 and s["seconds"] == pytest.approx(0.720, rel=0.1)
    assert s["bottleneck"] == "lan_one"
    # On paper the gateways run at the nodes' rate: the term is off and the split gather as before.
    paper = load_topology("paper", nodes=4)
    assert SM.one_to_many(paper, job, True, True)["fed_port"] == 0


def test_split_one_nic_gateway_both_ways_with_sub_segment_windows_is_half_duplex():
    from gridsplit.capacity import lan_window_budget
    from gridsplit.topology_file import load_topology
    holdout = load_topology(str(HOLDOUT / "holdout.toml"))
    budget = lan_window_budget(holdout, "south")
    assert ST.half_duplex(budget, 36) and not ST.half_duplex(budget, 6) and not ST.half_duplex(0, 36)
    job = SM.Job("alltoall", 10_000, "openmpi")
    both = {frozenset(("south", "ridge"))}
    split = SM.alltoall(holdout, job, both)
    # 36 flows per site: each gateway carries 360 KB in from its nodes, 360 KB in from the WAN, and as much
    # out, one after the other through its 200 Mb/s NIC.
    assert split["half_duplex"] == ["ridge", "south"] and split["bottleneck"].endswith("in+out")
    assert split["parts"]["transfer"] == pytest.approx(4 * 36 * 10_000 / SM.Bps(200))
    # Measured 72-82 ms split (both libraries); a full-duplex NIC would give 46.
    assert 0.070 < split["seconds"] < 0.085
    # Pairwise steps above the eager limit: 6 flows of a step share the budget in whole segments.
    assert not SM.alltoall(holdout, SM.Job("alltoall", 1_000_000), both)["parts"].get("half_duplex")


def test_split_pairwise_steps_through_a_clamped_gateway_run_at_one_window_per_lan_turn():
    """§5.1 (g): the gateway's clamp divides its port's budget among every open relayed socket, of
    which a pairwise all-to-all step uses one per node, so that flow runs at its share per LAN turn."""
    from dataclasses import replace
    from gridsplit.capacity import lan_window_budget
    from gridsplit.topology_file import load_topology
    holdout = load_topology(str(HOLDOUT / "holdout.toml"))
    budget = lan_window_budget(holdout, "south")
    # 36 open sockets (6 nodes x 6 remote ranks): under Linux's smallest clamp, so the narrow floor.
    assert ST.clamp_share(budget, 36) == ST.NARROW_WINDOW and ST.clamp_share(0, 36) == float("inf")
    nic = SM.Bps(100)
    narrow = ST.clamped_flow_rate(ST.NARROW_WINDOW, nic)
    assert narrow == pytest.approx(ST.NARROW_WINDOW / (ST.NARROW_WINDOW / nic + ST.LAN_TURN_S))
    # A window of several segments pipelines: the node's NIC binds again; no clamp, no limit.
    assert ST.clamped_flow_rate(budget / 2, nic) == nic and ST.clamped_flow_rate(float("inf"), nic) == nic
    both = {frozenset(("south", "ridge"))}
    job = SM.Job("alltoall", 1_000_000, "mpich")   # MPICH runs it pairwise (Open MPI: linear, below)
    split = SM.alltoall(holdout, job, both)
    # Each step's slowest relayed pair moves 1 MB at the narrow rate: 11 steps.
    assert split["parts"]["transfer"] == pytest.approx(11 * 1_000_000 / narrow, rel=0.01)
    # Without the clamps (lan_tuning = false) the term is off, and direct never pays it.
    unclamped = replace(holdout, gateways=replace(holdout.gateways, lan_tuning=False))
    assert SM.alltoall(unclamped, job, both)["parts"]["transfer"] < split["parts"]["transfer"] / 2
    assert SM.alltoall(holdout, job, set())["seconds"] == SM.alltoall(unclamped, job, set())["seconds"]


def test_alltoall_follows_the_librarys_algorithm():
    """§5.2: Open MPI 4.1's tuned decision posts every message at once for most communicator sizes
    and sizes (pairwise only for 2 ranks, 1 MB at under 8, large messages at 64-1023); MPICH goes
    pairwise above 32 KB. The model's all-to-all runs what the library runs."""
    assert [ST.alltoall_algorithm("openmpi", p, m) for p, m in
            ((2, 10_000), (2, 100_000), (7, 100_000), (7, 1_000_000), (7, 2_000_000), (12, 1_000_000),
             (100, 100_000), (100, 1_000_000), (5000, 1_000_000))] == \
        ["pairwise", "linear", "linear", "pairwise", "linear", "linear", "linear", "pairwise", "linear"]
    assert ST.alltoall_algorithm("mpich", 12, 100_000) == "pairwise" and ST.alltoall_algorithm("mpich", 12, 10_000) == "linear"
    from gridsplit.topology_file import load_topology
    holdout = load_topology(str(HOLDOUT / "holdout.toml"))
    ompi = SM.alltoall(holdout, SM.Job("alltoall", 100_000, "openmpi"), set())
    mpich = SM.alltoall(holdout, SM.Job("alltoall", 100_000, "mpich"), set())
    assert (ompi["algorithm"], ompi["steps"], mpich["algorithm"], mpich["steps"]) == ("linear", 1, "pairwise", 11)
    # At once, a message shares its rank's NIC with the other ten, so it is no faster than ten steps.
    assert ompi["parts"]["transfer"] >= 10 * 100_000 / SM.Bps(100)


def test_split_validation_reads_rows_before_lan_pacing_as_unpaced():
    rows = [json.loads(l) for l in (HOLDOUT / "gather.jsonl").read_text().splitlines()]
    meta = rows[0]["topology"]
    assert "lan_pacing" not in meta["gateways"]
    assert splitvalidate.topology_from_meta(meta, "x").gateways.lan_pacing == "off"
    meta["gateways"]["lan_pacing"] = "auto"
    assert splitvalidate.topology_from_meta(meta, "x").gateways.lan_pacing == "auto"


def test_split_halo_counts_both_directions_through_the_gateway():
    topo = gw_topo()    # far 4 nodes, root 1, every NIC and gateway at 100 Mb/s
    assert SM.crossed_pairs(topo, "halo") == {frozenset(("far", "root"))}
    job = SM.Job("halo", 30_000)
    d, s = SM.halo(topo, job, set()), SM.halo(topo, job, {("far", "root")})
    # The root's node sends 2 messages and receives 2; its gateway takes in those 2 and the 2 from the WAN.
    assert d["parts"]["transfer"] == pytest.approx(2 * 30_000 / C100)
    assert s["bottleneck"] == "root gateway NIC in" and s["parts"]["transfer"] == pytest.approx(4 * 30_000 / C100)
    assert s["crossings"] == 2 and 1.3 < s["seconds"] / d["seconds"] < 1.7
    # Gateways at twice a node's rate carry it at the node's pace: split only adds its relays.
    fast = SM.halo(gw_topo("gateway_nic_mbps = 200\n"), job, {("far", "root")})
    assert fast["parts"]["transfer"] == pytest.approx(2 * 30_000 / C100)
    assert SM.cell(topo, job, ("far", "root"))["ratio"] == pytest.approx(s["seconds"] / d["seconds"])
    assert "halo" in SM.OPS and "streams" not in SM.cell(topo, job, ("far", "root"))


def test_a_wan_flow_beside_a_lan_flow_falls_to_the_floor_and_crawls_back():
    """§5.1 (j): a direct WAN connection that shares its receiver's port with a LAN flow loses
    what it sends while the LAN flow lasts, its window falling by β per round trip to two
    segments, then sends its message from there, one segment more per round trip; relayed,
    every flow into the port comes at LAN round trips."""
    rtt, volume = 0.020, 1_000_000
    # A rival of 0.2 s (10 round trips) against a window restarted at 60 KB: 60 KB x 0.7^10 is
    # under the floor, so the message leaves from 2 segments, in whole rounds below the pipe.
    w, k, sent = 2 * SM.MSS, 0, 0.0
    while sent + w + k * SM.MSS < volume:
        sent, k = sent + w + k * SM.MSS, k + 1
    want = 0.2 + volume / C100 + k * rtt - sent / C100
    assert ST.lan_rival_s(volume, 60_000, C100, rtt, 0.2) == pytest.approx(want)
    assert ST.fallen_window(60_000, 0.2, rtt) == 2 * SM.MSS
    # A short rival leaves more window: 60 KB x 0.7 after one round trip.
    assert ST.lan_rival_s(volume, 60_000, C100, rtt, 0.03) < want - 0.15
    # Four striped connections keep four floors and add four segments per round trip.
    assert ST.lan_rival_s(volume, 60_000, C100, rtt, 0.2, 4) < want
    # A gather of every node (`-n all`): the root's own site's senders are the LAN rival of each
    # direct remote group of Open MPI's linear gather; with the root alone on its site, no crawl.
    from dataclasses import replace
    from gridsplit.topology_file import load_topology
    h9 = load_topology(str(ROOT / "results/matrix/2026-11-28-holdout9/holdout9.toml"))
    alone = replace(h9, sites=[h9.sites[0], replace(h9.sites[1], nodes=1), h9.sites[2]])
    gather = lambda t, impl: SM.all_to_one(t, SM.Job("gather", 1_000_000, impl), set())["parts"]
    assert gather(h9, "openmpi")["incast"] > gather(alone, "openmpi")["incast"] + 0.05
    # The ring of gw_topo (root 1 node, far 4): a far node takes the root's message beside its far
    # neighbour's, so direct that crossing crawls; relayed, the root's message reaches it from far's
    # gateway at LAN round trips, and the link into that gateway's port does not overrun it here.
    topo, job = gw_topo(), SM.Job("halo", 1_000_000)
    d, s = SM.halo(topo, job, set()), SM.halo(topo, job, {("far", "root")})
    assert d["parts"]["incast"] > d["parts"]["transfer"]     # the crawl outlasts the bytes
    assert s["parts"]["incast"] < d["parts"]["incast"]
    # Relayed, the link crawls at the far gateway's port while that site's own relayed sends drain
    # through it: h1 (one node a site, full pacing) loses there at 1 MB ((h)); with (j) the link's
    # flight falls to the floor, so it costs more than (h)'s one round and regrowth. West's own 2 MB
    # take 42 ms at its 400 Mb/s gateway NIC, over two of the link's 20 ms round trips.
    h1 = load_topology(str(ROOT / "results/matrix/2026-11-27-halo-diagnosis/h1.toml"))
    job = SM.Job("halo", 1_000_000)
    msgs = {("east", "west"): 2, ("west", "east"): 2}
    relay = lambda a, b: a != b
    far = SM._far_ports(h1, job, msgs, relay, rivals=True)
    assert all(v[4] > 0.020 for v in far.values()) and all(v[4] == 0 for v in SM._far_ports(h1, job, msgs, relay).values())
    east, west = h1.site("east"), h1.site("west")
    with_j = SM._transfer(h1, job, east, west, True, SM.Bps(100), job.size, far=far[("east", "west")])
    without = SM._transfer(h1, job, east, west, True, SM.Bps(100), job.size, far=far[("east", "west")][:4] + (0.0,))
    assert with_j["incast"] > without["incast"] > 0


def test_adaptive_pacing_takes_the_far_ports_remainder():
    """§5.1 (h): paced at its whole path, a relayed halo's link overruns the far gateway's port
    that the far node sends through too, and loses; paced adaptively (the port less what the far
    node sends back on the link) it fits. The validation reads an A/B side's pacing from its rows."""
    from dataclasses import replace
    from gridsplit.topology_file import load_topology
    h1 = load_topology(str(ROOT / "results/matrix/2026-11-27-halo-diagnosis/h1.toml"))
    job, pair = SM.Job("halo", 100_000, "openmpi"), {("east", "west")}
    paced = {p: SM.halo(replace(h1, gateways=replace(h1.gateways, wan_pacing=p)), job, pair)["parts"]
             for p in ("full", "adaptive")}
    assert paced["full"]["incast"] > 0 and paced["adaptive"]["incast"] == 0
    assert paced["full"]["transfer"] == paced["adaptive"]["transfer"]
    # The validation gives each side of an A/B its own pacing. On three sites what the far site
    # sends to the third is not on the link's reverse direction, so some loss is left.
    ab = ROOT / "results/matrix/2026-11-27-adaptive-pacing/holdout3-halo.jsonl"
    cells = {(c["variant"], c["size"]): c for c in splitvalidate.file_cells(ab)}
    assert set(cells) == {(v, m) for v in ("full", "adaptive") for m in (100_000, 1_000_000)}
    full, adaptive = cells[("full", 100_000)], cells[("adaptive", 100_000)]
    assert 0 < adaptive["split_parts"]["incast"] < full["split_parts"]["incast"]
    assert adaptive["predicted_ratio"] < full["predicted_ratio"]
    # Both sides relayed the pair they named, not the recorded policy's (beta-gamma direct).
    assert all(c["kept_direct"] is False for c in cells.values())


def test_relayed_runs_count_what_a_relayed_pair_cost():
    """validate-split's never-slower view: a run relays its pairs for every cell, so the 10 KB
    exchanges that holdout8's policy pair slowed count against it, though the decision's score
    calls them right (predicted and measured on the direct side)."""
    d = ROOT / "results/matrix/2026-11-27-holdout8"
    res = splitvalidate.validate([d / f"{op}.jsonl" for op in ("halo", "alltoall", "gather")], "test", ROOT)
    runs = {(r["variant"], tuple(r["relayed"]), r["relayed_by"]): r for r in res["relayed_runs"]}
    assert set(runs) == {("adaptive", ("elm-gum",), "policy"), ("full", ("fir-gum",), "named")}
    policy = runs[("adaptive", ("elm-gum",), "policy")]
    assert policy["cells"] == 9 and policy["slower"] == policy["slower_scored_right"] == 2
    assert policy["worst"]["size"] == 10_000
    text = "\n".join(splitvalidate.report_lines(res))
    assert "Pairs chosen by the default policy: 0 of 1 runs" in text and "| holdout8 | adaptive | openmpi | elm-gum (policy) |" in text


def test_split_bench_all_layout_and_kept_direct_cells(tmp_path):
    from gridsplit.topology_file import load_topology
    topo = gw_topo()
    job = SM.Job("gather", 1_000_000)
    # A root alone on its site: -n all is the pair layout.
    assert SM.all_to_one(topo, job, {("far", "root")})["seconds"] == pytest.approx(SM.one_to_many(topo, job, True, True)["seconds"])
    ev3 = load_topology(str(ROOT / "results/matrix/2026-11-26-evidence/ev3.toml"))
    assert SM.crossed_pairs(ev3, "gather") == {frozenset(("east", "west")), frozenset(("north", "west"))}
    assert SM.all_to_one(ev3, job, {("east", "north")})["seconds"] == SM.all_to_one(ev3, job, set())["seconds"]
    # A run under a recorded policy that kept the pair direct: predicted 1, right only within 5 %.
    rows = [json.loads(l) for l in (HOLDOUT / "gather.jsonl").read_text().splitlines()]
    rows[0]["topology"]["gateways"]["split"] = "auto"
    rows[0]["lab"]["split_policy"] = {"south-ridge": "direct: predicted ..."}
    f = tmp_path / (splitvalidate.HELD_OUT_DIR + "/g.jsonl")
    f.parent.mkdir(parents=True)
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = splitvalidate.validate([f], "test", tmp_path)
    assert res["held_out"]["cells"] == 6 and res["held_out_kept_direct"]["cells"] == 6
    for c in res["cells"]:
        assert c["kept_direct"] and c["held_out"] and c["predicted_ratio"] == 1.0 and "would_split_ratio" in c
        assert c["right"] == (abs(c["measured_ratio"] - 1) <= 0.05)
    text = "\n".join(splitvalidate.report_lines(res))
    assert "| held out, kept direct by the policy" in text and "kept direct (would split" in text
    assert "held out, runs that relayed" not in text and res["held_out_split"] == {"cells": 0}


def test_record_predictions_before_a_measurement(tmp_path):
    out = tmp_path / "pred"
    gridsplit("model", "record-predictions", str(HOLDOUT / "holdout.toml"), "--out", str(out))
    rows = [json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()]
    assert rows[0]["kind"] == "gridsplit-split-predictions" and "holdout.toml" in str(rows[0]["sha256"])
    bench = [r for r in rows[1:] if r["layout"] == "bench -n all"]
    assert len(bench) == 2 * 3 * 4 and {r["op"] for r in bench} == {"gather", "alltoall", "bcast", "halo"}
    # The grid says split = "all": every bench run relays its one pair, as the pair's advice does.
    assert all(not r["kept_direct"] and r["relayed"] == ["ridge-south"] for r in bench)
    pair = next(r for r in rows[1:] if r["layout"] == "pair" and (r["op"], r["size"], r["impl"]) == ("halo", 10_000, "mpich"))
    same = next(r for r in bench if (r["op"], r["size"], r["impl"]) == ("halo", 10_000, "mpich"))
    assert pair["policy_split"] and pair["split_over_direct"] == pytest.approx(same["split_over_direct"])
    assert "| holdout | halo | openmpi |" in (out / "README.md").read_text()
    one = tmp_path / "one.toml"
    one.write_text('name = "one"\n[[site]]\nname = "solo"\nnodes = 4\n')
    cp = gridsplit("model", "record-predictions", str(one), "--out", str(out), check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
    # `--split` names the pairs the runs will split, as `bench --split` does, instead of a copy of the
    # grid with other [gateways] keys: the evidence grid whose policy keeps its pair direct, all split,
    # predicts what its split-forced copy (split = "all") does.
    ev = ROOT / "results/matrix/2026-11-26-evidence/ev2near.toml"
    forced = ROOT / "results/matrix/2026-11-28-direct-decisions/ev2near-all.toml"
    gridsplit("model", "record-predictions", str(ev), "--split", "all", "--out", str(tmp_path / "a"))
    gridsplit("model", "record-predictions", str(forced), "--out", str(tmp_path / "b"))
    a, b = ([json.loads(l) for l in (tmp_path / d / "predictions.jsonl").read_text().splitlines()] for d in "ab")
    assert a[0]["split"] == "all" and b[0]["split"] == "policy"
    key = lambda r: (r["layout"], str(r["pair"]), r["op"], r["size"], r["impl"])
    assert {key(r): r["split_over_direct"] for r in a[1:]} == {key(r): r["split_over_direct"] for r in b[1:]}
    assert all(r["relayed"] == ["east-west"] for r in a[1:] if r["layout"] == "bench -n all")
    assert "--split all" in (tmp_path / "a" / "README.md").read_text()
    for bad in (("--split", "east-nowhere"), ("--split", "all", "--run-policy-from", str(tmp_path / "a" / "predictions.jsonl"))):
        cp = gridsplit("model", "record-predictions", str(ev), *bad, "--out", str(tmp_path / "c"), check=False)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_the_policy_weighs_the_jobs_the_topology_names(tmp_path):
    """`[gateways] policy_ops` and `policy_sizes` are the jobs the default policy weighs: on the paper
    grid (evidence matrix, gateways at the nodes' NIC) the unknown job keeps bordeaux-sophia direct
    because a 1 MB halo would lose; a grid whose jobs are gathers splits it, and the reason lists
    only those jobs' ratios. The keys reach the results through the topology (Topology.to_dict)."""
    from gridsplit.topology_file import load_topology
    text = (ROOT / "results/matrix/2026-11-26-evidence/paperauto.toml").read_text()
    unknown = splitadvise.split_policy(load_topology(str(ROOT / "results/matrix/2026-11-26-evidence/paperauto.toml")))
    assert unknown[("bordeaux", "sophia")][0] is False and "halo" in unknown[("bordeaux", "sophia")][1]
    # The reason names the jobs that would split the pair on their own: here gathers only.
    assert unknown[("bordeaux", "sophia")][1].endswith('a job that runs only gather would split it on its own: '
                                                       '[gateways] policy_ops = ["gather"]')
    p = tmp_path / "paper-gathers.toml"
    assert "\n[gateways]" not in text
    p.write_text(text + '\n[gateways]\npolicy_ops = ["gather"]\npolicy_sizes = ["100K", 1000000]\n')
    t = load_topology(str(p))
    assert t.gateways.policy_jobs == (("gather", 100_000), ("gather", 1_000_000))
    yes, why = splitadvise.split_policy(t)[("bordeaux", "sophia")]
    assert yes and "gather 100K" in why and "halo" not in why and "10K" not in why.replace("100K", "")
    assert "policy_ops" not in why
    assert t.to_dict()["gateways"]["policy_ops"] == ("gather",)


def test_a_site_of_no_nodes_is_advised_not_divided_by(tmp_path):
    """A site of its gateway alone (`nodes = 0`, which the topology allows) sends and receives nothing:
    every command that runs the split model on the grid answers, and says why its pairs stay direct."""
    text = (ROOT / "results/matrix/2026-11-26-evidence/ev3.toml").read_text()
    head, sep, last = text.rpartition("[[site]]")
    topo = tmp_path / "nodes0.toml"
    topo.write_text(head + sep + last.replace("nodes = 2", "nodes = 0", 1))
    assert "nodes = 0" in topo.read_text()
    nodes = gridsplit("gateway", "nodes-config", "-t", str(topo)).stdout
    assert "site north" in nodes and "Traceback" not in nodes
    adv = json.loads(gridsplit("model", "advise", "-t", str(topo), "--size", "1M", "--json").stdout)
    north = [p for p in adv["policy"] if "north" in p["sites"]]
    assert len(north) == 2 and all(not p["split"] and p["why"] == "north has no nodes" for p in north), north
