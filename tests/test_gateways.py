"""Several gateways per site: the topology key, the configs it writes, and a real lab
where flows spread over a site's gateways and new flows avoid one that is down."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from conftest import gridsplit, mpirun, needs_root
from gridsplit.errors import GridsplitError
from gridsplit.gateway import gateway_toml, nodes_conf
from gridsplit.topology_file import parse_topology

ROOT = Path(__file__).resolve().parent.parent
GSD = ROOT / "target" / "release" / "gridsplitd"

# Two sites, each with two gateway hosts (a full mesh of four WAN links).
TWO_BY_TWO = """
name = "twogw"
description = "2 sites x 2 nodes, two gateways per site"
[defaults]
nic_mbps = 100
gateway_nic_mbps = 400
switch_buffer_bytes = 32000
[defaults.tcp]
rmem_max = 4194304
wmem_max = 4194304
[[site]]
name = "east"
nodes = 2
gateways = 2
[[site]]
name = "west"
nodes = 2
gateways = ["10.71.2.254", "10.71.2.240"]
[[wan]]
sites = ["east", "west"]
rtt_ms = 10.0
rate_mbps = 1000
buffer_bytes = 1000000
[gateways]
split = "all"
"""


def topo(text: str = TWO_BY_TWO):
    return parse_topology(tomllib.loads(text), "twogw.toml")


def test_a_count_or_a_list_of_gateways_makes_that_many_gateway_hosts():
    t = topo()
    assert [(h.name, str(h.ip)) for h in t.gateway_hosts()] == [
        ("east-gw", "10.71.1.254"), ("east-gw2", "10.71.1.252"),
        ("west-gw", "10.71.2.254"), ("west-gw2", "10.71.2.240")]
    assert t.to_dict()["sites"][1]["gateways"] == ["10.71.2.254", "10.71.2.240"]
    # One gateway: nothing about it changes.
    one = topo(TWO_BY_TWO.replace("gateways = 2", "gateway = true"))
    assert [h.name for h in one.gateway_hosts("east")] == ["east-gw"]
    assert "gateways" not in one.to_dict()["sites"][0]


def test_defaults_give_every_site_a_gateway_count():
    text = TWO_BY_TWO.replace("gateways = 2\n", "").replace('gateways = ["10.71.2.254", "10.71.2.240"]\n', "gateway = false\n")
    t = topo(text.replace("[defaults]\n", "[defaults]\ngateways = 3\n"))
    assert [h.name for h in t.gateway_hosts()] == ["east-gw", "east-gw2", "east-gw3"]  # west: gateway = false
    with pytest.raises(GridsplitError, match=r"defaults.gateways: .*takes a gateway count"):
        topo(text.replace("[defaults]\n", '[defaults]\ngateways = ["10.71.1.254"]\n'))


@pytest.mark.parametrize("value, says", [
    ("0", "0 is not a gateway count from 1 to 8"),
    ('["10.71.9.1"]', "10.71.9.1 is outside the site's subnet 10.71.1.0/24"),
    ('["10.71.1.2"]', "10.71.1.2 is a node's address"),
    ('["10.71.1.253"]', "the lab's router address"),
    ('["10.71.1.254", "10.71.1.254"]', "listed twice"),
    ('["nope"]', "'nope' is not an IPv4 address"),
    ('"two"', "neither a count nor a list of addresses"),
])
def test_bad_gateway_lists_are_one_line(value, says):
    with pytest.raises(GridsplitError) as e:
        topo(TWO_BY_TWO.replace("gateways = 2", f"gateways = {value}"))
    msg = str(e.value)
    assert "site[0].gateways" in msg and says in msg and "\n" not in msg


def test_each_gateway_gets_its_own_config_and_the_node_file_lists_them_all(tmp_path):
    t = topo()
    psk = tmp_path / "psk"
    psk.write_text("k" * 64 + "\n")
    psk.chmod(0o600)
    nodes = nodes_conf(t)
    assert [l.split()[3] for l in nodes.splitlines() if l.startswith("site east")] == ["10.71.1.254:7100",
                                                                                       "10.71.1.252:7100"]
    for site, k, ip in (("east", 0, "10.71.1.254"), ("east", 1, "10.71.1.252"), ("west", 1, "10.71.2.240")):
        text = gateway_toml(t, site, str(psk), index=k)
        cfg = tomllib.loads(text)
        assert cfg.get("gateway_index", 0) == k
        assert cfg["gateway"]["lan_listen"] == f"{ip}:7100" and cfg["gateway"]["wan_listen"] == f"{ip}:7200"
        # Every gateway lists every gateway of every site, in one order.
        assert [(s["name"], s["gateway_wan"]) for s in cfg["site"]] == [
            ("east", "10.71.1.254:7200"), ("east", "10.71.1.252:7200"),
            ("west", "10.71.2.254:7200"), ("west", "10.71.2.240:7200")]
        if GSD.exists():  # the gateway itself accepts it
            f = tmp_path / f"{site}{k}.toml"
            f.write_text(text)
            cp = subprocess.run([str(GSD), "--config", str(f), "--check-config"], capture_output=True, text=True)
            assert cp.returncode == 0, cp.stderr
    with pytest.raises(GridsplitError, match="--gateway 3: site 'east' has 2 gateway"):
        gateway_toml(t, "east", str(psk), index=2)


def test_gateway_config_cli_takes_the_gateway_number(tmp_path):
    (tmp_path / "twogw.toml").write_text(TWO_BY_TWO)
    cp = gridsplit("gateway", "config", "-t", str(tmp_path / "twogw.toml"), "--site", "west", "--gateway", "2")
    assert tomllib.loads(cp.stdout)["gateway"]["lan_listen"] == "10.71.2.240:7100"
    cp = gridsplit("gateway", "config", "-t", str(tmp_path / "twogw.toml"), "--site", "west", "--gateway", "3",
                   check=False)
    assert cp.returncode != 0 and len(cp.stderr.strip().splitlines()) == 1 and "give 1 to 2" in cp.stderr


# ---------------------------------------------------------------- the lab

@pytest.fixture(scope="module")
def glab(tmp_path_factory):
    needs_root()
    f = tmp_path_factory.mktemp("twogw") / "twogw.toml"
    f.write_text(TWO_BY_TWO)
    gridsplit("lab", "down")
    gridsplit("lab", "up", "--topology", str(f))
    yield json.loads(gridsplit("lab", "status", "--json").stdout)
    gridsplit("lab", "down")


def status(site: str, n: int = 1) -> dict:
    return json.loads(gridsplit("gateway", "status", "--lab", site, "--gateway", str(n), "--json").stdout)


def opened() -> dict[tuple[str, int], int]:
    return {(s, n): status(s, n)["counters"]["flows_opened"] for s in ("east", "west") for n in (1, 2)}


def alltoall(impl: str) -> list[dict]:
    cp = mpirun("--split", "--impl", impl, "--hosts", "east-1,east-2,west-1,west-2", "--",
                str(ROOT / "build" / "mpi" / impl / "coll"), "-o", "alltoall", "-s", "20K", "-r", "5", "--check")
    rows = [json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verified"] is True for r in rows), cp.stdout
    return rows


@pytest.mark.lab
@pytest.mark.mpi
def test_every_gateway_links_to_every_gateway_of_the_other_site(glab):
    for site in ("east", "west"):
        for n in (1, 2):
            links = status(site, n)["links"]
            assert len(links) == 2, links  # both gateways of the other site


@pytest.mark.lab
@pytest.mark.mpi
@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_mpi_runs_over_two_gateways_per_site(glab, impl):
    before = opened()
    alltoall(impl)
    after = opened()
    # Every cross-site rank pair's connection went through a gateway of its
    # site, the one its node pair picks (docs/protocol.md §4.3). With two
    # gateways at both sites both ends use the same index: east-1/west-1 and
    # east-2/west-2 take the first gateways, east-1/west-2 and east-2/west-1
    # the second ones, so each index carried some, whichever side connected.
    assert sum(after[k] - before[k] for k in after) >= 4, (before, after)
    for n in (1, 2):
        assert after[("east", n)] - before[("east", n)] + after[("west", n)] - before[("west", n)] > 0, (before, after)


LISTEN = ("import socket,sys\n"
          "ls=[socket.create_server(('10.71.1.1',p)) for p in range(6100,6116)]\n"
          "print('ready',flush=True)\n"
          "n=0\n"
          "for l in ls:\n"
          "    c,_=l.accept(); b=b''\n"
          "    while len(b)<4000:\n"
          "        d=c.recv(65536)\n"
          "        if not d: break\n"
          "        b+=d\n"
          "    n+=len(b)==4000; c.close()\n"
          "print(n)\n")
# Eight connections to ports FIRST..FIRST+7 of east-1 (format with first=...).
CONNECT = ("import socket\n"
           "for p in range({first},{first}+8):\n"
           "    s=socket.create_connection(('10.71.1.1',p),timeout=10); s.sendall(b'x'*4000); s.close()\n")


def spread_index(src: str, dst: str, n: int) -> int:
    """The gateway index of a node pair (docs/protocol.md §4.3): the sum of the
    two addresses' last 32 bits, wrapping, modulo the gateway count."""
    return ((int(ipaddress.ip_address(src)) + int(ipaddress.ip_address(dst))) & 0xFFFFFFFF) % n


def test_the_gateway_index_is_the_node_pair_sum():
    # 10.71.1.10 + 10.71.2.20 = 0x148e031e (docs/protocol.md's example); ports play no part.
    assert spread_index("10.71.1.10", "10.71.2.20", 2) == 0 and spread_index("10.71.1.10", "10.71.2.21", 2) == 1
    assert spread_index("10.71.1.10", "10.71.2.20", 3) == 0 and spread_index("10.71.1.10", "10.71.2.21", 3) == 1
    assert spread_index("255.255.255.255", "0.0.0.2", 5) == 1  # the sum wraps in 32 bits
    # The lab below: a gather from west-1 and west-2 to east-1 takes each site's two gateways.
    nodes = {h.name: str(h.ip) for h in topo().nodes()}
    assert [spread_index(nodes[w], nodes["east-1"], 2) for w in ("west-1", "west-2")] == [0, 1]


@pytest.mark.lab
def test_flows_spread_over_the_gateways_of_both_sites(glab):
    """A gather: 8 connections from west-1 and 8 from west-2 to ports of east-1.
    The node pair picks the gateway (docs/protocol.md §4.3): west-1's pair with
    east-1 takes west's first gateway and east's first, west-2's the second of
    each (two gateways at both sites: both ends of a pair use the same index).
    The ports play no part."""
    lib = ROOT / "build" / "libgridsplit.so"
    conf = f"/run/gridsplit/lab/{glab['prefix']}/nodes.conf"
    # Both ends preloaded: the destination's library takes the gateway's origin header off.
    srv = subprocess.Popen(["ip", "netns", "exec", f"{glab['prefix']}-east-1", "env", f"LD_PRELOAD={lib}",
                            f"GRIDSPLIT_CONFIG={conf}", "python3", "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        opened_before = opened()
        accepted_before = remote_opened()
        for node, first in (("west-1", 6100), ("west-2", 6108)):
            subprocess.run(["ip", "netns", "exec", f"{glab['prefix']}-{node}", "env", f"LD_PRELOAD={lib}",
                            f"GRIDSPLIT_CONFIG={conf}", "python3", "-c", CONNECT.format(first=first)],
                           check=True, timeout=60)
        assert srv.stdout.readline().strip() == "16"  # every connection's bytes arrived
    finally:
        srv.kill()
        srv.wait()
    nodes = {h.name: str(h.ip) for h in topo().nodes()}
    want = {1: 0, 2: 0}
    for node in ("west-1", "west-2"):
        want[spread_index(nodes[node], nodes["east-1"], 2) + 1] += 8
    assert want == {1: 8, 2: 8}
    # Opened by west's gateways (its nodes' side), accepted by east's (the far side).
    new = {k: v - opened_before[k] for k, v in opened().items()}
    assert {n: new[("west", n)] for n in (1, 2)} == want, new
    accepted = {n: v - accepted_before[n] for n, v in remote_opened().items()}
    assert accepted == want, accepted


def remote_opened(site: str = "east") -> dict[int, int]:
    """Flows each gateway of `site` opened for the far side (remote_opens "ok")."""
    return {n: status(site, n)["remote_opens"]["ok"] for n in (1, 2)}


def opened_or_none() -> dict[tuple[str, int], int | None]:
    """flows_opened of each gateway that answers (None: down)."""
    out = {}
    for s in ("east", "west"):
        for n in (1, 2):
            cp = gridsplit("gateway", "status", "--lab", s, "--gateway", str(n), "--json", check=False)
            out[(s, n)] = json.loads(cp.stdout)["counters"]["flows_opened"] if cp.returncode == 0 else None
    return out


@pytest.mark.lab
@pytest.mark.mpi
def test_new_flows_avoid_a_gateway_that_is_down(glab):
    # One gateway down at each site: west's second (its nodes must fail over)
    # and east's first (west's gateways must send to east's second).
    gridsplit("lab", "fault", "kill-gateway", "--site", "west", "--gateway", "2")
    gridsplit("lab", "fault", "kill-gateway", "--site", "east", "--gateway", "1")
    try:
        before = opened_or_none()
        assert [k for k, v in before.items() if v is None] == [("east", 1), ("west", 2)]
        alltoall("openmpi")
        after = opened_or_none()
        # The job ran (alltoall checks its data), its cross-site connections
        # through the one gateway left at each site.
        assert [k for k, v in after.items() if v is None] == [("east", 1), ("west", 2)]
        assert after[("west", 1)] - before[("west", 1)] + after[("east", 2)] - before[("east", 2)] >= 4, (before, after)
    finally:
        gridsplit("lab", "fault", "clear")
    # Both come back, and the mesh closes again (a dial retries within seconds).
    deadline = time.monotonic() + 30
    while len(status("west", 2)["links"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(status("west", 2)["links"]) == 2 and len(status("east", 1)["links"]) == 2


@pytest.mark.lab
def test_kill_gateway_names_a_gateway_the_site_does_not_have(glab):
    cp = gridsplit("lab", "fault", "kill-gateway", "--site", "east", "--gateway", "3", check=False)
    assert cp.returncode != 0 and len(cp.stderr.strip().splitlines()) == 1
    assert "--gateway 3: site 'east' has 2 gateway(s)" in cp.stderr


def test_status_url_that_is_no_admin_url_is_one_line():
    """`gateway status --url` wants http://HOST:PORT/status; anything else is refused before a request,
    and a URL nothing answers says so (loopback port 1: refused at once)."""
    for url in ("127.0.0.1:7300", "ftp://127.0.0.1/status", "http://127.0.0.1:99999/status", "notaurl"):
        cp = gridsplit("gateway", "status", "--url", url, check=False)
        err = cp.stderr.strip()
        assert cp.returncode == 2 and len(err.splitlines()) == 1 and "http://HOST:PORT/status" in err, err
    cp = gridsplit("gateway", "status", "--url", "http://127.0.0.1:1/status", check=False)
    assert cp.returncode == 2 and "Connection refused" in cp.stderr and "admin_listen" in cp.stderr, cp.stderr
