"""Reading a topology file: the TOML keys, their validation with one-line errors,
and their resolution into the model of topology.py (`load_topology`, `parse_topology`)."""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import tomllib
from importlib import resources
from pathlib import Path
from dataclasses import replace
from typing import Any, NoReturn

from .units import fmt_size, parse_size
from .errors import GridsplitError
from .topology import (CONGESTION_CONTROLS, DEFAULT_LAN_PACING, DEFAULT_POLICY_OPS, DEFAULT_POLICY_SIZES, POLICY_OPS,
                       POLICY_SIZE_RANGE, DEFAULT_TCP, DEFAULT_WAN_PACING, LAN_PACING, MAX_GATEWAYS,
                       NAME_RE, PRESETS, STRATEGIES, WAN_PACING, WAN_SPLIT, GatewaySettings, LabSettings, Site, TcpSettings, Topology,
                       WanLink)



class _Reader:
    """Reads typed fields from a TOML table, raising errors that name file and field."""

    def __init__(self, src: str, path: str, table: Any, allowed: tuple[str, ...]):
        self.src, self.path = src, path
        if not isinstance(table, dict):
            self.fail("", f"must be a table, got {type(table).__name__}")
        self.table = table
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
                self.fail(key, f"unknown key; {hint}")

    def fail(self, key: str, why: str) -> NoReturn:
        where = f"{self.path}.{key}" if self.path and key else (self.path or key)
        raise GridsplitError(f"{self.src}: {where}: {why}")

    def has(self, key: str) -> bool:
        return key in self.table

    def number(self, key: str, default: float | None = None, *, positive: bool = True,
               lo: float | None = None, hi: float | None = None, example: str = "") -> float:
        if key not in self.table:
            if default is None:
                self.fail(key, f"is required{'; e.g. ' + example if example else ''}")
            return default
        v = self.table[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(key, f"must be a number, got {v!r}{'; e.g. ' + example if example else ''}")
        fix = f"; e.g. {example}" if example else ""
        if positive and v <= 0:
            self.fail(key, f"must be > 0, got {v!r}{fix}")
        if lo is not None and v < lo:
            self.fail(key, f"must be ≥ {lo}, got {v!r}{fix}")
        if hi is not None and v > hi:
            self.fail(key, f"must be ≤ {hi}, got {v!r}{fix}")
        return v

    def integer(self, key: str, default: int | None = None, **kw: Any) -> int:
        v = self.number(key, default, **kw)
        if isinstance(v, float) and not v.is_integer():
            self.fail(key, f"must be a whole number, got {v!r}")
        return int(v)

    def string(self, key: str, default: str | None = None, choices: tuple[str, ...] = ()) -> str:
        if key not in self.table:
            if default is None:
                self.fail(key, "is required")
            return default
        v = self.table[key]
        if not isinstance(v, str):
            self.fail(key, f"must be a string, got {v!r}")
        if choices and v not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {v!r}")
        return v

    def boolean(self, key: str, default: bool) -> bool:
        v = self.table.get(key, default)
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v

    def network(self, key: str, default: str, min_prefix: int, example: str = "10.71.0.0/16") -> ipaddress.IPv4Network:
        raw = self.string(key, default)
        try:
            net = ipaddress.IPv4Network(raw)
        except ValueError:
            self.fail(key, f"{raw!r} is not an IPv4 prefix with host bits clear; e.g. \"{example}\"")
        if net.prefixlen > min_prefix:
            self.fail(key, f"{raw} is too small; use a /{min_prefix} or larger")
        if not net.is_private:
            self.fail(key, f"{raw} is not a private range; lab addresses must stay private (e.g. 10.71.0.0/16)")
        return net


SITE_KEYS = ("name", "subnet", "nodes", "max_nodes", "nic_mbps", "gateway_nic_mbps", "switch_buffer_bytes", "nic_queue_bytes",
             "uplink_mbps", "gateway", "gateways", "tcp")
TCP_KEYS = ("rmem_max", "wmem_max", "congestion", "sack")
WAN_KEYS = ("sites", "delay_ms", "delay_ms_ab", "delay_ms_ba", "rtt_ms", "rate_mbps", "buffer_bytes", "loss", "split")
TOP_KEYS = ("name", "description", "scale", "addressing", "defaults", "site", "wan", "gateways", "lab")
LAB_KEYS = ("idle", "gateway_rt", "pacing_ratio", "initrwnd", "lan_mss", "sub_segment", "wanem_steer")
GATEWAY_KEYS = ("strategy", "congestion", "lan_port", "wan_port", "per_flow_buffer", "total_buffer", "lan_tuning",
                "lan_pacing", "lan_rto_min_us", "lan_delack_max_us", "outage_limit_s", "wan_streams", "split", "encryption",
                "wan_pacing", "wan_quickack", "policy_ops", "policy_sizes")
DEFAULT_KEYS = SITE_KEYS[4:] + ("wan_rate_mbps", "wan_buffer_bytes")


def _tcp(src: str, path: str, table: Any, base: TcpSettings) -> TcpSettings:
    r = _Reader(src, path, table, TCP_KEYS)
    return TcpSettings(
        rmem_max=r.integer("rmem_max", base.rmem_max, lo=4096),
        wmem_max=r.integer("wmem_max", base.wmem_max, lo=4096),
        congestion=r.string("congestion", base.congestion, CONGESTION_CONTROLS),
        sack=r.boolean("sack", base.sack),
    )


def _lab_settings(r: _Reader) -> LabSettings:
    mss: int | str = r.table.get("lan_mss", 0)
    if mss != "auto" and not (isinstance(mss, int) and not isinstance(mss, bool) and (mss == 0 or 536 <= mss <= 1460)):
        r.fail("lan_mss", f"give 0 (the interface's MSS, the default), \"auto\" or 536-1460 bytes, got {mss!r}")
    return LabSettings(
        idle=r.string("idle", "poll", ("poll", "halt")),
        gateway_rt=r.integer("gateway_rt", 5, positive=False, lo=0, hi=99),
        pacing_ratio=r.string("pacing_ratio", "tuned", ("tuned", "kernel")),
        initrwnd=r.integer("initrwnd", 1, positive=False, lo=0, hi=1000),
        lan_mss=mss,
        sub_segment=r.boolean("sub_segment", True),
        wanem_steer=r.boolean("wanem_steer", False),
    )


def _wan_streams(g: _Reader) -> int:
    """`[gateways] wan_streams`: "auto" (0) or 1..16."""
    if g.has("wan_streams") and g.table.get("wan_streams") == "auto":
        return 0
    if g.has("wan_streams") and isinstance(g.table.get("wan_streams"), str):
        g.fail("wan_streams", 'must be "auto" or a number of connections 1..16, e.g. wan_streams = 4')
    return g.integer("wan_streams", 0, lo=1, hi=16, example="wan_streams = 4") if g.has("wan_streams") else 0


def _lan_pacing(g: _Reader) -> str:
    """`[gateways] lan_pacing`: "auto", "on" or "off" (a string, not true or false)."""
    v = g.table.get("lan_pacing", DEFAULT_LAN_PACING)
    if v not in LAN_PACING:
        allowed = ", ".join(f'"{x}"' for x in LAN_PACING[:-1]) + f' or "{LAN_PACING[-1]}"'
        g.fail("lan_pacing", f'must be {allowed}, got {v!r}; e.g. lan_pacing = "auto"')
    return v


def lan_timer(key: str, value: int | str) -> int:
    """A LAN timer (`lan_rto_min_us`, `lan_delack_max_us`) in µs: 0 (Linux's) or 2000-200000. Linux
    refuses a timer under two jiffies (2 ms at HZ=1000, 8 ms at HZ=250) and keeps its default,
    which gridsplitd and the node library can only log; under 2 ms no kernel takes it, and over
    200 ms (Linux's own minimum RTO) it would slow recovery down. ValueError names the key."""
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a whole number of µs, got {value!r}; e.g. {key}=5000") from None
    if v != 0 and not 2000 <= v <= 200000:
        raise ValueError(f"{key} must be 0 or 2000-200000 (µs): Linux refuses timers under two jiffies "
                         f"(2 ms at HZ=1000, 8 ms at HZ=250) and its own minimum RTO is 200000, got {v}")
    return v


def _lan_timer(g: _Reader, key: str) -> int:
    """`[gateways] lan_rto_min_us` / `lan_delack_max_us` (lan_timer's bounds; GatewaySettings' defaults)."""
    v = g.integer(key, getattr(GatewaySettings, key), positive=False, lo=0, hi=200000)
    try:
        return lan_timer(key, v)
    except ValueError as e:
        g.fail(key, str(e).removeprefix(f"{key} "))


def _site_subnet(r: _Reader, wan_block: ipaddress.IPv4Network, sites: list[Site]) -> ipaddress.IPv4Network:
    """`[[site]] subnet`: the site's own address plan (a real cluster's), instead of
    the next /24 of addressing.sites. Nodes are its hosts .1 to .250, the router
    .253 and the gateway .254, so it must be a /24 or larger."""
    net = r.network("subnet", "", 24, example="10.0.0.0/24")
    if net.overlaps(wan_block):
        r.fail("subnet", f"{net} overlaps addressing.wan {wan_block}; pick disjoint ranges")
    _no_overlap(r, "subnet", net, sites, str(net))
    return net


def _gateway_ips(r: "_Reader", v: Any, subnet: ipaddress.IPv4Network, nodes: int) -> tuple[ipaddress.IPv4Address, ...]:
    """`[[site]] gateways` (or `[defaults] gateways`, a count only): a count N
    (gateways at .254, then .252, .251, ... down) or a list of addresses inside
    the site's subnet. Nodes take .1 upward and the lab's router .253, so a
    gateway may be neither."""
    router = subnet.network_address + 253
    if isinstance(v, int) and not isinstance(v, bool):
        if not 1 <= v <= MAX_GATEWAYS:
            r.fail("gateways", f"{v} is not a gateway count from 1 to {MAX_GATEWAYS}; e.g. gateways = 2")
        ips = [subnet.network_address + 254] + [subnet.network_address + 253 - k for k in range(1, v)]
    elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        if len(v) > MAX_GATEWAYS:
            r.fail("gateways", f"lists {len(v)} gateways; at most {MAX_GATEWAYS}")
        ips = []
        for x in v:
            try:
                ip = ipaddress.IPv4Address(x)
            except ValueError:
                r.fail("gateways", f"{x!r} is not an IPv4 address; e.g. gateways = [\"{subnet.network_address + 254}\"]")
            if ip not in subnet or ip in (subnet.network_address, subnet.broadcast_address):
                r.fail("gateways", f"{x} is outside the site's subnet {subnet}; give the gateway hosts' addresses "
                                   f"inside it")
            if ip in ips:
                r.fail("gateways", f"{x} is listed twice")
            ips.append(ip)
    else:
        r.fail("gateways", f"{v!r} is neither a count nor a list of addresses; e.g. gateways = 2 or "
                           f"gateways = [\"{subnet.network_address + 254}\", \"{subnet.network_address + 252}\"]")
    for ip in ips:
        if ip == router:
            r.fail("gateways", f"{ip} is the lab's router address (.253 of the subnet); pick another")
        if int(ip) - int(subnet.network_address) <= nodes:
            r.fail("gateways", f"{ip} is a node's address (nodes take .1 to .{nodes}); pick one above them")
    return tuple(ips)


def _no_overlap(r: _Reader, key: str, net: ipaddress.IPv4Network, sites: list[Site], what: str) -> None:
    """Refuse two sites with overlapping address plans (the same private 10.0.0.0/24 at two sites): nodes
    tell sites apart by subnet alone (libgridsplit.so steers a connection by the subnet its destination is
    in, and gateways relay by it), so a destination in both could not be placed."""
    for other in sites:
        if net.overlaps(other.subnet):
            r.fail(key, f"{what} overlaps site {other.name}'s {other.subnet}: the node library and the gateways "
                        f"tell sites apart by subnet alone, so two sites with one address plan cannot be told "
                        f"apart; renumber one site's plan, or give it a distinct subnet")


def _wan_split(r: _Reader, a: str, b: str, routed: bool, gateway: dict[str, bool]) -> str:
    """`[[wan]] split`: "auto" (the split policy decides), "always" or "never" (pinned)."""
    split = r.string("split", "auto", WAN_SPLIT)
    if split == "never" and not routed:
        r.fail("split", f'"never" keeps {a}-{b} direct, and with [addressing] routed = false its nodes cannot reach '
                        'each other directly; leave split unset')
    gone = [x for x in (a, b) if not gateway[x]]
    if split == "always" and gone:
        r.fail("split", f'"always" needs a gateway at both sites, and {gone[0]} has none; set gateway = true '
                        f'in its [[site]] or leave split unset')
    return split


def _split(g: _Reader, routed: bool) -> str:
    """`[gateways] split`; on an unroutable grid ([addressing] routed = false) every pair must be split."""
    split = g.string("split", "auto" if routed else "all", ("auto", "all"))
    if not routed and split != "all":
        g.fail("split", f'"{split}" may keep a site pair direct, and with [addressing] routed = false its nodes '
                        'cannot reach each other directly; leave split unset or set it to "all"')
    return split


class BadPolicyJobs(ValueError):
    """A policy_ops or policy_sizes value the split model cannot weigh; `key` names which."""

    def __init__(self, key: str, why: str):
        super().__init__(why)
        self.key = key


def policy_jobs(ops: Any, sizes: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The jobs the default split policy weighs: a non-empty list of the split model's operations
    and one of message sizes (bytes, or "100K") within the range it was validated on; the
    topology's `[gateways]` keys and `bench ab`'s side keys both read them here."""
    if not isinstance(ops, (list, tuple)) or not ops or any(o not in POLICY_OPS for o in ops):
        raise BadPolicyJobs("policy_ops", f"must be a non-empty list of {', '.join(POLICY_OPS)}, got {ops!r}")
    lo, hi = POLICY_SIZE_RANGE
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise BadPolicyJobs("policy_sizes", f"must be a non-empty list of message sizes, got {sizes!r}")
    out = []
    for v in sizes:
        try:
            n = v if isinstance(v, int) and not isinstance(v, bool) else parse_size(v) if isinstance(v, str) else None
        except GridsplitError:
            n = None
        if n is None or not lo <= n <= hi:
            raise BadPolicyJobs("policy_sizes", f"{v!r} is not a message size from {fmt_size(lo)} to {fmt_size(hi)}")
        out.append(n)
    return tuple(dict.fromkeys(ops)), tuple(sorted(set(out)))


def _policy_jobs(g: _Reader) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """`[gateways] policy_ops` and `policy_sizes` (policy_jobs), with a TOML example in the error."""
    try:
        return policy_jobs(g.table.get("policy_ops", list(DEFAULT_POLICY_OPS)),
                           g.table.get("policy_sizes", list(DEFAULT_POLICY_SIZES)))
    except BadPolicyJobs as e:
        lo, hi = (fmt_size(v) for v in POLICY_SIZE_RANGE)
        example = ('["gather"] for a job that gathers' if e.key == "policy_ops" else
                   f'["100K", "1M"]; from {lo} to {hi}, the range the split model was validated on')
        g.fail(e.key, f"{e}; e.g. {example}")


def parse_topology(data: dict[str, Any], src: str) -> Topology:
    """Validate a parsed TOML document and resolve it into a Topology."""
    top = _Reader(src, "", data, TOP_KEYS)
    name = top.string("name", Path(src).stem)
    scale = top.number("scale", 1.0, lo=1.0, hi=1000.0)
    addressing = _Reader(src, "addressing", data.get("addressing", {}), ("sites", "wan", "routed"))
    sites_block = addressing.network("sites", "10.71.0.0/16", 20)
    wan_block = addressing.network("wan", "10.72.0.0/16", 24)
    if sites_block.overlaps(wan_block):
        addressing.fail("wan", f"{wan_block} overlaps addressing.sites {sites_block}; pick disjoint ranges")
    routed = addressing.boolean("routed", True)

    d = _Reader(src, "defaults", data.get("defaults", {}), DEFAULT_KEYS)
    dnic = d.number("nic_mbps", 1000.0, hi=100000, example="nic_mbps = 1000")
    dgwnic = d.number("gateway_nic_mbps", 0.0, hi=100000, example="gateway_nic_mbps = 4000")  # 0: the site's nic_mbps
    dbuf = d.integer("switch_buffer_bytes", 262144, lo=1514)
    # 1000 full frames, Linux's default txqueuelen: more than TCP Small Queues
    # lets one flow put there (tcp_limit_output_bytes, 1 MB), so a host never
    # drops its own packets, as a real host does not.
    dq = d.integer("nic_queue_bytes", 1514000, lo=1514)
    dup = d.number("uplink_mbps", 0.0, positive=False, lo=0)
    dgw = d.boolean("gateway", False)
    dgws = d.table.get("gateways")
    if dgws is not None and (isinstance(dgws, bool) or not isinstance(dgws, int)):
        d.fail("gateways", f"{dgws!r}: [defaults] takes a gateway count (e.g. gateways = 2); list addresses per [[site]]")
    dtcp = _tcp(src, "defaults.tcp", d.table.get("tcp", {}), TcpSettings(**DEFAULT_TCP))
    dwrate = d.number("wan_rate_mbps", 1000.0, hi=100000)
    dwbuf = d.integer("wan_buffer_bytes", 4 * 1048576, lo=1514)

    raw_sites = data.get("site")
    if not isinstance(raw_sites, list) or not raw_sites:
        top.fail("site", "at least one [[site]] table is required")
    subnets = list(sites_block.subnets(new_prefix=24))
    raw_wans = data.get("wan", [])
    if not isinstance(raw_wans, list):
        top.fail("wan", "must be an array of [[wan]] tables")

    # The uplink defaults to the fastest WAN link of the site, so the switch
    # uplink is never an accidental bottleneck; read WANs' rates first for that.
    sites: list[Site] = []
    for i, raw in enumerate(raw_sites):
        path = f"site[{i}]"
        r = _Reader(src, path, raw, SITE_KEYS)
        sname = r.string("name")
        if not NAME_RE.match(sname):
            r.fail("name", f"{sname!r} must be 1-12 lowercase letters/digits starting with a letter (it becomes part of namespace names)")
        if any(s.name == sname for s in sites):
            r.fail("name", f"site {sname!r} is defined twice")
        max_nodes = r.integer("max_nodes", 0, positive=False, lo=0, hi=250) or None
        nodes = r.integer("nodes", 1, lo=0, hi=250, positive=False)
        if max_nodes is not None and nodes > max_nodes:
            r.fail("nodes", f"{nodes} exceeds max_nodes = {max_nodes}")
        gateway = r.boolean("gateway", dgw)
        gws = r.table.get("gateways", dgws if r.boolean("gateway", True) else None)
        if gws is not None:
            if r.has("gateway") and not gateway:
                r.fail("gateways", "set together with gateway = false; drop one of the two")
            gateway = True
        if nodes == 0 and not gateway:
            r.fail("nodes", "a site needs at least one node or a gateway")
        if r.has("subnet"):
            subnet = _site_subnet(r, wan_block, sites)
        elif i + 1 >= len(subnets):
            r.fail("name", f"too many sites for addressing.sites {sites_block}")
        else:
            subnet = subnets[i + 1]
            _no_overlap(r, "name", subnet, sites, f"its default subnet {subnet} (from addressing.sites)")
        nic = r.number("nic_mbps", dnic, hi=100000, example="nic_mbps = 1000")
        gateway_ips = _gateway_ips(r, gws, subnet, max_nodes or nodes) if gws is not None else ()
        sites.append(Site(
            name=sname, index=i + 1, nodes=nodes, max_nodes=max_nodes,
            nic_mbps=nic,
            gateway_nic_mbps=r.number("gateway_nic_mbps", dgwnic or nic, hi=100000, example="gateway_nic_mbps = 4000"),
            switch_buffer_bytes=r.integer("switch_buffer_bytes", dbuf, lo=1514, example="switch_buffer_bytes = 262144"),
            nic_queue_bytes=r.integer("nic_queue_bytes", dq, lo=1514),
            uplink_mbps=r.number("uplink_mbps", dup, positive=False, lo=0, hi=100000),
            gateway=gateway,
            tcp=_tcp(src, f"{path}.tcp", raw.get("tcp", {}), dtcp),
            subnet=subnet,
            gateway_ips=gateway_ips,
        ))
    if not routed:
        bare = [s.name for s in sites if not s.gateway]
        if bare:
            addressing.fail("routed", f"false needs a gateway at every site (the gateways are all that reach each "
                                      f"other), and {', '.join(bare)} has none; set gateway = true there")

    names = [s.name for s in sites]
    wan_subnets = wan_block.subnets(new_prefix=30)
    wans: list[WanLink] = []
    for j, raw in enumerate(raw_wans):
        path = f"wan[{j}]"
        r = _Reader(src, path, raw, WAN_KEYS)
        pair = raw.get("sites")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            r.fail("sites", 'must name two sites, e.g. sites = ["bordeaux", "sophia"]')
        a, b = pair
        for x in (a, b):
            if x not in names:
                close = difflib.get_close_matches(x, names, n=1)
                r.fail("sites", f"unknown site {x!r}" + (f" (did you mean {close[0]!r}?)" if close else f"; sites: {', '.join(names)}"))
        if a == b:
            r.fail("sites", f"a WAN link joins two different sites, got {a!r} twice")
        if any({w.a, w.b} == {a, b} for w in wans):
            r.fail("sites", f"a second WAN link between {a} and {b}; one per site pair")
        given = [k for k in ("delay_ms", "rtt_ms", "delay_ms_ab") if r.has(k)]
        if len(given) != 1:
            r.fail("delay_ms", "give exactly one of delay_ms (one way, both directions), rtt_ms, or delay_ms_ab with delay_ms_ba")
        if r.has("rtt_ms"):
            ab = ba = r.number("rtt_ms", hi=10000) / 2
        elif r.has("delay_ms"):
            ab = ba = r.number("delay_ms", hi=5000)
        else:
            ab = r.number("delay_ms_ab", hi=5000)
            ba = r.number("delay_ms_ba", hi=5000)
        try:
            subnet = next(wan_subnets)
        except StopIteration:
            r.fail("sites", f"too many WAN links for addressing.wan {wan_block}")
        wans.append(WanLink(
            index=j, a=a, b=b, delay_ms_ab=ab, delay_ms_ba=ba,
            rate_mbps=r.number("rate_mbps", dwrate, hi=100000),
            buffer_bytes=r.integer("buffer_bytes", dwbuf, lo=1514),
            loss=r.number("loss", 0.0, positive=False, lo=0.0, hi=0.5),
            subnet=subnet,
            split=_wan_split(r, a, b, routed, {s.name: s.gateway for s in sites}),
        ))

    # Every pair of sites must be joined: routers form a full mesh and the
    # gateways' WAN links follow it.
    for x, y in itertools.combinations(names, 2):
        if not any({w.a, w.b} == {x, y} for w in wans):
            top.fail("wan", f"no [[wan]] link between {x} and {y}; every site pair needs one (full mesh)")

    resolved = []
    for s in sites:
        if s.uplink_mbps == 0:
            rates = [w.rate_mbps for w in wans if s.name in (w.a, w.b)] or [s.nic_mbps]
            s = replace(s, uplink_mbps=max(rates))
        resolved.append(s)

    g = _Reader(src, "gateways", data.get("gateways", {}), GATEWAY_KEYS)
    policy_ops, policy_sizes = _policy_jobs(g)
    gw = GatewaySettings(
        strategy=g.string("strategy", "fair", STRATEGIES),
        congestion=g.string("congestion", "cubic", CONGESTION_CONTROLS),
        lan_port=g.integer("lan_port", 7100, lo=1, hi=65535),
        wan_port=g.integer("wan_port", 7200, lo=1, hi=65535),
        per_flow_buffer=g.integer("per_flow_buffer", 4 * 1048576, lo=65536),
        total_buffer=g.integer("total_buffer", 256 * 1048576, lo=1048576),
        lan_tuning=g.boolean("lan_tuning", True),
        lan_pacing=_lan_pacing(g),
        lan_rto_min_us=_lan_timer(g, "lan_rto_min_us"),
        lan_delack_max_us=_lan_timer(g, "lan_delack_max_us"),
        outage_limit_s=g.number("outage_limit_s", 120.0, lo=1, hi=86400),
        wan_streams=_wan_streams(g),
        split=_split(g, routed),
        encryption=g.string("encryption", "noise", ("noise", "insecure")),
        wan_pacing=g.string("wan_pacing", DEFAULT_WAN_PACING, WAN_PACING),
        wan_quickack=g.boolean("wan_quickack", False),
        policy_ops=policy_ops,
        policy_sizes=policy_sizes,
    )
    if gw.lan_port == gw.wan_port:
        g.fail("wan_port", "must differ from lan_port")
    lab = _lab_settings(_Reader(src, "lab", data.get("lab", {}), LAB_KEYS))

    return Topology(
        name=name, description=top.string("description", ""), source=src,
        sites=tuple(resolved), wans=tuple(wans), sites_block=sites_block, wan_block=wan_block, gateways=gw, lab=lab,
        routed=routed,
    ).scaled(scale)


def topology_text(spec: str) -> tuple[str, str]:
    """The TOML text of a preset (by name) or a topology file (by path), and how to name its source."""
    if not spec.strip():
        raise GridsplitError(f"no topology given: name a preset ({', '.join(PRESETS)}) or a topology file")
    if spec in PRESETS:
        return resources.files("gridsplit").joinpath("presets", f"{spec}.toml").read_text(), f"preset {spec}"
    p = Path(spec)
    if not p.exists():
        raise GridsplitError(f"topology {spec!r}: no such preset or file; presets: {', '.join(PRESETS)}")
    try:
        return p.read_text(), str(p)
    except (OSError, UnicodeDecodeError) as e:
        raise GridsplitError(f"{spec}: cannot read: {e}") from None


def load_topology(spec: str, nodes: int | None = None, scale: float | None = None) -> Topology:
    """Load a preset by name (paper, g5k9, mini) or a TOML file by path.

    `scale` replaces the file's own `scale` (rates divided by it, delays kept).
    """
    text, src = topology_text(spec)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GridsplitError(f"{src}: not valid TOML: {e}") from None
    if scale is not None:
        if not 1 <= scale <= 1000:
            raise GridsplitError(f"--scale {scale:g}: must be between 1 (full rate) and 1000")
        data = {**data, "scale": scale}
    topo = parse_topology(data, src)
    return topo.with_nodes(nodes) if nodes is not None else topo
