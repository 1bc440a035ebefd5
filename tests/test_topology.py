"""The topology model: presets, address plan, and clear errors on bad files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gridsplit.errors import GridsplitError
from gridsplit.topology_file import load_topology, parse_topology
import tomllib


def test_paper_preset_is_the_seed_platform_scaled():
    t = load_topology("paper")
    b, s = t.site("bordeaux"), t.site("sophia")
    assert (b.nodes, b.max_nodes, s.nodes) == (4, 20, 1)
    assert b.gateway and s.gateway
    assert t.rtt_ms("bordeaux", "sophia") == pytest.approx(10.6)
    # 10x scaling: NICs 1 Gb/s -> 100 Mb/s, WAN 10 -> 1 Gb/s, 4 MB buffers -> 410 KB, 2 ms port buffers
    assert t.scale == 10
    assert b.nic_mbps == 100 and t.wan("bordeaux", "sophia").rate_mbps == 1000
    assert b.tcp.rmem_max == 419430 and b.tcp.congestion == "cubic" and b.tcp.sack
    assert b.switch_buffer_bytes * 8 / (b.nic_mbps * 1e6) == pytest.approx(0.002)
    full = load_topology("paper", scale=1)
    assert full.site("bordeaux").nic_mbps == 1000 and full.site("bordeaux").tcp.rmem_max == 4194304
    assert full.rtt_ms("bordeaux", "sophia") == t.rtt_ms("bordeaux", "sophia")
    assert len(load_topology("paper", nodes=20).site("bordeaux").__dict__) and load_topology("paper", 20).site("bordeaux").nodes == 20
    with pytest.raises(GridsplitError, match="1 to 20 nodes"):
        load_topology("paper", nodes=21)


def test_g5k9_preset_uses_seed_rtt_matrix():
    t = load_topology("g5k9")
    assert len(t.sites) == 9 and len(t.wans) == 36
    # Guillier et al. 2006 Table 2: bordeaux<->sophia 10.6 / 10.60 ms; grenoble<->lyon 3.3 / 3.28 ms
    assert t.rtt_ms("bordeaux", "sophia") == pytest.approx(10.6, abs=0.001)
    assert t.rtt_ms("lyon", "grenoble") == pytest.approx(3.29, abs=0.001)
    assert all(s.tcp.rmem_max == 17476 for s in t.sites)  # untuned default images (170 KB), scaled 1/10
    assert all(s.tcp.rmem_max == 174760 for s in load_topology("g5k9", scale=1).sites)


def test_address_plan_is_disjoint():
    t = load_topology("g5k9")
    subnets = [s.subnet for s in t.sites] + [w.subnet for w in t.wans]
    assert len(set(subnets)) == len(subnets)
    ips = [h.ip for h in t.hosts()]
    assert len(set(ips)) == len(ips)
    for s in t.sites:
        assert s.gateway_ip in s.subnet and s.router_ip in s.subnet
    for w in t.wans:
        assert w.ip(w.a) != w.ip(w.b) and w.ip(w.a) in w.subnet


def test_mini_bottleneck():
    t = load_topology("mini")
    a, b = t.host("east-1"), t.host("west-1")
    assert t.bottleneck_mbps(a, b) == 100
    assert t.host("10.71.2.1").name == "west-1"
    with pytest.raises(GridsplitError, match="did you mean west-1"):
        t.host("wset-1")


GOOD = """
[[site]]
name = "a"
nodes = 1
[[site]]
name = "b"
nodes = 1
[[wan]]
sites = ["a", "b"]
rtt_ms = 10
"""

BAD = [
    (GOOD.replace('nodes = 1\n[[site]]', 'nodez = 1\n[[site]]', 1), "site[0].nodez: unknown key; did you mean 'nodes'?"),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = "ten"'), "wan[0].rtt_ms: must be a number"),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = -1'), "wan[0].rtt_ms: must be > 0"),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = 10\ndelay_ms = 5'), "give exactly one of delay_ms"),
    (GOOD.replace('sites = ["a", "b"]', 'sites = ["a", "c"]'), "wan[0].sites: unknown site 'c'"),
    (GOOD.replace('sites = ["a", "b"]', 'sites = ["a", "a"]'), "two different sites"),
    (GOOD.replace('name = "b"', 'name = "a"'), "site[1].name: site 'a' is defined twice"),
    (GOOD.replace('name = "b"', 'name = "B-1"'), "site[1].name: 'B-1' must be 1-12 lowercase"),
    (GOOD + '[[site]]\nname = "c"\n', "no [[wan]] link between a and c"),
    (GOOD + '[addressing]\nsites = "8.8.0.0/16"\n', "addressing.sites: 8.8.0.0/16 is not a private range"),
    (GOOD + '[addressing]\nsites = "10.71.0.1/16"\n', "is not an IPv4 prefix"),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = 10\nloss = 0.9'), "wan[0].loss: must be ≤ 0.5"),
    (GOOD.replace('nodes = 1', 'nodes = 5\nmax_nodes = 2', 1), "site[0].nodes: 5 exceeds max_nodes = 2"),
    ('[[wan]]\nsites=["a","b"]\nrtt_ms=1\n', "at least one [[site]] table is required"),
    (GOOD.replace('nodes = 1\n[[site]]', 'nodes = 1\n[site.tcp]\ncongestion = "bic"\n[[site]]', 1), "site[0].tcp.congestion: must be one of cubic, reno, bbr"),
    (GOOD + '[gateways]\nlan_tuning = "yes"\n', "gateways.lan_tuning: must be true or false"),
    (GOOD + '[gateways]\nlan_pacing = "yes"\n', 'gateways.lan_pacing: must be "auto", "on" or "off", got \'yes\''),
    (GOOD + '[gateways]\nlan_pacing = true\n', 'gateways.lan_pacing: must be "auto", "on" or "off", got True'),
    (GOOD + '[gateways]\nwan_pacing = "half"\n', "gateways.wan_pacing: must be one of full, shared, adaptive, got 'half'"),
    (GOOD + '[gateways]\nlan_rto_min_us = 900000\n', "gateways.lan_rto_min_us: must be ≤ 200000"),
    (GOOD + '[gateways]\nlan_delack_max_us = -1\n', "gateways.lan_delack_max_us: must be ≥ 0"),
    (GOOD + '[gateways]\nlan_delack_max_us = 1000\n', "gateways.lan_delack_max_us: must be 0 or 2000-200000 (µs)"),
    (GOOD + '[gateways]\noutage_limit_s = 0.5\n', "gateways.outage_limit_s: must be ≥ 1"),
    (GOOD + '[gateways]\nwan_streams = 0\n', "gateways.wan_streams: must be > 0, got 0; e.g. wan_streams = 4"),
    (GOOD + '[gateways]\nwan_streams = 17\n', "gateways.wan_streams: must be ≤ 16"),
    (GOOD + '[gateways]\nwan_streams = "many"\n', 'gateways.wan_streams: must be "auto" or a number'),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = 10\nsplit = "yes"'), "wan[0].split: must be one of auto, always, never"),
    (GOOD + '[gateways]\npolicy_ops = ["gather", "scan"]\n',
     "gateways.policy_ops: must be a non-empty list of gather, bcast, alltoall, halo, got ['gather', 'scan']"),
    (GOOD + '[gateways]\npolicy_ops = []\n', "gateways.policy_ops: must be a non-empty list"),
    (GOOD + '[gateways]\npolicy_sizes = ["100K", "10M"]\n',
     "gateways.policy_sizes: '10M' is not a message size from 1K to 2M; e.g. [\"100K\", \"1M\"]"),
    (GOOD + '[gateways]\npolicy_sizes = "100K"\n', "gateways.policy_sizes: must be a non-empty list of message sizes"),
    (GOOD.replace('rtt_ms = 10', 'rtt_ms = 10\nsplit = "always"'),
     'wan[0].split: "always" needs a gateway at both sites, and a has none'),
]


@pytest.mark.parametrize("text,expect", BAD, ids=[e for _, e in BAD])
def test_bad_topologies_name_file_field_and_fix(tmp_path, text, expect):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(GridsplitError) as ei:
        load_topology(str(p))
    msg = str(ei.value)
    assert msg.startswith(str(p) + ": "), msg
    assert expect in msg, msg
    assert "\n" not in msg


def test_good_topology_parses(tmp_path):
    t = parse_topology(tomllib.loads(GOOD), "x.toml")
    assert t.rtt_ms("a", "b") == 10 and t.wan("a", "b").delay_ms_ab == 5


def test_lan_pacing_defaults_to_the_one_constant_and_takes_each_value():
    from gridsplit.topology import DEFAULT_LAN_PACING, LAN_PACING
    assert parse_topology(tomllib.loads(GOOD), "x.toml").gateways.lan_pacing == DEFAULT_LAN_PACING == "auto"
    for v in LAN_PACING:
        t = parse_topology(tomllib.loads(GOOD + f'[gateways]\nlan_pacing = "{v}"\n'), "x.toml")
        assert t.gateways.lan_pacing == v and t.to_dict()["gateways"]["lan_pacing"] == v


def test_lan_delack_bound_follows_the_rto_unless_set_and_reaches_gateways_and_ranks(tmp_path):
    """lan_delack_max_us: 0 follows lan_rto_min_us (which needs it), else it alone bounds the LAN
    legs' delayed ACKs, in the gateway config ([lan] delack_max_us) and the node file's lan_timers line,
    which the library reads (preload/tests/config_test.c) and `check_nodes_file` accepts."""
    from gridsplit.gateway import gateway_toml, nodes_conf
    from gridsplit.gateway.nodes import check_nodes_file
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    for keys, rto, delack in (("", 5000, 5000), ("lan_rto_min_us = 0\n", 0, 0),
                              ("lan_rto_min_us = 8000\n", 8000, 8000),
                              ("lan_rto_min_us = 0\nlan_delack_max_us = 8000\n", 0, 8000),
                              ("lan_rto_min_us = 20000\nlan_delack_max_us = 8000\n", 20000, 8000)):
        t = parse_topology(tomllib.loads("[defaults]\ngateway = true\n" + GOOD + "[gateways]\n" + keys), "x.toml")
        g = t.gateways
        assert (g.lan_rto_min_us, g.lan_delack_us) == (rto, delack)
        lan = tomllib.loads(gateway_toml(t, "a", str(psk)))["lan"]
        assert (lan["rto_min_us"], lan["delack_max_us"]) == (rto, delack)
        text = nodes_conf(t)
        timers = [line for line in text.splitlines() if line.startswith("lan_timers")]
        assert timers == ([f"lan_timers {rto} {delack}"] if rto or delack else [])
        (tmp_path / "nodes.conf").write_text(text)
        check_nodes_file(str(tmp_path / "nodes.conf"))


def test_cli_reports_bad_file_in_one_line(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("[[site]\nname=")
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "lab", "up", "--topology", str(p)],
                        text=True, capture_output=True)
    assert cp.returncode == 2
    assert "Traceback" not in cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gridsplit: error: ") and "not valid TOML" in lines[0]


def test_bad_scale():
    with pytest.raises(GridsplitError, match="--scale 0.5"):
        load_topology("paper", scale=0.5)


def test_cli_unknown_preset():
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "lab", "up", "--topology", "nosuch"],
                        text=True, capture_output=True)
    assert cp.returncode == 2 and "no such preset or file; presets: paper, g5k9, mini" in cp.stderr


# -- the gateway's own NIC (gateway_nic_mbps) --------------------------------

GW = """
[defaults]
nic_mbps = 1000
gateway = true
[[site]]
name = "a"
nodes = 2
[[site]]
name = "b"
nodes = 1
nic_mbps = 500
[[wan]]
sites = ["a", "b"]
rtt_ms = 10
rate_mbps = 10000
"""


def _gw(text: str, scale: float | None = None):
    data = tomllib.loads(text)
    if scale is not None:
        data["scale"] = scale
    return parse_topology(data, "gw.toml")


def test_gateway_nic_defaults_to_the_sites_nic():
    t = _gw(GW)
    assert [s.gateway_nic_mbps for s in t.sites] == [1000, 500]  # each site's own nic_mbps, not [defaults]'
    assert t.host("a-gw").nic_mbps == 1000 and t.host("b-gw").nic_mbps == 500
    assert t.bottleneck_mbps(t.host("a-gw"), t.host("b-gw")) == 500


def test_gateway_nic_explicit_and_in_defaults():
    t = _gw(GW.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbps = 4000\n'))
    a = t.site("a")
    assert (a.nic_mbps, a.gateway_nic_mbps) == (1000, 4000)
    assert t.host("a-gw").nic_mbps == 4000 and t.host("a-gw").role == "gateway"
    assert all(h.nic_mbps == 1000 for h in t.hosts() if h.site == "a" and h.role == "node")
    assert t.site("b").gateway_nic_mbps == 500
    # [defaults] sets every site's gateway NIC; a site's own value wins.
    t = _gw(GW.replace("gateway = true\n", "gateway = true\ngateway_nic_mbps = 2000\n")
              .replace('name = "b"\n', 'name = "b"\ngateway_nic_mbps = 3000\n'))
    assert [s.gateway_nic_mbps for s in t.sites] == [2000, 3000]
    assert [h.nic_mbps for h in t.hosts() if h.role == "gateway"] == [2000, 3000]
    # The gateway's NIC is on the gateway-to-gateway path.
    assert t.bottleneck_mbps(t.host("a-gw"), t.host("b-gw")) == 2000
    assert t.bottleneck_mbps(t.host("a-1"), t.host("b-1")) == 500


def test_gateway_nic_is_scaled_and_survives_with_nodes_and_to_dict():
    text = GW.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbps = 4000\nmax_nodes = 8\n')
    t = _gw(text, scale=10)
    a = t.site("a")
    assert (a.nic_mbps, a.gateway_nic_mbps) == (100, 400) and t.site("b").gateway_nic_mbps == 50
    t6 = t.with_nodes(6)
    assert t6.site("a").nodes == 6 and t6.host("a-gw").nic_mbps == 400
    d = t6.to_dict()
    assert [s["gateway_nic_mbps"] for s in d["sites"]] == [400, 50]
    assert [s["nic_mbps"] for s in d["sites"]] == [100, 50]
    # Presets carry it too (the default: their nic_mbps).
    assert all(s["gateway_nic_mbps"] == s["nic_mbps"] for s in load_topology("paper").to_dict()["sites"])


GW_BAD = [
    (GOOD.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbps = -5\n'),
     "site[0].gateway_nic_mbps: must be > 0, got -5; e.g. gateway_nic_mbps = 4000"),
    (GOOD.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbps = 0\n'),
     "site[0].gateway_nic_mbps: must be > 0, got 0; e.g. gateway_nic_mbps = 4000"),
    (GOOD.replace('name = "b"\n', 'name = "b"\ngateway_nic_mbps = "fast"\n'),
     "site[1].gateway_nic_mbps: must be a number, got 'fast'; e.g. gateway_nic_mbps = 4000"),
    ('[defaults]\ngateway_nic_mbps = true\n' + GOOD,
     "defaults.gateway_nic_mbps: must be a number, got True; e.g. gateway_nic_mbps = 4000"),
    ('[defaults]\ngateway_nic_mbps = -1\n' + GOOD,
     "defaults.gateway_nic_mbps: must be > 0, got -1; e.g. gateway_nic_mbps = 4000"),
    (GOOD.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbp = 4000\n'),
     "site[0].gateway_nic_mbp: unknown key; did you mean 'gateway_nic_mbps'?"),
]


@pytest.mark.parametrize("text,expect", GW_BAD, ids=[e for _, e in GW_BAD])
def test_bad_gateway_nic_is_one_line_with_the_fix(tmp_path, text, expect):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(GridsplitError) as ei:
        load_topology(str(p))
    assert str(ei.value) == f"{p}: {expect}"


def test_lab_shapes_the_gateway_nic_and_its_switch_port(monkeypatch, tmp_path):
    """realize._build with its shell calls recorded instead of run: the gateway's
    NIC and the switch port toward it get gateway_nic_mbps, nodes keep nic_mbps."""
    from gridsplit.lab import realize
    from gridsplit.lab.names import LabNames
    tc: dict[str, list[str]] = {}
    monkeypatch.setattr(realize, "tc_batch", lambda ns, lines: tc.setdefault(ns, []).extend(lines))
    for fn in ("run", "ip_batch", "in_ns", "_sysctl"):
        monkeypatch.setattr(realize, fn, lambda *a, **k: None)
    monkeypatch.setattr(LabNames, "netns_etc", staticmethod(lambda ns: tmp_path / ns))
    t = _gw(GW.replace('name = "a"\n', 'name = "a"\ngateway_nic_mbps = 2000\n'), scale=10)
    names = LabNames("gsx")
    realize._build(t, names, lambda m: None)

    def rate(ns: str, dev: str) -> int:
        line = next(l for l in tc[ns] if f" dev {dev} " in l)
        return int(line.split(" rate ")[1].split("bit")[0])

    assert rate("gsx-a-gw", "eth0") == 200e6 and rate("gsx-a-sw", "hgw") == 200e6
    assert rate("gsx-a-1", "eth0") == 100e6 and rate("gsx-a-sw", "h1") == 100e6
    assert rate("gsx-b-gw", "eth0") == 50e6 and rate("gsx-b-sw", "hgw") == 50e6  # default: b's own nic_mbps
    port = next(l for l in tc["gsx-a-sw"] if " dev hgw " in l)
    assert port.endswith(f"limit {t.site('a').switch_buffer_bytes}")  # the site's port buffer, in bytes
    nic = next(l for l in tc["gsx-a-gw"] if " dev eth0 " in l)
    assert f"peakrate {int(200e6 * realize.NIC_PEAK)}bit" in nic


def test_wan_streams_key():
    assert parse_topology(tomllib.loads(GOOD), "x").gateways.wan_streams == 0  # auto
    t = parse_topology(tomllib.loads(GOOD + '[gateways]\nwan_streams = "auto"\n'), "x")
    assert t.gateways.wan_streams == 0 and t.to_dict()["gateways"]["wan_streams"] == 0
    assert parse_topology(tomllib.loads(GOOD + '[gateways]\nwan_streams = 4\n'), "x").gateways.wan_streams == 4
