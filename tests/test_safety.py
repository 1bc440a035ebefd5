"""Refusals: not root, missing tools, missing builds — one clear line each."""

from __future__ import annotations

import pytest

from gridsplit import sysdeps
from gridsplit.errors import GridsplitError
from gridsplit.lab import realize
from gridsplit.lab.names import LabNames


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


def test_lab_pacing_ratio_switch(monkeypatch):
    """The gateway hosts' sysctls: gridsplit's by default, the kernel's pacing ratios on request, a clear refusal otherwise."""
    monkeypatch.delenv("GRIDSPLIT_LAB_PACING_RATIO", raising=False)
    tuned = realize.gateway_host_sysctls()
    assert tuned["net.ipv4.tcp_pacing_ss_ratio"] == "1000" and tuned["net.ipv4.tcp_slow_start_after_idle"] == "0"
    monkeypatch.setenv("GRIDSPLIT_LAB_PACING_RATIO", "kernel")
    assert realize.gateway_host_sysctls() == {"net.ipv4.tcp_slow_start_after_idle": "0"}
    monkeypatch.setenv("GRIDSPLIT_LAB_PACING_RATIO", "fast")
    with pytest.raises(GridsplitError, match="give 'tuned'"):
        realize.gateway_host_sysctls()


def test_lab_sub_segment_switch(monkeypatch):
    """Sub-segment LAN windows: on by default, off on request, a clear refusal otherwise."""
    monkeypatch.delenv("GRIDSPLIT_LAB_SUB_SEGMENT", raising=False)
    assert realize.gateway_sub_segment() == "true"
    monkeypatch.setenv("GRIDSPLIT_LAB_SUB_SEGMENT", "0")
    assert realize.gateway_sub_segment() == "false"
    monkeypatch.setenv("GRIDSPLIT_LAB_SUB_SEGMENT", "yes")
    with pytest.raises(GridsplitError, match="give 1"):
        realize.gateway_sub_segment()


def test_lab_initrwnd_switch(monkeypatch):
    """The gateway hosts' initial LAN window: one segment by default, the kernel's on request, a clear refusal otherwise."""
    monkeypatch.delenv("GRIDSPLIT_LAB_INITRWND", raising=False)
    assert realize.gateway_initrwnd() == 1
    monkeypatch.setenv("GRIDSPLIT_LAB_INITRWND", "0")
    assert realize.gateway_initrwnd() == 0
    monkeypatch.setenv("GRIDSPLIT_LAB_INITRWND", "one")
    with pytest.raises(GridsplitError, match="number of segments"):
        realize.gateway_initrwnd()
