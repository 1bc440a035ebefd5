"""Grids whose sites are not routed to each other ([addressing] routed = false), and
overlapping address plans (refused): topology, lab routing, MPI split, refusals."""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from conftest import PREFIX, gridsplit, needs_root
from gridsplit.errors import GridsplitError
from gridsplit.lab.realize import GATEWAY_RULE_PREF, _remote_nets, routes_to_peer
from gridsplit.topology_file import load_topology, parse_topology

ROOT = Path(__file__).resolve().parent.parent
MINI = resources.files("gridsplit").joinpath("presets", "mini.toml").read_text()


def unroutable_text(extra: str = "") -> str:
    """The mini preset with its sites unroutable (and `extra` appended)."""
    return MINI.replace('name = "mini"', 'name = "unroutable"') + "\n[addressing]\nrouted = false\n" + extra


def write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


def one_line_error(cp: subprocess.CompletedProcess, *want: str) -> str:
    """A refusal: non-zero exit, exactly one line on stderr, no traceback, naming `want`."""
    err = cp.stderr.strip()
    assert cp.returncode != 0, cp.stdout
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in want:
        assert w in err, err
    return err


# -- topology ----------------------------------------------------------------------


def test_routed_defaults_to_true_and_false_splits_every_pair(tmp_path):
    assert load_topology("mini").routed is True
    t = load_topology(write(tmp_path, "u.toml", unroutable_text()))
    assert t.routed is False and t.gateways.split == "all" and t.to_dict()["routed"] is False
    conf = gridsplit("gateway", "nodes-config", "-t", str(tmp_path / "u.toml")).stdout
    sites = [l for l in conf.splitlines() if l.startswith("site ")]
    assert len(sites) == 2 and not any("direct_to" in l for l in sites), conf


@pytest.mark.parametrize("old,new,want", [
    ("routed = false", 'routed = "no"', "addressing.routed: must be true or false, got 'no'"),
    ('split = "all"', 'split = "auto"', 'gateways.split: "auto" may keep a site pair direct'),
])
def test_bad_routed_settings_are_one_line(tmp_path, old, new, want):
    text = unroutable_text()
    assert old in text
    text = text.replace(old, new)
    one_line_error(gridsplit("gateway", "nodes-config", "-t", write(tmp_path, "b.toml", text), check=False), want)


def test_unroutable_site_without_gateway_is_refused(tmp_path):
    text = unroutable_text().replace('name = "west"', 'name = "west"\ngateway = false')
    one_line_error(gridsplit("gateway", "config", "-t", write(tmp_path, "g.toml", text), "--site", "east",
                             check=False), "addressing.routed: false needs a gateway at every site", "west")


OVERLAP = MINI.replace('name = "east"', 'name = "east"\nsubnet = "10.0.0.0/24"').replace(
    'name = "west"', 'name = "west"\nsubnet = "10.0.0.0/24"')


def test_overlapping_address_plans_are_refused_in_one_line(tmp_path):
    path = write(tmp_path, "o.toml", OVERLAP)
    with pytest.raises(GridsplitError, match="site\\[1\\].subnet: 10.0.0.0/24 overlaps site east's 10.0.0.0/24"):
        load_topology(path)
    for args in (("gateway", "config", "-t", path, "--site", "east"), ("gateway", "nodes-config", "-t", path)):
        err = one_line_error(gridsplit(*args, check=False), "overlaps site east's 10.0.0.0/24",
                             "tell sites apart by subnet", "renumber one site's plan")
        assert "give it a distinct subnet" in err
    # Partly overlapping, and an explicit plan colliding with the default one of a later site.
    part = OVERLAP.replace('subnet = "10.0.0.0/24"', 'subnet = "10.0.0.0/16"', 1).replace(
        'subnet = "10.0.0.0/24"', 'subnet = "10.0.7.0/24"')
    with pytest.raises(GridsplitError, match="10.0.7.0/24 overlaps site east's 10.0.0.0/16"):
        parse_topology(tomllib.loads(part), "p.toml")
    default = MINI.replace('name = "east"', 'name = "east"\nsubnet = "10.71.2.0/24"')
    with pytest.raises(GridsplitError, match="site\\[1\\].name: its default subnet 10.71.2.0/24 .* overlaps site east"):
        parse_topology(tomllib.loads(default), "d.toml")


def test_distinct_site_subnets_reach_the_node_file(tmp_path):
    text = OVERLAP.replace('subnet = "10.0.0.0/24"', 'subnet = "10.50.0.0/24"', 1)
    conf = gridsplit("gateway", "nodes-config", "-t", write(tmp_path, "s.toml", text)).stdout
    assert "site east 10.0.0.0/24 10.0.0.254:7100" not in conf
    assert "site east 10.50.0.0/24 10.50.0.254:7100" in conf and "site west 10.0.0.0/24 10.0.0.254:7100" in conf
    one_line_error(gridsplit("gateway", "nodes-config", "-t",
                             write(tmp_path, "x.toml", text.replace("10.50.0.0/24", "10.72.0.0/24")), check=False),
                   "overlaps addressing.wan")


def test_lab_hosts_route_site_subnets_outside_the_address_block():
    t = parse_topology(tomllib.loads(MINI.replace('name = "east"', 'name = "east"\nsubnet = "10.50.0.0/24"')), "s.toml")
    assert [str(s.subnet) for s in t.sites] == ["10.50.0.0/24", "10.71.2.0/24"]
    assert _remote_nets(t, "west") == ["10.71.0.0/16", "10.50.0.0/24"]
    assert _remote_nets(t, "east") == ["10.71.0.0/16"]


def test_unroutable_routers_route_only_the_gateways():
    routed = load_topology("mini")
    w = routed.wans[0]
    assert routes_to_peer(routed, w, "east", "to-west") == [f"route add 10.71.2.0/24 via {w.ip('west')} dev to-west"]
    t = parse_topology(tomllib.loads(unroutable_text()), "u.toml")
    assert routes_to_peer(t, w, "east", "to-west") == [
        "route add prohibit 10.71.2.0/24",
        f"route add 10.71.2.254/32 via {w.ip('west')} dev to-west",
        f"rule add pref {GATEWAY_RULE_PREF + 2} to 10.71.2.254/32 prohibit",
    ]


def test_bench_refuses_direct_mode_up_front(tmp_path):
    needs_root()
    path = write(tmp_path, "u.toml", unroutable_text())
    out = tmp_path / "r.jsonl"
    t0 = time.monotonic()
    cp = gridsplit("bench", "gather", "-t", path, "--nodes", "1", "--sizes", "1K", "--out", str(out), check=False)
    err = one_line_error(cp, "direct mode cannot run", "unroutable", "use --modes split")
    assert time.monotonic() - t0 < 20 and not out.exists(), err


# -- the lab -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ulab(tmp_path_factory):
    needs_root()
    path = write(tmp_path_factory.mktemp("unroutable"), "unroutable.toml", unroutable_text())
    gridsplit("lab", "down")
    gridsplit("lab", "up", "--topology", path)
    yield path
    gridsplit("lab", "down")


def in_ns(host: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", f"{PREFIX}-{host}", *args], text=True, capture_output=True,
                          timeout=timeout)


CONNECT = ("import socket,sys,time;s=socket.socket();s.settimeout(20);t=time.monotonic()\n"
           "try:\n s.connect((sys.argv[1],int(sys.argv[2])));print('connected',time.monotonic()-t)\n"
           "except OSError as e:\n print('error',e.errno,time.monotonic()-t)")


def connect(host: str, dst: str, port: int) -> tuple[str, float]:
    words = in_ns(host, "python3", "-c", CONNECT, dst, str(port)).stdout.split()
    return " ".join(words[:-1]), float(words[-1])


@pytest.mark.parametrize("src,dst,port", [
    ("east-1", "10.71.2.1", 5999),     # node to node across sites
    ("east-1", "10.71.2.254", 7200),   # node to the peer gateway's WAN port
    ("east-gw", "10.71.2.1", 5999),    # gateway to a node of another site
])
def test_direct_connect_across_sites_fails_at_once(ulab, src, dst, port):
    what, took = connect(src, dst, port)
    assert what == "error 113" and took < 1.0, (what, took)  # EHOSTUNREACH, "No route to host"


def test_a_destination_in_no_site_is_named_in_one_line(ulab):
    """Issue 24: on an unrouted grid, a node connecting to an address of no site gets one
    line from libgridsplit saying why, and the kernel's own error at once."""
    from gridsplit.lab.names import LabNames
    conf = LabNames.from_env().state_dir / "nodes.conf"
    assert "\nrouted no\n" in conf.read_text()
    env = ["env", f"LD_PRELOAD={ROOT / 'build' / 'libgridsplit.so'}", f"GRIDSPLIT_CONFIG={conf}"]
    cp = in_ns("east-1", *env, "python3", "-c", CONNECT, "10.99.0.1", "5999")
    lines = [l for l in cp.stderr.splitlines() if "in no site of the node file" in l]
    assert len(lines) == 1 and "10.99.0.1:5999" in lines[0] and "nodes-config" in lines[0], cp.stderr
    what, took = cp.stdout.split()[:-1], float(cp.stdout.split()[-1])
    assert what[0] == "error" and took < 1.0, cp.stdout
    # A node of another site is no such destination: it is relayed, and nothing is said.
    cp = in_ns("east-1", *env, "python3", "-c", CONNECT, "10.71.2.1", "5999")
    assert "in no site" not in cp.stderr


def test_gateways_reach_each_other_and_their_own_nodes(ulab):
    what, _ = connect("east-gw", "10.71.2.254", 7200)
    assert what == "connected"
    assert in_ns("east-gw", "ping", "-c", "1", "-W", "2", "10.71.1.2").returncode == 0
    st = json.loads(gridsplit("gateway", "status", "--lab", "east", "--json").stdout)
    assert [l["peer"] for l in st["links"]] == ["west"]


def mpirun_quick(*args: str) -> subprocess.CompletedProcess:
    """conftest.mpirun with a 20 s bound: these jobs take 1-2 s, and MPICH 4.0.2's
    finalize hang (conftest.mpirun says why) is retried once rather than waited for."""
    for attempt in (1, 2):
        cp = gridsplit("lab", "mpirun", "--timeout", "20", *args, check=False)
        if cp.returncode == 0 or not ("mpich" in args and "did not finish" in cp.stderr) or attempt == 2:
            break
        print(f"MPICH finalize hang (known upstream bug), retrying once: {cp.stderr.strip()}")
    assert cp.returncode == 0, f"lab mpirun {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}"
    return cp


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_mpi_runs_split_on_an_unroutable_grid(ulab, impl):
    before = json.loads(gridsplit("gateway", "status", "--lab", "east", "--json").stdout)["counters"]
    cp = mpirun_quick("--split", "--impl", impl, "--hosts", "west-1,east-1,east-2,west-2", "--",
                      str(ROOT / "build" / "mpi" / impl / "gather"), "-s", "100K", "-r", "5", "--check")
    rows = [json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verified"] is True for r in rows), cp.stdout
    after = json.loads(gridsplit("gateway", "status", "--lab", "east", "--json").stdout)["counters"]
    # The payload crossed the WAN link: 2 east senders x 5 gathers x 100 KB at least.
    assert after["wan_bytes_out"] - before["wan_bytes_out"] >= 2 * 5 * 100_000


def test_lab_mpirun_direct_is_refused_in_one_line(ulab):
    for mode in (["--direct"], []):
        cp = gridsplit("lab", "mpirun", *mode, "--impl", "openmpi", "--hosts", "west-1,east-1", "--",
                       str(ROOT / "build" / "mpi" / "openmpi" / "gather"), "-s", "1K", check=False)
        one_line_error(cp, "direct mode cannot run across sites east, west", "routed = false", "use --split")
    # Within one site, direct mode is fine.
    cp = mpirun_quick("--direct", "--impl", "openmpi", "--hosts", "east-1,east-2", "--",
                str(ROOT / "build" / "mpi" / "openmpi" / "gather"), "-s", "1K", "-r", "2", "--check")
    rows = [json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verified"] is True for r in rows), cp.stdout
