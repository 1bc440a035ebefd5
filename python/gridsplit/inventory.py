"""The inventory of real hosts: sites, their nodes and gateway, and how to reach them over ssh.

One TOML format for `gridsplit netcheck --hosts` (docs/netcheck.md) and
`gridsplit bench gather|alltoall|app --hosts` (docs/bench.md, "Real hosts"):

    topology = "grid.toml"          # bench: the topology the gateways' configs were written from
    [ssh]                           # how this machine reaches every host (OpenSSH, batch mode)
    user = "root"; ssh_port = 22; options = [...]; command = ["ssh"]; connect_timeout = 5
    [mpi]                           # bench: the MPI job, launched from the first rank's host
    impl = ["openmpi"]; openmpi = "mpirun"; mpich = "mpiexec"; rsh = ["ssh"]
    programs = "DIR"; lib = "/usr/local/lib/libgridsplit.so"; nodes_config = "/etc/gridsplit/nodes.conf"
    [gateways]                      # bench: check (and with start = true, start) each site's gridsplitd
    start = false; config = "/etc/gridsplit/gridsplit.toml"; gridsplitd = "gridsplitd"; admin = "127.0.0.1:7300"
    [[site]]
    name = "rennes"; hosts = ["node-1.rennes", ...]; gateway = "gw.rennes"; user = "..."; ssh_port = 2222
    gateway_config = "..."          # this site's gridsplitd config, if not [gateways] config

Every key is checked here, and a bad one refused in one line naming it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import GridsplitError
from .gateway import ADMIN
from .lab.mpi import IMPLS
from .netcheck.runner import Endpoint, SshRunner

DEFAULT_LAUNCHER = {"openmpi": "mpirun", "mpich": "mpiexec"}

KEYS = {"": ("ssh", "site", "topology", "mpi", "gateways"),
        "ssh": ("user", "options", "command", "connect_timeout", "tune", "port", "ssh_port"),
        "site": ("name", "hosts", "capacity_mbps", "gateway", "gateway_config", "user", "ssh_port"),
        "host": ("ssh", "address"),
        "mpi": ("impl", "openmpi", "mpich", "rsh", "programs", "lib", "nodes_config", "tcp_if_include"),
        "gateways": ("start", "config", "gridsplitd", "admin", "log")}


@dataclass(frozen=True)
class Site:
    name: str
    hosts: tuple[Endpoint, ...]          # the nodes, in the order ranks are placed on them
    capacity_mbps: float | None
    gateway: Endpoint | None
    gateway_config: str | None = None    # this gateway's config, where it is not [gateways] config


@dataclass(frozen=True)
class Mpi:
    impls: tuple[str, ...]
    launchers: dict[str, str]            # impl -> launcher command on the hosts
    rsh: tuple[str, ...]                 # the launcher's own ssh from the launch host to the others
    programs: str | None                 # DIR holding IMPL/PROG (None: this checkout's build, a shared filesystem)
    lib: str | None                      # libgridsplit.so on the nodes (None: this checkout's build)
    nodes_config: str | None             # the node file on the nodes (split mode)
    tcp_if_include: str | None           # Open MPI's btl/oob_tcp_if_include


@dataclass(frozen=True)
class Gateways:
    start: bool
    config: str
    gridsplitd: str
    admin: str
    log: str


@dataclass
class Inventory:
    path: Path
    runner: SshRunner
    sites: list[Site]
    iperf_port: int | None
    topology: str | None
    mpi: Mpi
    gateways: Gateways
    raw: dict[str, Any] = field(default_factory=dict)

    def site(self, name: str) -> Site:
        return next(s for s in self.sites if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        """What a result file records of the inventory: the file as read, and its path."""
        return {"file": str(self.path), "content": self.raw}


def _fail(path: Path, msg: str) -> GridsplitError:
    return GridsplitError(f"{path}: {msg}")


def _strings(path: Path, where: str, v: Any, example: str) -> list[str]:
    if isinstance(v, str):
        v = v.split()
    if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
        raise _fail(path, f"{where}: must be a list of strings, e.g. {example}")
    return v


def _port(path: Path, where: str, v: Any) -> int | None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535):
        raise _fail(path, f"{where}: must be a port number 1-65535")
    return v


def _target(host: str, user: str | None, port: int | None) -> str:
    """[user@]host for ssh, as an ssh:// URI when the site has a port of its own (OpenSSH >= 7.7)."""
    if user and "@" not in host:
        host = f"{user}@{host}"
    return f"ssh://{host}:{port}" if port else host


def load_inventory(path: str) -> Inventory:
    """Parse and check a hosts file; every problem is one line naming the key and the fix."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise GridsplitError(f"{path}: no such hosts file; see docs/netcheck.md for the format") from None
    except (OSError, UnicodeDecodeError) as e:
        raise GridsplitError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise GridsplitError(f"{path}: not valid TOML: {e}") from None

    def table(t: Any, where: str, kind: str) -> dict:
        if not isinstance(t, dict):
            raise _fail(p, f"{where}: must be a table")
        for k in t:
            if k not in KEYS[kind]:
                raise _fail(p, f"{where}.{k}: unknown key; allowed: {', '.join(KEYS[kind])}")
        return t

    table(data, "(top level)", "")
    ssh = table(data.get("ssh", {}), "ssh", "ssh")
    tune = ssh.get("tune", "socket")
    if tune not in ("socket", "sysctl", "sudo-sysctl", "none"):
        raise _fail(p, f"ssh.tune: must be socket, sysctl (root logins), sudo-sysctl or none, got {tune!r}")
    command = _strings(p, "ssh.command", ssh.get("command", ["ssh"]), '["ssh"]')
    if not command:
        raise _fail(p, 'ssh.command: must be a list of strings, e.g. ["ssh"]')
    options = _strings(p, "ssh.options", ssh.get("options", []), '["-o", "IdentityFile=~/.ssh/grid"]')
    timeout = ssh.get("connect_timeout", 5)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 120:
        raise _fail(p, "ssh.connect_timeout: must be a whole number of seconds, 1-120")
    iperf_port = _port(p, "ssh.port (netcheck's iperf3 port)", ssh.get("port"))
    ssh_port = _port(p, "ssh.ssh_port", ssh.get("ssh_port"))
    if ssh_port:
        options = ["-p", str(ssh_port), *options]
    user = ssh.get("user")
    if user is not None and not isinstance(user, str):
        raise _fail(p, "ssh.user: must be a user name")
    runner = SshRunner(ssh_command=command, options=options, connect_timeout=timeout, tune_mode=tune)

    sites_raw = data.get("site")
    if not isinstance(sites_raw, list) or not sites_raw:
        raise _fail(p, 'at least one [[site]] is needed, e.g. [[site]] name = "rennes" hosts = ["node-1.rennes"]')
    sites: list[Site] = []
    for i, s in enumerate(sites_raw):
        table(s, f"site[{i}]", "site")
        name = s.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(p, f"site[{i}].name: required, a string")
        if any(x.name == name for x in sites):
            raise _fail(p, f"site[{i}].name: site {name!r} is listed twice")
        s_user = s.get("user", user)
        if s_user is not None and not isinstance(s_user, str):
            raise _fail(p, f"site[{i}].user: must be a user name")
        s_port = _port(p, f"site[{i}].ssh_port", s.get("ssh_port"))

        def endpoint(h: Any, where: str) -> Endpoint:
            if isinstance(h, str) and h:
                target, addr = h, h.rsplit("@", 1)[-1]
            elif isinstance(h, dict):
                table(h, where, "host")
                target = h.get("ssh")
                if not isinstance(target, str) or not target:
                    raise _fail(p, f"{where}.ssh: required, [user@]host")
                addr = h.get("address", target.rsplit("@", 1)[-1])
                if not isinstance(addr, str) or not addr:
                    raise _fail(p, f"{where}.address: must be a host name or address")
            else:
                raise _fail(p, f'{where}: give a host name, or a table {{ ssh = "[user@]host", address = "..." }}')
            return Endpoint(addr, name, addr, _target(target, s_user, s_port))

        hosts = s.get("hosts")
        if not isinstance(hosts, list) or not hosts:
            raise _fail(p, f"site[{i}].hosts: give one or more hosts (site {name!r} has no nodes), "
                           f'e.g. hosts = ["node-1.{name}"]')
        eps = tuple(endpoint(h, f"site[{i}].hosts[{j}]") for j, h in enumerate(hosts))
        if len({e.address for e in eps}) != len(eps):
            raise _fail(p, f"site[{i}].hosts: a host is listed twice")
        gw = endpoint(s["gateway"], f"site[{i}].gateway") if "gateway" in s else None
        cap = s.get("capacity_mbps")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0):
            raise _fail(p, f"site[{i}].capacity_mbps: must be a positive number of Mb/s, e.g. 1000")
        gw_config = s.get("gateway_config")
        if gw_config is not None and (not isinstance(gw_config, str) or not gw_config or gw is None):
            raise _fail(p, f"site[{i}].gateway_config: the path of this site's gateway config on its gateway host "
                           "(with gateway = \"HOST\")")
        sites.append(Site(name, eps, cap, gw, gw_config))

    topology = data.get("topology")
    if topology is not None:
        if not isinstance(topology, str) or not topology:
            raise _fail(p, 'topology: must be a topology file or preset, e.g. topology = "grid.toml"')
        if topology.endswith(".toml") and not Path(topology).is_absolute():
            topology = str(p.parent / topology)  # a file next to the hosts file; else a preset's name

    m = table(data.get("mpi", {}), "mpi", "mpi")
    impls = m.get("impl", list(IMPLS))
    impls = [impls] if isinstance(impls, str) else impls
    if not (isinstance(impls, list) and impls and all(i in IMPLS for i in impls)):
        raise _fail(p, f"mpi.impl: the MPI implementations installed on the hosts, among {', '.join(IMPLS)}, "
                       'e.g. impl = ["openmpi"]')
    launchers = {}
    for i in IMPLS:
        v = m.get(i, DEFAULT_LAUNCHER[i])
        if not isinstance(v, str) or not v or " " in v:
            raise _fail(p, f"mpi.{i}: the launcher command of {i} on the hosts, one word, e.g. {DEFAULT_LAUNCHER[i]!r}")
        launchers[i] = v
    rsh = _strings(p, "mpi.rsh", m.get("rsh", ["ssh"]), '["ssh", "-o", "StrictHostKeyChecking=accept-new"]')
    if not rsh:
        raise _fail(p, 'mpi.rsh: must be a list of strings, e.g. ["ssh"]')
    paths = {}
    for k in ("programs", "lib", "nodes_config", "tcp_if_include"):
        v = m.get(k)
        if v is not None and (not isinstance(v, str) or not v):
            raise _fail(p, f"mpi.{k}: must be a non-empty string")
        paths[k] = v
    mpi = Mpi(tuple(impls), launchers, tuple(rsh), **paths)

    g = table(data.get("gateways", {}), "gateways", "gateways")
    if not isinstance(g.get("start", False), bool):
        raise _fail(p, "gateways.start: true (start gridsplitd where it does not answer) or false")
    for k in ("config", "gridsplitd", "admin", "log"):
        if k in g and (not isinstance(g[k], str) or not g[k]):
            raise _fail(p, f"gateways.{k}: must be a non-empty string")
    gws = Gateways(g.get("start", False), g.get("config", "/etc/gridsplit/gridsplit.toml"),
                   g.get("gridsplitd", "gridsplitd"), g.get("admin", ADMIN),
                   g.get("log", "/tmp/gridsplitd.log"))
    return Inventory(p, runner, sites, iperf_port, topology, mpi, gws, data)
