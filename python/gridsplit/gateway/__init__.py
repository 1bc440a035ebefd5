"""Gateway configuration from a topology, and reading a running gateway's status.

The topology is the single source of sites, subnets and WAN figures; this module
turns it into the TOML config gridsplitd reads and the node file libgridsplit.so
reads (docs/protocol.md §5), for the lab or for a real deployment, and renders
the JSON a gateway serves on its admin endpoint.
"""

from __future__ import annotations

import json
import math
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import GridsplitError
from ..tcpbound import mathis_mbps
from ..topology import Topology
from .nodes import NodeSite, nodes_file

ADMIN = "127.0.0.1:7300"
# A switched LAN's base round-trip time, for the LAN bandwidth-delay product in
# the incast budget. Under-estimating it only makes the budget more cautious.
LAN_RTT_S = 100e-6


def pacing_bps(path_mbps: float) -> int:
    """A sender pacing rate (IP bytes, what Linux paces) that keeps a path of
    `path_mbps` on the wire (Ethernet framing: 1514 bytes carry 1500) just
    under full: bursts then never pile up in a downstream buffer."""
    return int(path_mbps * 1e6 * 1500 / 1514 * 0.995)


# Most TCP connections a link is striped over (gridsplitd's config.rs MAX_STREAMS).
MAX_WAN_STREAMS = 16


def wan_streams(rate_mbps: float, rtt_ms: float, loss: float, mss: int = 1448) -> tuple[int, str]:
    """The fewest TCP connections whose Mathis bounds together reach a WAN link's
    rate at its random loss, and why, in one line for the config.

    One connection at loss p is held to about MSS/RTT x 1.22/sqrt(p) (Reno's
    bound; CUBIC does somewhat better on long paths, so this errs toward one
    stream too many, which costs a connection, not throughput). No loss: one
    connection reaches the rate once its window is tuned (docs/design/wan-striping.md)."""
    one = mathis_mbps(mss, rtt_ms, loss)
    if math.isinf(one) or one >= rate_mbps:
        return 1, (f"one connection reaches the link's {rate_mbps:g} Mb/s"
                   + (f" (loss {loss:.3%}: about {one:.0f} Mb/s each, Mathis)" if loss > 0 else " (no random loss)"))
    k = min(MAX_WAN_STREAMS, math.ceil(rate_mbps / one))
    reach = "reach" if k * one >= rate_mbps else f"reach only {k * one:.0f} Mb/s of"
    return k, (f"loss {loss:.3%} at {rtt_ms:g} ms RTT holds one connection to about {one:.0f} Mb/s (Mathis); "
               f"{k} {reach} the link's {rate_mbps:g} Mb/s")


# What a gateway host's TCP needs that no socket option sets (gridsplitd
# warns at start about each one left at the kernel's default, and shows them in
# its status): the WAN link keeps its window across pauses, and a paced link
# with a small window (fresh, or carrying only small messages) is not spaced at
# a fraction of its cap. Linux paces at ratio x cwnd / srtt below the cap; at the
# defaults (200 % / 120 %) a 4 x 1 KB gather over a fresh link took 12.9 ms
# against 11.8 at 1000 % and 11.3 direct (docs/architecture.md, "WAN pacing").
# 1000 is the kernel's maximum.
GATEWAY_HOST_SYSCTLS = {
    "net.ipv4.tcp_slow_start_after_idle": "0",
    "net.ipv4.tcp_pacing_ss_ratio": "1000",
    "net.ipv4.tcp_pacing_ca_ratio": "1000",
}


# The initial receive window (segments) a gateway host offers its LAN peers, as
# a route attribute (`ip route ... initrwnd 1` on the site subnet): the LAN
# incast clamps apply once a connection is registered, but Linux never takes
# back a window it has offered, and the handshake's default of 10 segments let
# every sender of a job's first gather burst 10 segments into the port toward
# the gateway (4 senders: 20-44 retransmissions and 1-2 timeouts each in a
# 3-gather job; with 1 segment, none). Later gathers run inside the clamps.
GATEWAY_LAN_INITRWND = 1


def gateway_host(topo: Topology, site: str):
    return next(h for h in topo.hosts() if h.role == "gateway" and h.site == site)


def lan_port_wire_bytes(topo: Topology, site: str) -> float:
    """Wire bytes in flight that the switch port toward a site's gateway holds
    without loss: its drop-tail buffer plus the LAN's bandwidth-delay product."""
    s = topo.site(site)
    return s.switch_buffer_bytes + s.gateway_nic_mbps * 1e6 / 8 * LAN_RTT_S


def lan_window_budget(topo: Topology, site: str) -> int:
    """Payload bytes the switch port toward the gateway holds in flight without
    loss: its drop-tail buffer plus the LAN's bandwidth-delay product, counted in
    wire bytes (1448 of every 1514 are payload), less one frame for the ACKs
    and probes that share the port (66-byte frames; two full frames of slack
    had pushed 8 senders, at two segments each, just over the budget; on
    `paper` it holds 16 senders at one segment). 0 when LAN tuning is off."""
    if not topo.gateways.lan_tuning:
        return 0
    return max(int(lan_port_wire_bytes(topo, site) * 1448 / 1514) - 1514, 4096)


# Bytes of TCP header options in every LAN segment: Linux sends timestamps
# (net.ipv4.tcp_timestamps = 1, its default), and an MSS option counts them.
TCP_TIMESTAMPS = 12


def lan_mss(topo: Topology, site: str) -> int:
    """The MSS a gateway offers its LAN senders so that one full segment from
    each of the site's nodes fits the switch port toward it (the budget above,
    in wire bytes: 66 of header per frame); 0 when full-size segments already
    fit, when not even 536-byte ones would, or when LAN tuning is off. A sender that may only send segments of
    half its widest window (Linux) then still sends whole segments of this
    size, where a one-segment window of 1448-byte segments gets 768-byte ones."""
    budget = lan_window_budget(topo, site)
    s = topo.site(site)
    if not budget or s.nodes < 1:
        return 0
    seg = min(int((lan_port_wire_bytes(topo, site) - 1514) / s.nodes) - 66, budget // s.nodes)
    if seg >= 1448 or seg < 536:
        return 0
    return seg + TCP_TIMESTAMPS


def lan_initrwnd(mss: int, full_size: int = GATEWAY_LAN_INITRWND) -> int:
    """The initial window (segments) the gateway host's LAN route offers:
    `full_size` full-size segments, or twice as many of a reduced MSS
    (`lan_mss`), so that senders send whole segments of it from the start."""
    return 2 * full_size if mss else full_size


def gateway_load_mbps(topo: Topology, site: str) -> float:
    """What a site's gateway NIC must carry, each way, to relay all of the site's
    cross-site traffic at the rate its nodes reach directly.

    The site's nodes exchange at most min(nodes x NIC, what the peer sites take:
    their WAN rate or their own nodes x NIC) with the other sites. A gateway has
    one NIC for both of its legs, so every relayed byte crosses it twice: once
    between the gateway and the WAN, once between it and a node. Both directions
    of a bulk exchange (all-to-all) then load its NIC twice as much as the
    nodes' NICs carry directly; a one-way pattern (a gather) would need half."""
    s = topo.site(site)
    peers = [w for w in topo.wans if site in (w.a, w.b) and topo.site(w.peer(site)).gateway]
    reach = sum(min(w.rate_mbps, topo.site(w.peer(site)).nodes * topo.site(w.peer(site)).nic_mbps) for w in peers)
    return 2 * min(s.nodes * s.nic_mbps, reach)


def split_pairs(topo: Topology) -> dict[tuple[str, str], tuple[bool, str]]:
    """The split policy: for each pair of sites with gateways, whether their
    connections are split, and why in one line.

    A pair is split when both of its gateways can carry their site's cross-site
    traffic at the rate the nodes reach directly (gateway_load_mbps): then
    splitting costs no bandwidth whatever the traffic pattern, and wins wherever
    TCP suffers (incast, loss, slow start). Otherwise bulk exchanges would be
    capped by a gateway NIC, so the pair stays direct unless `[gateways] split =
    "all"`. (docs/design/wan-striping.md, "Split policy".)"""
    out = {}
    short = {}
    for s in topo.sites:
        if s.gateway:
            need = gateway_load_mbps(topo, s.name)
            if s.gateway_nic_mbps < need * 0.999:
                short[s.name] = (f"{s.name}'s gateway NIC ({s.gateway_nic_mbps:g} Mb/s) is below the {need:g} Mb/s "
                                 f"its relayed traffic would cross it at (twice what its nodes reach directly: "
                                 f"each byte crosses a one-NIC gateway twice)")
    for w in topo.wans:
        a, b = topo.site(w.a), topo.site(w.b)
        if not (a.gateway and b.gateway):
            continue
        if topo.gateways.split == "all":
            out[(a.name, b.name)] = (True, 'split: [gateways] split = "all"')
        elif a.name in short or b.name in short:
            why = short.get(a.name) or short[b.name]
            out[(a.name, b.name)] = (False, f"direct: {why}; a faster gateway_nic_mbps, or [gateways] split = "
                                            f'"all", splits it')
        else:
            out[(a.name, b.name)] = (True, "split: both gateways carry their sites' cross-site traffic at the "
                                           "rate the nodes reach directly")
    return out


def _site_rows(topo: Topology, policy: bool) -> tuple[list[str], list[tuple[Any, list[tuple[str, str]]]]]:
    """The sites with gateways, each with the sites it stays direct with (and why),
    and a comment line per split pair: what sites_toml and nodes_conf both say."""
    pairs = split_pairs(topo) if policy else {}
    rows = [(s, [(b, why) for (a, b), (split, why) in pairs.items() if a == s.name and not split])
            for s in topo.sites if s.gateway]
    notes = [f"# {a}-{b}: {why}" for (a, b), (split, why) in pairs.items() if split]
    return notes, rows


def sites_toml(topo: Topology, policy: bool = True) -> str:
    """The gateway config's [[site]] tables.

    With `policy`, each site lists in `direct_to` the sites its connections
    with stay direct (split_pairs); without, every cross-site connection is
    split. The nodes get the same list from nodes_conf."""
    g = topo.gateways
    notes, rows = _site_rows(topo, policy)
    out = []
    for s, mine in rows:
        text = (f'[[site]]\nname = "{s.name}"\nsubnet = "{s.subnet}"\n'
                f'gateway_lan = "{s.gateway_ip}:{g.lan_port}"\ngateway_wan = "{s.gateway_ip}:{g.wan_port}"\n')
        if mine:
            text += "".join(f"# {s.name}-{b}: {why}\n" for b, why in mine)
            text += f'direct_to = "{" ".join(b for b, _ in mine)}"\n'
        out.append(text)
    return "\n".join(notes + [""] if notes else []) + "\n".join(out)


def nodes_conf(topo: Topology, policy: bool = True) -> str:
    """The node file: the sites libgridsplit.so steers connections between
    (GRIDSPLIT_CONFIG; docs/protocol.md §5), with the split policy's direct_to
    lists and reasons as in sites_toml. (`--split=all` overrides the lists at
    run time: GRIDSPLIT_SPLIT=all.)"""
    g = topo.gateways
    notes, rows = _site_rows(topo, policy)
    return nodes_file([NodeSite(s.name, str(s.subnet), f"{s.gateway_ip}:{g.lan_port}", [b for b, _ in mine],
                                [f"{s.name}-{b}: {why}" for b, why in mine]) for s, mine in rows],
                      [n[2:] for n in notes], f"`gridsplit gateway nodes-config` from topology {topo.name!r} ({topo.source})")


def gateway_toml(topo: Topology, site: str, psk_file: str, admin: str = ADMIN,
                 measured: dict[str, dict[str, Any]] | None = None, measured_from: str = "",
                 sub_segment: bool = True, mss: int = 0) -> str:
    """The full gridsplitd config for the gateway of `site`.

    `sub_segment` is `[lan] sub_segment` (off only to measure what it changes);
    `mss` is `[lan] mss` (0: the interface's; `lan_mss` computes a reduced one).

    `measured` maps a peer site to WAN settings measured by netcheck
    (netcheck.tuning.gateway_links: rtt_ms, bandwidth_bps, socket_buffer,
    pacing_bps, congestion); they replace the topology's figures for that link.
    """
    s = topo.site(site)
    if not s.gateway:
        raise GridsplitError(f"site {site!r} has no gateway in topology {topo.name!r} (set gateway = true)")
    g = topo.gateways
    peers = [w for w in topo.wans if site in (w.a, w.b) and topo.site(w.peer(site)).gateway]
    # Defaults for every link; each [[link]] then carries its own path's BDP.
    fastest = max((w.rate_mbps for w in peers), default=1000.0)
    lines = [
        f"# gridsplitd config for site {site}, generated from topology {topo.name!r} ({topo.source}).",
        "[gateway]",
        f'site = "{site}"',
        f'lan_listen = "{s.gateway_ip}:{g.lan_port}"',
        f'wan_listen = "{s.gateway_ip}:{g.wan_port}"',
        f'admin_listen = "{admin}"',
        f'strategy = "{g.strategy}"',
        f'psk_file = "{psk_file}"',
        "",
        "[limits]",
        f"per_flow_buffer = {g.per_flow_buffer}",
        f"total_buffer = {g.total_buffer}",
        "",
        "[lan]",
        "# The switch port toward this gateway holds window_budget payload bytes (buffer + LAN BDP);",
        "# LAN sockets' receive windows are clamped to share it; LAN timers (0 = Linux's defaults).",
        f"window_budget = {lan_window_budget(topo, site)}",
        "# Shares under one segment for senders that can use them, rather than no clamps (collect/incast.rs).",
        f"sub_segment = {'true' if sub_segment else 'false'}",
        # `mss` (the MSS offered to LAN senders) stays unset, the interface's,
        # unless asked for (docs/deployment.md, "LAN MSS").
        *([f"mss = {mss}"] if mss else []),
        f"rto_min_us = {g.lan_rto_min_us}",
        f"delack_max_us = {g.lan_rto_min_us}",
        # rate_bps (pacing LAN writes) stays off: measured slower on the paper
        # grid, and no better with gateways faster than their nodes
        # (docs/design/lan-legs.md, docs/design/wan-striping.md).
        "",
        "[wan]",
        f'congestion = "{g.congestion}"',
        f"bandwidth_bps = {int(fastest * 1e6)}",
        "rtt_ms = 10.0",
        "nodelay = true",
        "# A link that loses its connection reconnects and resumes its flows; past this many seconds",
        "# without one, its flows are reset on both sides (docs/design/wan-sessions.md).",
        f"outage_limit_s = {g.outage_limit_s:g}",
        "# notsent_lowat = 0: the WAN socket holds about 5 ms of its link unsent (from bandwidth_bps), so the",
        "# strategy, not the kernel, decides what a small message waits behind (docs/architecture.md).",
        "",
    ]
    for w in peers:
        peer = w.peer(site)
        m = (measured or {}).get(peer)
        if m is not None:
            lines.append(f"# {peer}: measured by netcheck ({measured_from}): buffer = headroom x BDP, pacing at the "
                         f"path's rate")
        elif measured is not None:
            lines.append(f"# {peer}: not in {measured_from or 'the netcheck report'}; topology figures")
        # The link's path runs from this gateway's NIC through the WAN to the
        # peer gateway's NIC: the slowest of them is its rate, and pacing just
        # under it keeps the sender's NIC bursts out of the far switch's buffer.
        path = topo.bottleneck_mbps(gateway_host(topo, site), gateway_host(topo, peer))
        fig = m or {"bandwidth_bps": int(path * 1e6), "rtt_ms": w.rtt_ms, "pacing_bps": pacing_bps(path)}
        if g.wan_streams:
            streams, why = g.wan_streams, "fixed by the topology ([gateways] wan_streams)"
        else:
            loss = m.get("loss", w.loss) if m is not None else w.loss
            streams, why = wan_streams(fig["bandwidth_bps"] / 1e6, fig["rtt_ms"], loss)
        lines += ["[[link]]", f'peer = "{peer}"', f"bandwidth_bps = {fig['bandwidth_bps']}", f"rtt_ms = {fig['rtt_ms']:g}",
                  f"pacing_bps = {fig['pacing_bps']}", f"# streams: {why}", f"streams = {streams}"]
        if m is not None:
            lines += [f"socket_buffer = {m['socket_buffer']}", f'congestion = "{m["congestion"]}"']
        lines.append("")
    rwnd = lan_initrwnd(mss)
    lines += ["# This host's TCP settings for the WAN link (per network namespace; gridsplitd warns when they",
              "# differ): " + "; ".join(f"sysctl -w {k}={v}" for k, v in GATEWAY_HOST_SYSCTLS.items()),
              f"# and on the route to the site's LAN, {s.subnet}: initrwnd {rwnd} "
              f"(ip route change ... initrwnd {rwnd}; docs/deployment.md)", ""]
    return "\n".join(lines) + "\n" + sites_toml(topo)


def new_psk(path: Path) -> None:
    """A fresh 256-bit pre-shared key, readable by root only."""
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)


def fetch_status(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise GridsplitError(f"cannot read gateway status from {url}: {e}; is gridsplitd running with that admin_listen?") from None
