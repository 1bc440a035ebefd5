"""`gridsplit bench ab`: two gridsplitd builds (or settings) in alternating rounds on the mini lab."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import gridsplit
from gridsplit.bench.ab import compare, parse_side, plan
from gridsplit.bench.results import read_rows, variant_tag
from gridsplit.errors import GridsplitError
from gridsplit.lab.names import LabNames
from gridsplit.sysdeps import built
from gridsplit.topology_file import load_topology


def test_sides_alternate_and_each_side_keeps_its_settings():
    g = load_topology("mini").gateways
    a, b = parse_side("A", ""), parse_side("B", "wan_streams=4,split=all,label=four")
    pts = plan("gather", g, (a, b), ["openmpi"], [2], [1000, 100_000], 3, direct=True)
    order = [(p.repeat, p.mode, p.ab) for p in pts if p.size == 1000]
    assert order == [(0, "direct", None), (0, "split", "A"), (0, "split", "four"),
                     (1, "direct", None), (1, "split", "four"), (1, "split", "A"),
                     (2, "direct", None), (2, "split", "A"), (2, "split", "four")]
    four = [p for p in pts if p.ab == "four"]
    assert all(p.streams == 4 and p.split == "all" and p.strategy == g.strategy for p in four)
    assert all(p.streams == g.wan_streams and p.split == "policy" for p in pts if p.ab == "A")
    # Rows of the two sides stay apart in resume keys and in every table.
    assert len({p.key for p in pts}) == len(pts)


def test_lan_pacing_is_a_side_key_recorded_in_each_row():
    """`bench ab alltoall --a lan_pacing=off --b lan_pacing=on`: the sides differ in lan_pacing only, each
    point's variant records it, and a side that does not set it runs the topology's."""
    from gridsplit.bench.ab import parse_sides
    g = load_topology("mini").gateways
    a, b = parse_sides("lan_pacing=off", "lan-pacing=on")
    assert (a.settings, b.settings, a.label, b.label) == ({"lan_pacing": "off"}, {"lan_pacing": "on"}, "A", "B")
    pts = plan("alltoall", g, (a, b), ["openmpi"], [2], [10_000], 2, direct=True)
    assert {(p.ab, (p.variant or {}).get("lan_pacing")) for p in pts} == {(None, None), ("A", "off"), ("B", "on")}
    assert len({p.key for p in pts}) == len(pts)
    auto = plan("alltoall", g, (parse_side("A", ""), parse_side("B", "lan_pacing=auto")), ["openmpi"], [2], [10_000],
                2, direct=False)
    assert {(p.ab, p.pacing) for p in auto} == {("A", g.lan_pacing), ("B", "auto")}
    assert "lan_pacing" in gridsplit("bench", "ab", "--help").stdout
    # wan_quickack: on/off, recorded per point like wan_pacing; anything else is one line.
    q = plan("alltoall", g, parse_sides("", "wan_quickack=on"), ["openmpi"], [2], [10_000], 2, direct=False)
    assert {(p.ab, (p.variant or {}).get("wan_quickack")) for p in q} == {("A", g.wan_quickack), ("B", True)}
    with pytest.raises(GridsplitError, match="wan_quickack"):
        parse_sides("", "wan_quickack=yes")


def test_compare_pairs_the_sides_by_round():
    def row(mode, ab, k, t):
        return {"kind": "point", "op": "gather", "impl": "openmpi", "nodes": 2, "size_bytes": 1000, "mode": mode,
                "variant": {"ab": ab} if ab else None, "repeat": k, "total_s": t}
    rows = [row("direct", None, 0, 2.0), row("split", "A", 0, 1.0), row("split", "B", 0, 0.5),
            row("direct", None, 1, 2.2), row("split", "B", 1, 0.9), row("split", "A", 1, 1.0)]
    (c,) = compare(rows, "A", "B")
    assert c["rounds"] == 2 and c["ratio_min"] == 0.5 and c["ratio_max"] == 0.9 and c["ratio"] == pytest.approx(0.7)
    assert c["direct_s"] == pytest.approx(2.1)
    assert variant_tag(rows[2]) == "B"


@pytest.mark.parametrize("text, msg", [
    ("wan_streams=17", "not auto or a number of connections 1..16"),
    ("colour=red", "is not KEY=VALUE"),
    ("strategy=fastest", "is not one of"),
    ("lan_pacing=yes", "lan_pacing='yes' is not one of auto, on, off"),
    ("split=east-", "split: 'east-' is not policy, all, none, root or site pairs joined by"),
    ("gridsplitd=/nonexistent/gridsplitd", "is not an executable file"),
    ("policy_ops=gather+scan", "policy_ops: must be a non-empty list of gather, bcast, alltoall, halo"),
    ("policy_sizes=100K+10M", "policy_sizes: '10M' is not a message size from 1K to 2M; join several with"),
    ("policy_ops=gather,split=all", "policy_ops/policy_sizes choose the pairs of split=policy; drop split=all"),
])
def test_bad_sides_are_one_line(text, msg):
    with pytest.raises(GridsplitError, match=msg):
        parse_side("B", text)
    cp = gridsplit("bench", "ab", "gather", "--b", text, check=False)
    assert cp.returncode != 0 and msg in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


def test_a_side_with_policy_jobs_splits_the_pairs_of_that_policy():
    """policy_ops/policy_sizes on a side are the topology's [gateways] keys for that side only: on the
    paper grid of the evidence matrix the unknown job's policy keeps bordeaux-sophia direct (a 1 MB
    halo would lose) and a gathering job's splits it (test_model checks the policy itself); the
    side's split names the pair, and its reasons are recorded. A side without them is unchanged."""
    from pathlib import Path
    topo = load_topology(str(Path(__file__).parent.parent / "results/matrix/2026-11-26-evidence/paperauto.toml"))
    plain = parse_side("A", "")
    assert plain.for_topology(topo) is plain
    gathers = parse_side("B", "policy_ops=gather,policy_sizes=100K+1M").for_topology(topo)
    assert gathers.settings["split"] == "bordeaux-sophia"
    assert gathers.settings["policy_ops"] == ("gather",) and gathers.settings["policy_sizes"] == (100_000, 1_000_000)
    assert gathers.settings["policy_split"]["bordeaux-sophia"].startswith("split")
    halos = parse_side("B", "policy_ops=halo,policy_sizes=1M").for_topology(topo)
    assert halos.settings["split"] == "none" and "halo" in halos.settings["policy_split"]["bordeaux-sophia"]
    assert gathers.describe()["policy_split"] == gathers.settings["policy_split"]
    with pytest.raises(GridsplitError, match="splits every pair"):  # `paper` itself says split = "all"
        parse_side("B", "policy_ops=gather").for_topology(load_topology("paper"))


def test_the_same_gateways_on_both_sides_are_refused():
    cp = gridsplit("bench", "ab", "gather", "--a", "wan_streams=2", "--b", "wan_streams=2", check=False)
    assert cp.returncode != 0 and "describe the same gateways" in cp.stderr


@pytest.mark.lab
@pytest.mark.mpi
def test_ab_runs_another_binary_then_the_lab_returns_to_its_own(lab, tmp_path):
    """Side B is a copy of the built gridsplitd at another path: the gateways really run it
    (their /proc exe), its digest is recorded, and a later sweep restarts them on the build."""
    other = tmp_path / "other" / "gridsplitd"
    other.parent.mkdir()
    shutil.copy2(built("gridsplitd"), other)
    out = tmp_path / "ab.jsonl"
    args = ["bench", "ab", "gather", "-t", "mini", "-n", "1", "-s", "10K", "-r", "5", "--rounds", "3", "--no-report"]
    cp = gridsplit(*args, "--b", f"gridsplitd={other},label=copy", "--out", str(out), timeout=600)
    assert "copy/A" in cp.stdout
    rows = read_rows(out)
    meta = rows[0]
    assert meta["ab"]["b"]["gridsplitd"]["path"] == str(other) and len(meta["ab"]["b"]["gridsplitd"]["sha256"]) == 16
    points = [r for r in rows if r["kind"] == "point"]
    assert [(r["repeat"], variant_tag(r)) for r in points] == [
        (0, "direct"), (0, "A"), (0, "copy"), (1, "direct"), (1, "copy"), (1, "A"), (2, "direct"), (2, "A"), (2, "copy")]
    # The last round ended with side B: the gateways run the copy.
    assert _gateway_exes() == {str(other)}
    # Resuming the same comparison measures nothing; another comparison needs another file.
    cp = gridsplit(*args, "--b", f"gridsplitd={other},label=copy", "--out", str(out), timeout=120)
    assert "9 of 9 points already measured" in cp.stdout
    cp = gridsplit(*args, "--b", "wan_streams=2", "--out", str(out), check=False)
    assert cp.returncode != 0 and "other ab settings" in cp.stderr
    # A plain sweep after it runs on this checkout's build again.
    gridsplit("bench", "gather", "-t", "mini", "-n", "1", "-s", "10K", "-r", "5", "--impl", "openmpi",
              "--modes", "split", "--out", str(tmp_path / "after.jsonl"), "--no-report", timeout=300)
    assert _gateway_exes() == {os.path.realpath(built("gridsplitd"))}


def _gateway_exes() -> set[str]:
    state = json.loads(LabNames.from_env().state_file.read_text())
    return {os.path.realpath(f"/proc/{pid}/exe") for k, pid in state["pids"].items() if k.startswith("gw-")}
