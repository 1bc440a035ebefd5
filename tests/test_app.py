"""`gridsplit bench app`: a tiny MPI program with a known pass/fail line (mpi/apptoy.c) on the
mini lab, in both modes; a hang recorded as a timeout; bad input as one line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import gridsplit

from gridsplit.bench.app import place
from gridsplit.bench.appresults import render_app_summary
from gridsplit.bench.appsummary import summarize_apps
from gridsplit.bench.results import read_rows
from gridsplit.topology_file import load_topology

ROOT = Path(__file__).resolve().parent.parent
TOY = str(ROOT / "build" / "mpi" / "openmpi" / "apptoy")
PATTERNS = ("--time-pattern", r"apptoy: time ([0-9.]+) s", "--pass-pattern", r"apptoy: check PASSED")


def _one_line(cp) -> str:
    """A refusal: non-zero exit, no traceback, one line on stderr; that line."""
    assert cp.returncode != 0, cp.stdout
    assert "Traceback" not in cp.stderr, cp.stderr
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, cp.stderr
    return lines[0]


def test_placement_rules():
    topo = load_topology("mini", None, None)
    assert [h.name for h in place(topo, 4, "round-robin", None)] == ["east-1", "west-1", "east-2", "west-2"]
    assert [h.name for h in place(topo, 4, "block", None)] == ["east-1", "east-2", "west-1", "west-2"]
    assert [h.name for h in place(topo, 3, "block", None)] == ["east-1", "east-2", "west-1"]
    assert [h.name for h in place(topo, 2, "round-robin", ["west-2", "east-1"])] == ["west-2", "east-1"]


def test_figures_from_name_value_lines_and_from_lammps_timing_breakdown():
    """HPCC's NAME=VALUE summary lines and LAMMPS's "MPI task timing breakdown" (each section's
    average over the ranks, the table's second number) become figures; a row without a number
    (LAMMPS's "Other" has no min column) and an absent name are left out."""
    from gridsplit.bench.app import figures
    from gridsplit.bench.apppresets import LAMMPS_FIGURES
    assert figures(("A", "B", "C"), "A=1.5\nB=x\nnoise\n") == {"A": 1.5}
    lammps = ("Section |  min time  |  avg time  |  max time  |%varavg| %total\n"
              "Pair    | 0.35047    | 0.52935    | 0.64053    |  16.4 |  2.70\n"
              "Comm    | 18.703     | 18.862     | 19.083     |   3.3 | 96.11\n"
              "Other   |            | 0.0145     |            |       |  0.08\n")
    assert figures(LAMMPS_FIGURES, lammps) == {"Pair_s": 0.52935, "Comm_s": 18.862}


def test_bad_input_is_one_line(tmp_path):
    line = _one_line(gridsplit("bench", "app", "--preset", "nosuch", check=False))
    assert "no such preset" in line and "lammps-lj" in line
    line = _one_line(gridsplit("bench", "app", "--time-pattern", "(unclosed", "--", TOY, check=False))
    assert "not a valid regular expression" in line
    line = _one_line(gridsplit("bench", "app", "--impl", "mpich", "--", TOY, check=False))
    assert "built for openmpi, not mpich" in line and "--impl openmpi" in line
    # A preset whose Debian package is missing: lmp not on the PATH.
    cp = gridsplit_env({"PATH": str(tmp_path)}, "bench", "app", "--preset", "lammps-lj")
    line = _one_line(cp)
    assert "lammps" in line and "apt-get install lammps" in line


def gridsplit_env(env: dict[str, str], *args: str):
    import subprocess
    return subprocess.run([sys.executable, "-m", "gridsplit", *args], text=True, capture_output=True, timeout=60,
                          env={**os.environ, **env})


@pytest.mark.lab
@pytest.mark.mpi
def test_app_both_modes_pass_fail_and_timeout(lab, tmp_path):
    if not Path(TOY).exists():
        pytest.skip("mpi/apptoy not built (make build)")
    out = tmp_path / "ok.jsonl"
    cp = gridsplit("bench", "app", "-t", "mini", "-k", "1", *PATTERNS, "--out", str(out), "--no-report",
                   "--", TOY, "-r", "5", timeout=180)
    assert "split/direct" in cp.stdout
    rows = [r for r in read_rows(out) if r["kind"] == "app"]
    assert [r["mode"] for r in rows] == ["direct", "split"]
    for r in rows:
        assert r["status"] == "ok" and r["exit_status"] == 0 and r["verified"] is True, r
        assert 0 < r["app_time_s"] <= r["wall_s"] and r["time_s"] == r["app_time_s"]
        # Ranks spread over both sites, round-robin, and where they really ran (the wrapper's report).
        assert r["placement"]["hosts"] == ["east-1", "west-1", "east-2", "west-2"]
        assert r["placement"]["sites"] == {"east": 2, "west": 2}
        assert r["placement"]["observed"] == {"0": "east-1", "1": "west-1", "2": "east-2", "3": "west-2"}
        assert {"local", "distant", "by_host"} <= set(r["counters"])
        assert len(r["cpu"]["ranks"]["per_rank"]) == 4 and r["cpu"]["ranks"]["mean_pct"] is not None
        assert isinstance(r["drops"], dict) and r["emulator"]["packets"] > 0
    split = rows[1]
    assert set(split["cpu"]["gateways"]) == {"east", "west"} and split["variant"]["split"] == "policy"
    # In split mode the cross-site data went through the gateways' WAN link.
    assert sum(split["counters"]["by_host"]["east-gw"].values()) > 0
    s = summarize_apps(rows)
    assert len(s) == 1 and s[0]["ratio"] is not None and s[0]["verified"] == {"direct": [1, 1], "split": [1, 1]}
    cp = gridsplit("report", str(out), "-o", str(tmp_path / "report"), timeout=120)
    assert "apptoy" in (tmp_path / "report" / "index.html").read_text()

    # A failing check: recorded, not verified; and a hang: stopped at --timeout, recorded as such.
    out = tmp_path / "bad.jsonl"
    gridsplit("bench", "app", "-t", "mini", "-k", "1", "--modes", "split", *PATTERNS, "--out", str(out),
              "--no-report", "--", TOY, "-r", "2", "--fail", timeout=120)
    gridsplit("bench", "app", "-t", "mini", "-k", "1", "--modes", "direct", *PATTERNS, "--timeout", "6",
              "--out", str(out.with_name("hang.jsonl")), "--no-report", "--", TOY, "-r", "1", "--hang", timeout=120)
    (fail,) = [r for r in read_rows(out) if r["kind"] == "app"]
    assert fail["status"] == "failed" and fail["exit_status"] != 0 and fail["verified"] is False
    assert any("check FAILED" in l for l in fail["output_tail"])
    (hang,) = [r for r in read_rows(out.with_name("hang.jsonl")) if r["kind"] == "app"]
    assert hang["status"] == "timeout" and hang["exit_status"] is None and hang["verified"] is False
    assert 6 <= hang["wall_s"] < 30

    # A pattern that matches nothing in a run that ended well: one line.
    cp = gridsplit("bench", "app", "-t", "mini", "-k", "1", "--modes", "direct", "--time-pattern", r"elapsed (\d+)",
                   "--out", str(tmp_path / "nomatch.jsonl"), "--no-report", "--", TOY, "-r", "1",
                   check=False, timeout=120)
    line = [l for l in cp.stderr.splitlines() if l.strip()]
    assert cp.returncode != 0 and "Traceback" not in cp.stderr and len(line) == 1, cp.stderr
    assert "matched nothing" in line[0] and "elapsed" in line[0]


@pytest.mark.lab
@pytest.mark.mpi
def test_app_ab_of_two_gateway_settings(lab, tmp_path):
    """`bench app --a/--b`: each round runs direct, then the two sides in alternating order, the lab's
    gateways restarted with each; rows carry the side's label and the summary gives B/A per round."""
    if not Path(TOY).exists():
        pytest.skip("mpi/apptoy not built (make build)")
    out = tmp_path / "ab.jsonl"
    cp = gridsplit("bench", "app", "-t", "mini", "-k", "2", *PATTERNS, "--a", "lan_tuning=on,label=clamps",
                   "--b", "lan_tuning=off,label=free", "--out", str(out), "--no-report", "--", TOY, "-r", "3",
                   timeout=240)
    rows = [r for r in read_rows(out) if r["kind"] == "app"]
    order = [(r["repeat"], r["mode"], (r["variant"] or {}).get("ab")) for r in rows]
    assert order == [(0, "direct", None), (0, "split", "clamps"), (0, "split", "free"),
                     (1, "direct", None), (1, "split", "free"), (1, "split", "clamps")]
    assert all(r["status"] == "ok" and r["verified"] is True for r in rows)
    assert [(r["variant"] or {}).get("lan_tuning") for r in rows if r["mode"] == "split"] == [True, False, False, True]
    assert "free/clamps" in cp.stdout and "over 2 rounds" in cp.stdout
    meta = read_rows(out)[0]
    assert meta["ab"]["a"]["label"] == "clamps" and meta["ab"]["b"]["lan_tuning"] is False
    assert {s["variant"] for s in summarize_apps(rows)} == {"clamps", "free"}
    # The summary says which row is which side.
    con = Console(width=250, record=True)
    render_app_summary(summarize_apps(rows), con, "ab")
    text = con.export_text()
    assert "split as" in text and "clamps" in text


def test_app_ab_bad_input_is_one_line():
    line = _one_line(gridsplit("bench", "app", "--a", "lan_tuning=off", "--", TOY, check=False))
    assert "needs both --a and --b" in line
    line = _one_line(gridsplit("bench", "app", "--a", "lan_tuning=on", "--b", "lan_tuning=on", "--", TOY, check=False))
    assert "same gateways" in line
    line = _one_line(gridsplit("bench", "app", "--a", "colour=red", "--b", "label=x", "--", TOY, check=False))
    assert "is not KEY=VALUE" in line
    line = _one_line(gridsplit("bench", "app", "--modes", "direct", "--a", "label=x", "--b", "label=y", "--", TOY,
                               check=False))
    assert "keep split in --modes" in line


def test_mpi4py_outcomes_and_their_diff(tmp_path):
    """Per-rank outcomes merge worst-first, and a test whose outcome differs between modes is named."""
    import json
    from gridsplit.bench.apppresets import _mpi4py_outcomes
    from gridsplit.bench.appsummary import outcome_diff
    for rank, outcomes in ((0, {"a": "passed", "b": "skipped", "c": "passed"}),
                           (1, {"a": "passed", "b": "passed", "c": "failed"})):
        (tmp_path / f"mpi4py-{rank}.json").write_text(json.dumps({"rank": rank, "outcomes": outcomes}))
    got = _mpi4py_outcomes(tmp_path, 2)
    assert got["tests"] == {"passed": ["a"], "failed": ["c"], "skipped": ["b"], "xfail": []}
    assert got["verified"] is False and got["tests_ranks_reported"] == [0, 1]
    assert _mpi4py_outcomes(tmp_path, 3)["verified"] is False  # a rank that reported nothing
    same = {"passed": ["a", "b"], "failed": [], "skipped": ["c"], "xfail": []}
    other = {"passed": ["a"], "failed": ["b"], "skipped": ["c"], "xfail": []}
    d = outcome_diff([{"mode": "direct", "tests": same}], [{"mode": "split", "tests": same}])
    assert d["identical"] and d["counts"]["passed"] == 2
    d = outcome_diff([{"mode": "direct", "tests": same}], [{"mode": "split", "tests": other}])
    assert not d["identical"] and d["differs"] == {"b": {"direct": ["passed"], "split": ["failed"]}}
