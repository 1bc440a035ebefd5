"""Real hosts as the grid a bench runs on (`gridsplit bench gather|alltoall|app --hosts FILE`).

The hosts file (inventory.py, the format netcheck's --hosts reads) lists each
site's nodes and gateway and how to reach them over ssh; its `topology` is the
file the gateways' configs were written from (site names, the split policy,
the physics of the bound). This module offers the lab grid's interface
(grid.py) over ssh, with netcheck's ssh runner (netcheck/runner.py):

- every host is checked once up front (ssh in batch mode with the file's
  ConnectTimeout: a host that does not answer is one line, never a hang), and
  its machine and TCP facts go into the result file's meta row;
- in split mode each gateway involved must answer on its admin endpoint
  (`gridsplit gateway status`'s /status, read on the gateway host); with
  `[gateways] start = true` a silent one is started from its config;
- the MPI job is launched on the first rank's host with the hosts' own
  launcher (Open MPI `mpirun --host ... --mca plm_rsh_agent RSH`, MPICH
  `mpiexec -launcher ssh -hosts ...`), the split environment going to the
  ranks only (launch.rank_env_args); a job stopped here is stopped there (it
  watches its ssh session's stdin);
- TCP counters (/proc/net/netstat and snmp, what nstat reads) of every rank's
  host and gateway, and each gateway's gridsplitd CPU (/proc/PID/stat of the
  process on its admin port), are read over ssh around the job. There is no
  retransmission trace and no emulator here: counters are attributed to
  local/distant by role (measure.attribute), and rows carry no drops/frames.
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import sysdeps
from ..errors import GridsplitError
from ..inventory import Inventory
from ..lab import counters as C
from ..lab.mpi import watch
from ..launch import library_mode, rank_env_args, ranks_split_env
from ..netcheck.runner import FACTS_SCRIPT, Endpoint, Result, parse_facts
from ..topology import GatewaySettings, Topology
from ..topology_file import load_topology
from .measure import attribute, wan_link_delta, wan_link_snapshot
from .points import Point, bound_per_rep

# -- checks of the command line against the hosts file -----------------------------------


def hosts_topology(inv: Inventory) -> str:
    if not inv.topology:
        raise GridsplitError(f'{inv.path}: the bench needs topology = "FILE": the topology the gateways\' configs '
                             "were written from (site names, split policy, the bound's rates and delays)")
    return inv.topology


def check_fixed_variant(gw: GatewaySettings, strategies, ccs, lans, streams, pacings) -> None:
    """Real gateways run their own config: the bench cannot compare gateway settings there."""
    for flag, given, own in (("--strategy", strategies, gw.strategy), ("--wan-cc", ccs, gw.congestion),
                             ("--lan-tuning", lans, gw.lan_tuning), ("--lan-pacing", pacings, gw.lan_pacing),
                             ("--wan-streams", streams, gw.wan_streams)):
        if any(v is not None and v != own for v in given):
            raise GridsplitError(f"{flag}: with --hosts the gateways run the config written from the topology "
                                 f"({own!r} there); change it there and restart them to measure another setting")


def check_impls(inv: Inventory, impls: list[str] | None) -> list[str]:
    if impls is None:
        return list(inv.mpi.impls)
    bad = [i for i in impls if i not in inv.mpi.impls]
    if bad:
        raise GridsplitError(f"--impl {','.join(bad)}: not installed on the hosts of {inv.path} "
                             f"([mpi] impl = {list(inv.mpi.impls)}); add it there or pick among those")
    return impls


# -- the hosts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteHost:
    """A rank's host or a gateway, as the sweep places and the probe watches it."""

    name: str          # its address
    site: str
    role: str          # "node" | "gateway"
    ep: Endpoint
    nic_mbps: float    # the topology's figure for the site's hosts (the bound)

    @property
    def ip(self) -> str:  # as a lab Host's, for measure.attribute
        return self.name


# The machine facts of machine.facts(), read on a remote host (plus netcheck's TCP facts).
MACHINE_SCRIPT = "; ".join([
    'echo "hostname=$(hostname)"',
    "echo \"cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)\"",
    "echo \"memory_kib=$(sed -n 's/^MemTotal: *\\([0-9]*\\).*/\\1/p' /proc/meminfo)\"",
    "echo \"loadavg_1m_at_start=$(cut -d' ' -f1 /proc/loadavg)\"",
])


def host_facts(inv: Inventory, ep: Endpoint) -> dict[str, Any]:
    """A host's machine and TCP facts, or {"error": why ssh failed}."""
    res = inv.runner.run(ep, ["sh", "-c", MACHINE_SCRIPT + "; " + FACTS_SCRIPT], timeout=inv.runner.connect_timeout + 15)
    reason = inv.runner.unreachable(res)
    if reason:
        return {"error": reason}
    if "kernel=" not in res.stdout:
        return {"error": f"cannot read the host's facts: {res.why()}"}
    f = parse_facts(res.stdout)
    kib = f.pop("memory_kib", "")
    f["memory_gib"] = round(int(kib) / 2**20, 1) if kib.isdigit() else None
    f["cores"] = f.get("cpus")
    try:
        f["loadavg_1m_at_start"] = float(f["loadavg_1m_at_start"])
    except (KeyError, ValueError):
        pass
    return f


def _parallel(fn: Callable, items: list) -> list:
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(items)))) as pool:
        return list(pool.map(fn, items))


# -- the gateways ----------------------------------------------------------------------------

def _status_cmd(admin: str) -> list[str]:
    url = f"http://{admin}/status"
    return ["sh", "-c", f"curl -sf --max-time 5 {url} || wget -qO- -T 5 {url}"]


def gateway_status(inv: Inventory, gw: Endpoint) -> dict[str, Any] | None:
    """The gateway's /status JSON, read on its host; None when nothing answers there."""
    res = inv.runner.run(gw, _status_cmd(inv.gateways.admin), timeout=inv.runner.connect_timeout + 15)
    reason = inv.runner.unreachable(res)
    if reason:
        raise GridsplitError(f"gateway {gw.name} (site {gw.site}) does not answer ssh: {reason}")
    try:
        return json.loads(res.stdout) if res.rc == 0 else None
    except ValueError:
        return None


def start_gateway(inv: Inventory, gw: Endpoint, config: str) -> None:
    g = inv.gateways
    script = (f"setsid nohup {shlex.quote(g.gridsplitd)} --config {shlex.quote(config)} "
              f">>{shlex.quote(g.log)} 2>&1 </dev/null &")
    res = inv.runner.run(gw, ["sh", "-c", script], timeout=inv.runner.connect_timeout + 15)
    if res.rc != 0:
        raise GridsplitError(f"cannot start gridsplitd on {gw.name} (site {gw.site}): {res.why()}")


def ensure_gateways(inv: Inventory, sites: list[str], con: Console) -> dict[str, Any]:
    """Every listed site's gateway answering with its WAN links up (started first where the file
    says so); a summary of each for the meta row."""
    missing = [s for s in sites if inv.site(s).gateway is None]
    if missing:
        raise GridsplitError(f"{inv.path}: site {missing[0]} has no gateway; split mode relays through it: "
                             f'add gateway = "HOST" to its [[site]] (or run --modes direct)')
    gws = [inv.site(s).gateway for s in sites]
    status = dict(zip(sites, _parallel(lambda gw: gateway_status(inv, gw), gws)))
    started = []
    for site, gw in zip(sites, gws):
        if status[site] is None:
            if not inv.gateways.start:
                raise GridsplitError(f"gridsplitd on {gw.name} (site {site}) does not answer on {inv.gateways.admin}: "
                                     "start it (systemctl start gridsplitd), or set [gateways] start = true in "
                                     f"{inv.path} to start it with {inv.site(site).gateway_config or inv.gateways.config}")
            config = inv.site(site).gateway_config or inv.gateways.config
            con.print(f"[dim]·[/dim] starting gridsplitd on {gw.name} ({site}) with {config}")
            start_gateway(inv, gw, config)
            started.append(site)
    deadline = time.monotonic() + 20
    while True:
        pending = [s for s in sites if status[s] is None or _links_up(status[s]) < len(sites) - 1]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
        for s in pending:
            status[s] = gateway_status(inv, inv.site(s).gateway)
    if pending:
        s = pending[0]
        what = ("does not answer" if status[s] is None
                else f"has {_links_up(status[s])} of its {len(sites) - 1} WAN links up")
        raise GridsplitError(f"gridsplitd on {inv.site(s).gateway.name} (site {s}) {what} after 20 s"
                             + (f"; see {inv.gateways.log} there" if s in started else ""))
    return {s: {"gateway": inv.site(s).gateway.name, "started_by_bench": s in started,
                "links": [{k: l.get(k) for k in ("peer", "state", "streams", "strategy")}
                          for l in status[s].get("links", [])]} for s in sites}


def _links_up(status: dict[str, Any]) -> int:
    return sum(1 for l in status.get("links", []) if l.get("state", "up") == "up")


# -- counters and CPU over ssh -----------------------------------------------------------

SNAPSHOT = "cat /proc/net/netstat /proc/net/snmp"
# The gridsplitd listening on the admin port, its /proc/PID/stat after the command, and the clock tick.
GW_CPU = ("echo @@; p=$(ss -Hltnp 'sport = :{port}' | sed -n 's/.*pid=\\([0-9]*\\).*/\\1/p' | head -1); "
          "[ -n \"$p\" ] && cut -d')' -f2- /proc/$p/stat; echo @@; getconf CLK_TCK")


def _cpu_s(text: str) -> float | None:
    try:
        stat, tick = text.split("@@")[1:3]
        f = stat.split()
        return (int(f[11]) + int(f[12])) / int(tick.strip())
    except (ValueError, IndexError):
        return None


class RemoteProbe:
    """measure.Probe's interface for real hosts: counters of every watched host, and each
    gateway's gridsplitd CPU from start() to the result, all read over ssh."""

    def __init__(self, inv: Inventory, watched: dict[str, RemoteHost], wan_links: bool = False):
        self.inv, self.watched, self.wan_links = inv, watched, wan_links
        self.port = inv.gateways.admin.rsplit(":", 1)[-1]
        self.gws = {h.site: h for h in watched.values() if h.role == "gateway"}
        self._gw_before: dict[str, float | None] = {}
        self._gw_after: dict[str, float | None] = {}
        self.links: dict[str, dict[str, Any]] = {}

    def _read(self, h: RemoteHost, counters: bool = True) -> tuple[dict[str, int], float | None]:
        parts = ([SNAPSHOT] if counters else []) + ([GW_CPU.format(port=self.port)] if h.role == "gateway" else [])
        res = self.inv.runner.run(h.ep, ["sh", "-c", "; ".join(parts)], timeout=self.inv.runner.connect_timeout + 15)
        reason = self.inv.runner.unreachable(res)
        if reason:
            raise GridsplitError(f"{h.name} (site {h.site}) stopped answering ssh during the run: {reason}")
        return C.parse_proc(res.stdout.split("@@")[0]), _cpu_s(res.stdout) if h.role == "gateway" else None

    def _all(self) -> dict[str, tuple[dict[str, int], float | None]]:
        names = list(self.watched)
        return dict(zip(names, _parallel(lambda n: self._read(self.watched[n]), names)))

    def _links(self) -> dict[str, list[dict[str, int]]]:
        sites = list(self.gws) if self.wan_links else []
        return wan_link_snapshot(dict(zip(sites, _parallel(lambda s: gateway_status(self.inv, self.gws[s].ep), sites))))

    def start(self) -> None:
        self._links_before = self._links()
        snap = self._all()
        self._before = {n: c for n, (c, _) in snap.items()}
        self._gw_before = {s: snap[h.name][1] for s, h in self.gws.items()}
        self._gw_after = {}

    def at_result(self) -> None:
        # Called while the job may still run (lab.mpi.watch's on_result): a gateway that does not
        # answer now loses its CPU figure, not the run; stop() says so if it stays silent.
        def cpu(site: str) -> float | None:
            try:
                return self._read(self.gws[site], counters=False)[1]
            except GridsplitError:
                return None
        sites = list(self.gws)
        self._gw_after = dict(zip(sites, _parallel(cpu, sites)))

    def stop(self) -> None:
        if not self._gw_after:
            self.at_result()
        after = {n: c for n, (c, _) in self._all().items()}
        self.deltas = {n: C.delta(self._before[n], after[n]) for n in self.watched}
        self.links = wan_link_delta(self._links_before, self._links())

    def counters(self, mode: str) -> dict[str, Any]:
        return {
            **attribute(None, mode, self.deltas, self.watched, None),
            "traced": None, "attribution": "role",
            "traced_retrans_segs": None,
            "counted_retrans_segs": sum(d.get("RetransSegs", 0) for d in self.deltas.values()),
            "trace_overrun": None,
            "by_host": {n: {k: v for k, v in d.items() if k in C.HEADLINE} for n, d in self.deltas.items()},
        }

    def network(self) -> dict[str, Any]:
        # No lab queues or delay line on real hosts; the gateways' WAN links in split mode.
        return {"wan_links": self.links} if self.links else {}

    def gw_cpu_s(self) -> dict[str, float]:
        return {s: self._gw_after[s] - b for s, b in self._gw_before.items()
                if b is not None and self._gw_after.get(s) is not None}

    def gw_softirq_s(self) -> None:
        return None

    def softirq_note(self) -> dict[str, Any]:
        return {}


def _tar_of(d: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(d, arcname=".")
    return buf.getvalue()


# -- the job -------------------------------------------------------------------------------

# Runs the launcher on its host and stops it when the ssh session that started it
# ends (its stdin closes): a job stopped here (timeout, Ctrl-C) is stopped there.
WATCHED = ('exec 3<&0; "$@" </dev/null & p=$!; '
           '(cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; sleep 5; kill -KILL $p 2>/dev/null) '
           '>/dev/null 2>&1 & w=$!; exec 3<&-; wait $p; rc=$?; kill $w 2>/dev/null; exit $rc')


def job_argv(inv: Inventory, impl: str, hosts: list[RemoteHost], prog: list[str], env: dict[str, str],
             n: int, wdir: str | None = None) -> list[str]:
    """The launcher command line run on the first rank's host: rank i on hosts[i % len(hosts)], started
    in `wdir`; `env` to the ranks only."""
    names = ",".join(h.ep.address for h in hosts)
    m = inv.mpi
    launcher = m.launchers[impl]
    if impl == "openmpi":
        ifs = ["--mca", "btl_tcp_if_include", m.tcp_if_include, "--mca", "oob_tcp_if_include", m.tcp_if_include] \
            if m.tcp_if_include else []
        return [launcher, "--allow-run-as-root", "--map-by", "node", "--host", names, "-n", str(n),
                *(["--oversubscribe"] if n > len(hosts) else []), *(["--wdir", wdir] if wdir else []),
                "--mca", "plm_rsh_agent", shlex.join(m.rsh), "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", *ifs,
                *rank_env_args("openmpi", env), *prog]
    if len(m.rsh) > 1:
        raise GridsplitError(f"{inv.path}: mpi.rsh {list(m.rsh)}: MPICH's hydra runs one program as its ssh "
                             "(-launcher-exec): put the options in ~/.ssh/config on the hosts, or in a script")
    return [launcher, "-launcher", "ssh", "-launcher-exec", m.rsh[0], "-hosts", names, "-n", str(n),
            *(["-wdir", wdir] if wdir else []),
            *rank_env_args("mpich", env), *prog]


class HostsGrid:
    kind = "hosts"
    # What every rank gets before --rank-env (recorded in the meta row): gridsplit steers TCP, so
    # MPICH's UCX is held to it as Open MPI is by `--mca btl tcp,self` (job_argv).
    rank_env: dict[str, dict[str, str]] = {"mpich": {"UCX_TLS": "tcp,self"}, "openmpi": {}}

    def __init__(self, inv: Inventory, topo: Topology, facts: dict[str, Any], gateways: dict[str, Any]):
        self.inv, self.topo, self.facts, self.gw_status = inv, topo, facts, gateways
        self.sites = [s.name for s in inv.sites]
        nic = {s: topo.site(s).host_nic_mbps("node") for s in self.sites}
        self.nodes = [RemoteHost(e.name, s.name, "node", e, nic[s.name]) for s in inv.sites for e in s.hosts]
        self.gws = {s.name: RemoteHost(s.gateway.name, s.name, "gateway", s.gateway,
                                       topo.site(s.name).host_nic_mbps("gateway"))
                    for s in inv.sites if s.gateway and topo.site(s.name).gateway}
        self.where = str(inv.path)
        self.more = "list more hosts there or lower --nodes"

    def bound(self, op: str, root: RemoteHost, senders: list[RemoteHost], size: int) -> float:
        return bound_per_rep(self.topo, op, root, senders, size)

    def program(self, impl: str, prog: str) -> str:
        m = self.inv.mpi
        return f"{m.programs.rstrip('/')}/{impl}/{prog}" if m.programs else sysdeps.mpi_program(impl, prog)

    def split_env(self, split: str = "policy", root: RemoteHost | None = None) -> dict[str, str]:
        m = self.inv.mpi
        if split not in ("policy", "all", "root"):
            raise GridsplitError(f"split {split!r}: on real hosts the ranks read the node file on the nodes; pin "
                                 "pairs with [[wan]] split in the topology and write it again with "
                                 "`gridsplit gateway nodes-config`, or give policy, all or root")
        if not m.nodes_config:
            raise GridsplitError(f"{self.inv.path}: split mode needs [mpi] nodes_config = \"PATH\": the node file "
                                 "on the nodes (`gridsplit gateway nodes-config`)")
        return ranks_split_env(m.lib or sysdeps.built("libgridsplit.so"), m.nodes_config,
                               library_mode(split, root and str(root.ip)))

    def gateways(self, sites: set[str]) -> list[RemoteHost]:
        return [self.gws[s] for s in self.sites if s in sites and s in self.gws]

    def probe(self, watched: dict[str, RemoteHost], mode: str) -> RemoteProbe:
        return RemoteProbe(self.inv, watched, mode == "split")

    def mpirun(self, impl: str, hosts: list[RemoteHost], prog: list[str], env: dict[str, str], timeout: float,
               on_result: Callable[[], None] | None, expect_lines: int = 0, n: int | None = None,
               wdir: str | None = None) -> subprocess.CompletedProcess:
        """One job launched on hosts[0], rank i on hosts[i % len(hosts)] (n ranks, default one per host),
        started in `wdir` on every host."""
        env = {**self.rank_env.get(impl, {}), **env}
        job = ["sh", "-c", WATCHED, "sh", *job_argv(self.inv, impl, hosts, prog, env, n or len(hosts), wdir)]
        argv = self.inv.runner.argv(hosts[0].ep, job, timeout)
        cp = watch(argv, None, shlex.join(prog), capture=True, timeout=timeout + self.inv.runner.connect_timeout + 5,
                   keep_partial=True, expect_lines=expect_lines, on_result=on_result, stdin_pipe=True)
        reason = self.inv.runner.unreachable(Result(cp.returncode, cp.stdout or "", cp.stderr or ""))
        if cp.returncode == 255 and reason:
            raise GridsplitError(f"{hosts[0].name} (site {hosts[0].site}): cannot launch the job: {reason}")
        return cp

    @contextmanager
    def app_dir(self, work: Path, hosts: list[RemoteHost], in_work: bool,
                wrapper: Path) -> Iterator[tuple[str, list[str]]]:
        """A directory of the run's own on every rank's host (WORK-remote, the same path on each):
        `work` (the app's inputs, and the rank wrapper) copied there over ssh; after the job, what
        the ranks wrote there is copied back into `work` (host by host) and the directory removed."""
        rdir = f"{work}-remote"
        shutil.copy(wrapper, work / ".rankcpu.py")
        uniq = list({h.name: h for h in hosts}.values())
        shipped = []
        try:
            for h in uniq:
                self._tar(h, f"mkdir -p {shlex.quote(rdir)} && tar -C {shlex.quote(rdir)} -xf -", _tar_of(work))
                shipped.append(h)
            yield rdir, ["python3", f"{rdir}/.rankcpu.py", f"{rdir}/.rankcpu"]
            # All hosts first, then the removal: on a shared filesystem the directory is one.
            for h in shipped:
                with tarfile.open(fileobj=io.BytesIO(self._tar(h, f"tar -C {shlex.quote(rdir)} -cf - .", b""))) as t:
                    t.extractall(work, filter="data")
        finally:
            for h in shipped:
                self.inv.runner.run(h.ep, ["rm", "-rf", rdir], timeout=60)

    def _tar(self, h: RemoteHost, script: str, data: bytes) -> bytes:
        argv = self.inv.runner.argv(h.ep, ["sh", "-c", script], 120)
        try:
            cp = subprocess.run(argv, input=data, capture_output=True, timeout=130)
        except subprocess.TimeoutExpired:
            raise GridsplitError(f"{h.name} (site {h.site}): copying the run's directory took over 120 s") from None
        if cp.returncode != 0:
            why = (cp.stderr.decode(errors="replace").strip().splitlines() or [f"exit {cp.returncode}"])[-1]
            raise GridsplitError(f"{h.name} (site {h.site}): cannot copy the run's directory over ssh: {why}")
        return cp.stdout

    def prepare(self, p: Point, say: Callable[[str], None]) -> None:
        pass  # the gateways run their own config (check_fixed_variant)

    def meta(self) -> dict[str, Any]:
        return {"topology": self.topo.to_dict(),
                "hosts": {**self.inv.to_dict(), "facts": self.facts, "gateways": self.gw_status}}


@contextmanager
def hosts_grid(inv: Inventory, modes: set[str], con: Console) -> Iterator[HostsGrid]:
    """The hosts of `inv`, each checked over ssh (one line for the first that does not answer),
    and in split mode their gateways answering with their links up."""
    topo = load_topology(hosts_topology(inv))
    unknown = [s.name for s in inv.sites if s.name not in {t.name for t in topo.sites}]
    if unknown:
        raise GridsplitError(f"{inv.path}: site {unknown[0]} is not a site of topology {topo.name!r} "
                             f"({', '.join(t.name for t in topo.sites)}); name the sites as the topology does")
    # The gateways listed are watched in both modes (their counters), as the lab's are.
    eps = [e for s in inv.sites for e in s.hosts] + [s.gateway for s in inv.sites if s.gateway]
    con.print(f"[dim]·[/dim] checking {len(eps)} hosts of {inv.path} over ssh")
    facts = dict(zip([e.name for e in eps], _parallel(lambda e: host_facts(inv, e), eps)))
    for e in eps:
        if "error" in facts[e.name]:
            raise GridsplitError(f"{e.name} (site {e.site}) does not answer ssh: {facts[e.name]['error']}")
    gws = ensure_gateways(inv, [s.name for s in inv.sites], con) if "split" in modes else {}
    yield HostsGrid(inv, topo, facts, gws)
