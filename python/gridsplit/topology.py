"""The topology model shared by lab, bench, netcheck and model.

A topology is a set of sites (nodes behind one switch, an optional gateway host,
a router) and WAN links between site pairs. It is written in TOML, validated
here with errors that name the file, the field and the fix, and resolved into
concrete hosts with addresses from one address plan. Everything downstream
(namespaces, gateway configs, benchmarks, models) reads this one model, so a
number such as an RTT is defined in exactly one place.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import GridsplitError

PRESETS = ("paper", "g5k9", "mini")
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")

# Linux's own defaults for a fresh host, used when a site says nothing.
DEFAULT_TCP = {"rmem_max": 6291456, "wmem_max": 4194304, "congestion": "cubic", "sack": True}


@dataclass(frozen=True)
class TcpSettings:
    """Per-site host TCP settings: the maxima of tcp_rmem/tcp_wmem and the CC."""

    rmem_max: int
    wmem_max: int
    congestion: str
    sack: bool

    def sysctls(self) -> dict[str, str]:
        """The per-namespace sysctls that realise these settings on a host.

        The congestion control is not among them: a non-initial namespace may only
        pick one of the host's allowed algorithms, so the lab sets it per route
        (`congctl`), which has no such restriction.
        """
        return {
            "net.core.rmem_max": str(self.rmem_max),
            "net.core.wmem_max": str(self.wmem_max),
            # Sockets start at the middle value, so it must not exceed the maximum
            # (a scaled 17 KB host would otherwise open with a 128 KB window).
            "net.ipv4.tcp_rmem": f"4096 {min(131072, self.rmem_max)} {self.rmem_max}",
            "net.ipv4.tcp_wmem": f"4096 {min(16384, self.wmem_max)} {self.wmem_max}",
            "net.ipv4.tcp_sack": "1" if self.sack else "0",
        }


@dataclass(frozen=True)
class Site:
    name: str
    index: int  # 1-based, fixes the subnet
    nodes: int
    max_nodes: int | None
    nic_mbps: float
    # The gateway host's NIC (`gateway_nic_mbps`, default: the site's nic_mbps);
    # set even without a gateway, so that a model can assume one is added.
    gateway_nic_mbps: float
    switch_buffer_bytes: int
    nic_queue_bytes: int
    uplink_mbps: float
    gateway: bool
    tcp: TcpSettings
    subnet: ipaddress.IPv4Network
    # The site's gateway hosts, in order (`gateways`: a count or a list of
    # addresses); empty: one gateway at .254 when `gateway`, none otherwise.
    gateway_ips: tuple[ipaddress.IPv4Address, ...] = ()

    def host_nic_mbps(self, role: str) -> float:
        """The NIC rate of this site's host of `role` ("node" or "gateway"): the one place it is chosen."""
        return self.gateway_nic_mbps if role == "gateway" else self.nic_mbps

    @property
    def gateway_capacity_mbps(self) -> float:
        """What the site's gateways carry together, each way: one NIC each (a
        site without gateways counts as one, for models that assume one added)."""
        return self.gateway_nic_mbps * max(1, len(self.gateway_addrs))

    @property
    def router_ip(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 253

    @property
    def gateway_ip(self) -> ipaddress.IPv4Address:
        """The first gateway's address (.254 unless `gateways` lists others)."""
        return self.gateway_ips[0] if self.gateway_ips else self.subnet.network_address + 254

    @property
    def gateway_addrs(self) -> tuple[ipaddress.IPv4Address, ...]:
        """Every gateway host's address, in the order gateways and nodes list them."""
        return (self.gateway_ips or (self.gateway_ip,)) if self.gateway else ()

    def node_ip(self, k: int) -> ipaddress.IPv4Address:
        return self.subnet.network_address + k


@dataclass(frozen=True)
class Host:
    """A machine of the grid: a compute node or a site gateway."""

    name: str  # e.g. "bordeaux-3", "sophia-gw"
    site: str
    role: str  # "node" | "gateway"
    ip: ipaddress.IPv4Address
    nic_mbps: float


@dataclass(frozen=True)
class WanLink:
    index: int  # 0-based, fixes the /30
    a: str
    b: str
    delay_ms_ab: float
    delay_ms_ba: float
    rate_mbps: float
    buffer_bytes: int
    loss: float
    subnet: ipaddress.IPv4Network
    # `[[wan]] split` (WAN_SPLIT): "auto", the split policy decides; "always" or "never" pins it.
    split: str = "auto"

    @property
    def rtt_ms(self) -> float:
        return self.delay_ms_ab + self.delay_ms_ba

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"

    def ip(self, site: str) -> ipaddress.IPv4Address:
        """The address of `site`'s router on this link."""
        return self.subnet.network_address + (1 if site == self.a else 2)

    def peer(self, site: str) -> str:
        return self.b if site == self.a else self.a


# `[[wan]] split`: whether the site pair's connections are split. "auto": as the split policy
# decides (model.splitadvise.split_policy, from the split model); "always" and "never" pin it,
# e.g. for a pair where a measured application gains (or loses) against the model's prediction.
WAN_SPLIT = ("auto", "always", "never")
# What a bench side's `split=`, and `lab mpirun --split=`, take (Topology.with_split; "root" is the
# node library's host rule instead, lab.mpi.split_env).
SPLIT_SPEC = re.compile(r"^(policy|all|none|root|[a-z][a-z0-9]*-[a-z][a-z0-9]*(\+[a-z][a-z0-9]*-[a-z][a-z0-9]*)*)$")


# `[gateways] lan_pacing`: whether a gateway paces what it writes toward each LAN
# host at the nodes' NIC rate (gridsplitd [lan] rate_bps; capacity.lan_pacing_rate_bps):
# "on" at every site, "auto" where the gateway's NIC is faster than its nodes', "off" never.
LAN_PACING = ("auto", "on", "off")
# The default of topology files and GatewaySettings, in one place.
DEFAULT_LAN_PACING = "auto"


# `[gateways] wan_pacing`: the rate a gateway paces each WAN link at (gridsplitd [[link]]
# pacing_bps; capacity.wan_pacing_mbps). "full": just under the path's slowest NIC or link;
# "shared": also at most half of either end's gateway NIC (but never under a node's NIC),
# since in an exchange a one-NIC gateway's switch port takes as much from its own LAN senders
# as from the WAN (results/matrix/2026-11-27-halo-diagnosis); "adaptive": the far gateway's NIC
# less what the far site's nodes are seen sending on the link's reverse direction, between their
# NIC and the path's rate (gridsplitd link/pacer.rs; capacity.wan_adaptive_pacing).
WAN_PACING = ("full", "shared", "adaptive")
DEFAULT_WAN_PACING = "full"


# `[gateways] policy_ops` and `policy_sizes`: the jobs the default split policy weighs
# (model.splitadvise.split_policy; docs/model.md §5.6). A pair is split where one of them gains
# and none loses. When the jobs are unknown: gather, all-to-all and halo (which stands for
# neighbour-exchange applications such as LAMMPS) at 10 KB, 100 KB and 1 MB. The sizes must lie
# in the range the split model was validated on (the paper grid's sweeps: 1 KB to 2 MB).
POLICY_OPS = ("gather", "bcast", "alltoall", "halo")
DEFAULT_POLICY_OPS = ("gather", "alltoall", "halo")
DEFAULT_POLICY_SIZES = (10_000, 100_000, 1_000_000)
POLICY_SIZE_RANGE = (1_000, 2_000_000)


# gridsplitd's scheduling strategies; tests/test_safety.py checks this list
# against `gridsplitd --list-strategies`, the one registry (config/mod.rs).
STRATEGIES = ("fifo", "aggregate", "fair")


@dataclass(frozen=True)
class GatewaySettings:
    """How the site gateways (gridsplitd) run in this topology."""

    strategy: str = "fair"
    congestion: str = "cubic"
    lan_port: int = 7100
    wan_port: int = 7200
    per_flow_buffer: int = 4 * 1048576
    total_buffer: int = 256 * 1048576
    # LAN tuning of relayed connections (docs/architecture.md, "LAN legs"): the
    # gateway clamps its LAN sockets' receive windows so that together they fit
    # its switch port (incast control).
    lan_tuning: bool = True
    # Pacing of the gateway's LAN writes at the nodes' NIC rate: "auto", "on" or
    # "off" (LAN_PACING; capacity.lan_pacing_rate_bps).
    lan_pacing: str = DEFAULT_LAN_PACING
    # Pacing of the WAN links: "full", "shared" or "adaptive" (WAN_PACING; capacity.wan_pacing_mbps).
    wan_pacing: str = DEFAULT_WAN_PACING
    # Whether the gateways send a WAN lane's pending ACK each time they read it (gridsplitd
    # [wan] quickack, TCP_QUICKACK) rather than delay it (docs/design/wan-striping.md).
    wan_quickack: bool = False
    # Minimum RTO (and delayed-ACK bound) of the gateways' LAN sockets and of every
    # LAN connection of the ranks (relayed legs and connections within the site), µs;
    # 0 = Linux's 200 ms. 5000 µs: Linux rounds it up to two jiffies (8 ms at HZ=250);
    # a message's lost last segment then costs that instead of 200 ms
    # (docs/design/lan-legs.md#lan-timers).
    lan_rto_min_us: int = 5000
    # Delayed-ACK bound of both ends of every LAN leg, µs; 0 = lan_rto_min_us
    # (which needs it: a delayed ACK must not outlast that RTO). Alone, it keeps
    # a LAN leg's ACKs inside the sender's tail-loss probe timeout.
    lan_delack_max_us: int = 0
    # How long a WAN link may stay down before its flows are reset; within it
    # they are held and resumed (docs/design/wan-sessions.md).
    outage_limit_s: float = 120.0
    # TCP connections per WAN link (gridsplitd [[link]] streams); 0 = "auto":
    # `gateway config` picks the fewest that reach the link's rate at its loss
    # (capacity.wan_streams; docs/design/wan-striping.md).
    wan_streams: int = 0
    # gridsplitd [wan] encryption: "noise" (every WAN byte sealed) or
    # "insecure" (clear, trusted private WAN only; docs/design/wan-encryption.md).
    encryption: str = "noise"
    # Which site pairs' connections are split: "auto" (those where the split model
    # predicts a gain and no loss; model.splitadvise.split_policy, docs/model.md §5.6) or "all".
    split: str = "auto"
    # The jobs that policy weighs: operations (POLICY_OPS) and message sizes in bytes.
    policy_ops: tuple[str, ...] = DEFAULT_POLICY_OPS
    policy_sizes: tuple[int, ...] = DEFAULT_POLICY_SIZES

    @property
    def policy_jobs(self) -> tuple[tuple[str, int], ...]:
        """(op, bytes) of every job the default split policy weighs."""
        return tuple((op, m) for op in self.policy_ops for m in self.policy_sizes)

    @property
    def lan_delack_us(self) -> int:
        """The LAN legs' delayed-ACK bound in effect (0: Linux's)."""
        return self.lan_delack_max_us or self.lan_rto_min_us


@dataclass(frozen=True)
class LabSettings:
    """How the lab emulates this grid: switches that exist only to measure what
    a mechanism changes (`[lab]` in the topology; recorded in every result)."""

    # Idle CPUs poll while the lab is up ("poll"), or halt ("halt"): a halted
    # vCPU can come back late on a busy host (docs/design/delay-line-and-fidelity.md).
    idle: str = "poll"
    # SCHED_FIFO priority of the lab's gateways (0: normal scheduling).
    gateway_rt: int = 5
    # Gateway hosts' TCP pacing ratios: gridsplit's ("tuned") or the kernel's.
    pacing_ratio: str = "tuned"
    # Initial receive window of a gateway host's LAN route, in segments (0: the
    # kernel's 10); gateway.GATEWAY_LAN_INITRWND is the deployed value.
    initrwnd: int = 1
    # MSS the gateways offer LAN senders: 0 (the interface's), "auto"
    # (gateway.lan_mss) or a number of bytes.
    lan_mss: int | str = 0
    # Sub-segment LAN windows when whole segments do not fit the switch port.
    sub_segment: bool = True
    # Pin the delay line to the last CPU and steer the routers' WAN receive work
    # to the others (RPS); for full-rate runs (crates/wanem/README.md).
    wanem_steer: bool = False


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    source: str
    sites: tuple[Site, ...]
    wans: tuple[WanLink, ...]
    sites_block: ipaddress.IPv4Network
    wan_block: ipaddress.IPv4Network
    gateways: GatewaySettings = field(default_factory=GatewaySettings)
    lab: LabSettings = field(default_factory=LabSettings)
    scale: float = 1.0
    # `[addressing] routed`: whether the sites' subnets are routed to each other.
    # False: only the gateways' addresses are, as behind real site firewalls;
    # nodes reach other sites only through the gateways (docs/deployment.md).
    routed: bool = True

    # -- lookups ---------------------------------------------------------
    def site(self, name: str) -> Site:
        for s in self.sites:
            if s.name == name:
                return s
        raise GridsplitError(f"no site named {name!r} in topology {self.name!r}; sites: {', '.join(s.name for s in self.sites)}")

    def hosts(self) -> list[Host]:
        out = []
        for s in self.sites:
            for k in range(1, s.nodes + 1):
                out.append(Host(f"{s.name}-{k}", s.name, "node", s.node_ip(k), s.host_nic_mbps("node")))
            for k, ip in enumerate(s.gateway_addrs):
                out.append(Host(gateway_host_name(s.name, k), s.name, "gateway", ip, s.host_nic_mbps("gateway")))
        return out

    def gateway_hosts(self, site: str | None = None) -> list[Host]:
        """The gateway hosts (of one site, or all), in order."""
        return [h for h in self.hosts() if h.role == "gateway" and site in (None, h.site)]

    def nodes(self) -> list[Host]:
        return [h for h in self.hosts() if h.role == "node"]

    def host(self, name: str) -> Host:
        for h in self.hosts():
            if h.name == name or str(h.ip) == name:
                return h
        names = [h.name for h in self.hosts()]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; hosts: {', '.join(names[:8])}{' …' if len(names) > 8 else ''}"
        raise GridsplitError(f"no host named {name!r} in the lab{hint}")

    def site_of_ip(self, ip: str | ipaddress.IPv4Address) -> str | None:
        """The site whose subnet holds `ip` (nodes and gateways), or None."""
        addr = ipaddress.ip_address(ip)
        for s in self.sites:
            if addr in s.subnet:
                return s.name
        return None

    def wan(self, a: str, b: str) -> WanLink:
        for w in self.wans:
            if {w.a, w.b} == {a, b}:
                return w
        raise GridsplitError(f"no WAN link between {a} and {b} in topology {self.name!r}")

    def rtt_ms(self, a: str, b: str) -> float:
        """Configured round-trip propagation delay between two sites (0 within a site)."""
        return 0.0 if a == b else self.wan(a, b).rtt_ms

    def bottleneck_mbps(self, src: Host, dst: Host) -> float:
        """The slowest configured rate on the path from src to dst."""
        rates = [src.nic_mbps, dst.nic_mbps]
        if src.site != dst.site:
            rates += [self.site(src.site).uplink_mbps, self.wan(src.site, dst.site).rate_mbps]
        return min(rates)

    def with_split(self, spec: str) -> "Topology":
        """This grid with the site pairs that `spec` names split (SPLIT_SPEC): "policy" keeps the
        topology's own keys, "all" splits every pair (`[gateways] split = "all"`), "none" keeps every
        pair direct, and "a-b+c-d" splits exactly those pairs (`[[wan]] split` "always" for them,
        "never" for the others): what `bench ab`/`bench app` sides and `lab mpirun --split` take."""
        if spec == "policy":
            return self
        if spec == "all":
            return replace(self, gateways=replace(self.gateways, split="all"))
        if spec == "root":
            raise GridsplitError("split 'root' is the node library's host rule (connections of the job's first host), "
                                 "not a set of site pairs; here give policy, all, none, or site pairs joined by '+'")
        if not SPLIT_SPEC.match(spec):
            raise GridsplitError(f"split {spec!r}: give policy, all, none, or site pairs joined by '+', e.g. "
                                 f"{'+'.join(w.name for w in self.wans[:2]) or 'east-west'}")
        if not self.routed:
            raise GridsplitError(f"split {spec!r}: the sites of topology {self.name!r} are not routed to each other "
                                 "([addressing] routed = false), so every pair must be split; use policy or all")
        names = [] if spec == "none" else spec.split("+")
        chosen = set()
        for n in names:
            a, b = n.split("-")
            w = next((w for w in self.wans if {w.a, w.b} == {a, b}), None)
            if w is None:
                raise GridsplitError(f"split {spec!r}: {n} is no WAN link of topology {self.name!r}; its links: "
                                     f"{', '.join(x.name for x in self.wans)}")
            gone = [x for x in (w.a, w.b) if not self.site(x).gateway]
            if gone:
                raise GridsplitError(f"split {spec!r}: site {gone[0]} has no gateway, so {n} cannot be split; "
                                     f"set gateway = true for it or leave {n} out")
            chosen.add(w.name)
        wans = tuple(replace(w, split="always" if w.name in chosen else "never") for w in self.wans)
        return replace(self, wans=wans, gateways=replace(self.gateways, split="auto"))

    def with_nodes(self, n: int) -> "Topology":
        """The same topology with `n` nodes on its variable sites (those with max_nodes), or on every site."""
        variable = [s for s in self.sites if s.max_nodes is not None] or list(self.sites)
        sites = []
        for s in self.sites:
            if s in variable:
                limit = min([s.max_nodes or 250] + [int(ip) - int(s.subnet.network_address) - 1
                                                    for ip in s.gateway_ips])
                if not 1 <= n <= limit:
                    raise GridsplitError(f"--nodes {n}: site {s.name} of topology {self.name!r} takes 1 to {limit} nodes")
                s = replace(s, nodes=n)
            sites.append(s)
        return replace(self, sites=tuple(sites))

    def scaled(self, factor: float) -> "Topology":
        """This grid with every rate divided by `factor`, delays kept.

        Byte quantities that stand for "a time at a rate" (switch and WAN
        buffers, host TCP buffer maxima) are divided too, so every queueing
        delay and every ratio buffer/BDP is the one of the full-rate grid. The
        host's own NIC queue is not: like a real txqueuelen it is counted in
        frames, and TCP Small Queues must keep a flow from overflowing it.
        """
        if factor == 1:
            return self
        b = lambda n: max(int(n / factor), 1514)
        sites = tuple(replace(
            s, nic_mbps=s.nic_mbps / factor, gateway_nic_mbps=s.gateway_nic_mbps / factor,
            uplink_mbps=s.uplink_mbps / factor,
            switch_buffer_bytes=b(s.switch_buffer_bytes),
            tcp=replace(s.tcp, rmem_max=max(int(s.tcp.rmem_max / factor), 4096),
                        wmem_max=max(int(s.tcp.wmem_max / factor), 4096)))
            for s in self.sites)
        wans = tuple(replace(w, rate_mbps=w.rate_mbps / factor, buffer_bytes=b(w.buffer_bytes)) for w in self.wans)
        return replace(self, sites=sites, wans=wans, scale=self.scale * factor)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (stored in the lab state, embedded in results)."""
        return {
            "name": self.name,
            "source": self.source,
            "scale": self.scale,
            "sites": [
                {
                    "name": s.name, "nodes": s.nodes, "nic_mbps": s.nic_mbps, "gateway_nic_mbps": s.gateway_nic_mbps,
                    "switch_buffer_bytes": s.switch_buffer_bytes, "nic_queue_bytes": s.nic_queue_bytes,
                    "uplink_mbps": s.uplink_mbps, "gateway": s.gateway, "subnet": str(s.subnet),
                    **({"gateways": [str(ip) for ip in s.gateway_addrs]} if len(s.gateway_addrs) > 1 else {}),
                    "tcp": {"rmem_max": s.tcp.rmem_max, "wmem_max": s.tcp.wmem_max,
                            "congestion": s.tcp.congestion, "sack": s.tcp.sack},
                }
                for s in self.sites
            ],
            "wan": [
                {"a": w.a, "b": w.b, "delay_ms_ab": w.delay_ms_ab, "delay_ms_ba": w.delay_ms_ba,
                 "rate_mbps": w.rate_mbps, "buffer_bytes": w.buffer_bytes, "loss": w.loss,
                 "subnet": str(w.subnet), "split": w.split}
                for w in self.wans
            ],
            "routed": self.routed,
            "gateways": asdict(self.gateways),
            "lab": asdict(self.lab),
        }


# A site has at most this many gateway hosts (`gateways`).
MAX_GATEWAYS = 8


def gateway_host_name(site: str, k: int) -> str:
    """The lab host name of `site`'s gateway number k (0-based): "east-gw", then "east-gw2", ..."""
    return f"{site}-gw" if k == 0 else f"{site}-gw{k + 1}"


def gateway_label(site: str, k: int) -> str:
    """How the lab and the bench name `site`'s gateway number k (0-based): the site's
    name for the first, "east.2", "east.3", ... after it (files gw-LABEL.toml, CPU rows)."""
    return site if k == 0 else f"{site}.{k + 1}"


def gateway_of_label(label: str) -> tuple[str, int]:
    """(site, k) of a gateway_label (site names have no dot)."""
    site, _, n = label.partition(".")
    return site, int(n) - 1 if n else 0
