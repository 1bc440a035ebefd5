"""Refusals: not root, missing tools, missing builds — one clear line each."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gridsplit import sysdeps
from gridsplit.errors import GridsplitError
from gridsplit.lab import gateways, realize
from gridsplit.lab.names import LabNames
from gridsplit.topology import LabSettings
from gridsplit.topology_file import load_topology


def test_refuses_without_root(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(GridsplitError, match="needs root"):
        realize.up("mini", None, LabNames("gsz"))
    with pytest.raises(GridsplitError, match="needs root"):
        realize.down(LabNames("gsz"))


def test_missing_tool_names_the_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(GridsplitError, match="apt-get install iperf3"):
        sysdeps.need_tool("iperf3")
    with pytest.raises(GridsplitError, match="apt-get install mpich"):
        sysdeps.need_tool("mpiexec.mpich")


def test_missing_build_says_make_build(monkeypatch, tmp_path):
    monkeypatch.setenv("GRIDSPLIT_WANEM", str(tmp_path / "nope"))
    with pytest.raises(GridsplitError, match="does not exist"):
        sysdeps.built("gridsplit-wanem")


def test_bad_prefix():
    with pytest.raises(GridsplitError, match="lab prefix"):
        LabNames.from_env("Bad-Prefix")


def test_lab_switches_live_in_the_topology(tmp_path):
    """The lab's measurement switches are `[lab]` keys of the topology, recorded with it."""
    mini = (Path(__file__).resolve().parent.parent / "python/gridsplit/presets/mini.toml").read_text()
    default = load_topology("mini")
    assert default.lab == LabSettings()
    tuned = gateways.gateway_host_sysctls(default.lab)
    assert tuned["net.ipv4.tcp_pacing_ss_ratio"] == "1000" and tuned["net.ipv4.tcp_slow_start_after_idle"] == "0"
    p = tmp_path / "switched.toml"
    p.write_text(mini + '[lab]\npacing_ratio = "kernel"\nsub_segment = false\ninitrwnd = 0\nidle = "halt"\n'
                 'gateway_rt = 0\nlan_mss = "auto"\n')
    t = load_topology(str(p))
    assert gateways.gateway_host_sysctls(t.lab) == {"net.ipv4.tcp_slow_start_after_idle": "0"}
    assert (t.lab.sub_segment, t.lab.initrwnd, t.lab.idle, gateways.gateway_rt_priority(t)) == (False, 0, "halt", 0)
    assert t.to_dict()["lab"]["pacing_ratio"] == "kernel"
    for bad, msg in (('pacing_ratio = "fast"', "lab.pacing_ratio: must be one of tuned, kernel"),
                     ("initrwnd = -1", "lab.initrwnd: must be ≥ 0"),
                     ("lan_mss = 100", "lab.lan_mss: give 0"),
                     ('idle = "sometimes"', "lab.idle: must be one of poll, halt"),
                     ("sub_segment = 1", "lab.sub_segment: must be true or false"),
                     ("steer = true", "lab.steer: unknown key; did you mean 'wanem_steer'?")):
        p.write_text(mini + f"[lab]\n{bad}\n")
        with pytest.raises(GridsplitError, match=re.escape(msg)):
            load_topology(str(p))


def test_strategy_names_match_the_gateways_registry():
    """One registry of strategies (gridsplitd's); the CLI's list must be the same."""
    from gridsplit.topology import STRATEGIES
    cp = subprocess.run([sysdeps.built("gridsplitd"), "--list-strategies"], text=True, capture_output=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert tuple(cp.stdout.split()) == STRATEGIES
