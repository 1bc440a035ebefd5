"""Gateway configuration from a topology, and reading a running gateway's status.

The topology is the single source of sites, subnets and WAN figures; this module
turns it into the TOML config gridsplitd reads and the node file libgridsplit.so
reads (docs/protocol.md §5), for the lab or for a real deployment, and renders
the JSON a gateway serves on its admin endpoint.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import GridsplitError
from ..capacity import (lan_pacing_burst_bytes, lan_pacing_rate_bps, lan_port_wire_bytes, lan_window_budget,
                        gateway_path_mbps, wan_adaptive_pacing, wan_pacing_mbps, wan_streams)
from ..model.splitadvise import split_policy
from ..tcpbound import FRAME_OVERHEAD, FULL_FRAME, IP_MTU, MSS
from ..topology import Topology
from .nodes import NodeSite, nodes_file

ADMIN = "127.0.0.1:7300"


def toml_str(v: object) -> str:
    """`v` as a TOML basic string. The configs are written line by line, not by a TOML
    library, because they carry the policy's reasons as comments beside the keys they
    explain; every string from a user (paths, names) is quoted here."""
    return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")


def pacing_bps(path_mbps: float) -> int:
    """A sender pacing rate (IP bytes, what Linux paces) that keeps a path of
    `path_mbps` on the wire (Ethernet framing: 1514 bytes carry 1500) just
    under full: bursts then never pile up in a downstream buffer."""
    return int(path_mbps * 1e6 * IP_MTU / FULL_FRAME * 0.995)


# What a gateway host's TCP needs that no socket option sets (gridsplitd
# warns at start about each one left at the kernel's default, and shows them in
# its status): the WAN link keeps its window across pauses, and a paced link
# with a small window (fresh, or carrying only small messages) is not spaced at
# a fraction of its cap. Linux paces at ratio x cwnd / srtt below the cap, so at the
# defaults (200 % / 120 %) a small window's segments are spread over the whole RTT
# and a small gather over a fresh link waits for them (measured: docs/design/wan-pacing.md).
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
    seg = min(int((lan_port_wire_bytes(topo, site) - FULL_FRAME) / s.nodes) - FRAME_OVERHEAD, budget // s.nodes)
    if seg >= MSS or seg < 536:
        return 0
    return seg + TCP_TIMESTAMPS


def lan_initrwnd(mss: int, full_size: int = GATEWAY_LAN_INITRWND) -> int:
    """The initial window (segments) the gateway host's LAN route offers:
    `full_size` full-size segments, or twice as many of a reduced MSS
    (`lan_mss`), so that senders send whole segments of it from the start."""
    return 2 * full_size if mss else full_size


def _site_rows(topo: Topology, policy: bool) -> tuple[list[str], list[tuple[Any, list[tuple[str, str]]]]]:
    """The sites with gateways, each with the sites it stays direct with (and why),
    and a comment line per split pair: what sites_toml and nodes_conf both say."""
    pairs = split_policy(topo) if policy else {}
    rows = [(s, [(b, why) for (a, b), (split, why) in pairs.items() if a == s.name and not split])
            for s in topo.sites if s.gateway]
    notes = [f"# {a}-{b}: {why}" for (a, b), (split, why) in pairs.items() if split]
    return notes, rows


def sites_toml(topo: Topology, policy: bool = True) -> str:
    """The gateway config's [[site]] tables.

    With `policy`, each site lists in `direct_to` the sites its connections
    with stay direct (the split model's policy, model.splitadvise.split_policy); without, every cross-site connection is
    split. The nodes get the same list from nodes_conf."""
    g = topo.gateways
    notes, rows = _site_rows(topo, policy)
    out = []
    for s, mine in rows:
        # One table per gateway host, in the site's order: the order is each
        # gateway's gateway_index (docs/protocol.md §5).
        for ip in s.gateway_addrs:
            text = (f'[[site]]\nname = {toml_str(s.name)}\nsubnet = "{s.subnet}"\n'
                    f'gateway_lan = "{ip}:{g.lan_port}"\ngateway_wan = "{ip}:{g.wan_port}"\n')
            if mine:
                text += "".join(f"# {s.name}-{b}: {why}\n" for b, why in mine)
                text += f'direct_to = {toml_str(" ".join(b for b, _ in mine))}\n'
            out.append(text)
    return "\n".join(notes + [""] if notes else []) + "\n".join(out)


def nodes_conf(topo: Topology, policy: bool = True) -> str:
    """The node file: the sites libgridsplit.so steers connections between
    (GRIDSPLIT_CONFIG; docs/protocol.md §5), with the split policy's direct_to
    lists and reasons as in sites_toml. (`--split=all` overrides the lists at
    run time: GRIDSPLIT_SPLIT=all.)"""
    g = topo.gateways
    notes, rows = _site_rows(topo, policy)
    return nodes_file([NodeSite(s.name, str(s.subnet), f"{ip}:{g.lan_port}", [b for b, _ in mine],
                                [f"{s.name}-{b}: {why}" for b, why in mine]) for s, mine in rows
                       for ip in s.gateway_addrs],
                      [n[2:] for n in notes], f"`gridsplit gateway nodes-config` from topology {topo.name!r} ({topo.source})",
                      routed=topo.routed, lan_timers=(g.lan_rto_min_us, g.lan_delack_us))


def gateway_toml(topo: Topology, site: str, psk_file: str, admin: str = ADMIN,
                 measured: dict[str, dict[str, Any]] | None = None, measured_from: str = "",
                 sub_segment: bool = True, mss: int = 0, index: int = 0) -> str:
    """The full gridsplitd config for gateway `index` (0-based) of `site`.

    `sub_segment` is `[lan] sub_segment` (off only to measure what it changes);
    `mss` is `[lan] mss` (0: the interface's; `lan_mss` computes a reduced one).

    `measured` maps a peer site to WAN settings measured by netcheck
    (netcheck.tuning.gateway_links: rtt_ms, bandwidth_bps, socket_buffer,
    pacing_bps, congestion); they replace the topology's figures for that link.
    """
    s = topo.site(site)
    if not s.gateway:
        raise GridsplitError(f"site {site!r} has no gateway in topology {topo.name!r} (set gateway = true)")
    if not 0 <= index < len(s.gateway_addrs):
        raise GridsplitError(f"--gateway {index + 1}: site {site!r} has {len(s.gateway_addrs)} gateway(s) in topology "
                             f"{topo.name!r}; give 1 to {len(s.gateway_addrs)}")
    ip = s.gateway_addrs[index]
    g = topo.gateways
    peers = [w for w in topo.wans if site in (w.a, w.b) and topo.site(w.peer(site)).gateway]
    # Defaults for every link; each [[link]] then carries its own path's BDP.
    fastest = max((w.rate_mbps for w in peers), default=1000.0)
    several = len(s.gateway_addrs) > 1
    lan_rate = lan_pacing_rate_bps(topo, site)
    lines = [
        f"# gridsplitd config for {f'gateway {index + 1} of {len(s.gateway_addrs)} of ' if several else ''}site {site}, "
        f"generated from topology {topo.name!r} ({topo.source}).",
        *(["# Which of this site's [[site]] tables (below, in order) is this gateway.", f"gateway_index = {index}", ""]
          if several else []),
        "[gateway]",
        f'site = {toml_str(site)}',
        f'lan_listen = "{ip}:{g.lan_port}"',
        f'wan_listen = "{ip}:{g.wan_port}"',
        f'admin_listen = {toml_str(admin)}',
        f'strategy = "{g.strategy}"',
        f'psk_file = {toml_str(psk_file)}',
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
        f"delack_max_us = {g.lan_delack_us}",
        # rate_bps only where [gateways] lan_pacing asks for it (capacity.lan_pacing_rate_bps); unset: off.
        *(["# Paces writes toward each LAN host under its port rate, shared by its busy sockets once",
           "# they hold more than the host's switch port absorbs (docs/design/lan-legs.md).",
           f"rate_bps = {lan_rate}", f"burst_bytes = {lan_pacing_burst_bytes(topo, site)}"] if lan_rate else []),
        "",
        "[wan]",
        f'congestion = "{g.congestion}"',
        f"bandwidth_bps = {int(fastest * 1e6)}",
        "rtt_ms = 10.0",
        "nodelay = true",
        *(["# A lane's pending ACK sent at each read, not held for a second segment or the delayed-ACK",
           "# timer ([gateways] wan_quickack; docs/design/wan-striping.md).",
           "quickack = true"] if g.wan_quickack else []),
        "# A link that loses its connection reconnects and resumes its flows; past this many seconds",
        "# without one, its flows are reset on both sides (docs/design/wan-sessions.md).",
        f"outage_limit_s = {g.outage_limit_s:g}",
        "# Every byte after the PSK handshake sealed with Noise (NNpsk0, ChaCha20-Poly1305); \"insecure\" only on a",
        "# trusted private WAN, and on both gateways alike (docs/design/wan-encryption.md).",
        f'encryption = "{g.encryption}"',
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
        path = gateway_path_mbps(topo, site, peer)
        fig = m or {"bandwidth_bps": int(path * 1e6), "rtt_ms": w.rtt_ms,
                    "pacing_bps": pacing_bps(wan_pacing_mbps(topo, site, peer, path))}
        if g.wan_streams:
            streams, why = g.wan_streams, "fixed by the topology ([gateways] wan_streams)"
        else:
            loss = m.get("loss", w.loss) if m is not None else w.loss
            streams, why = wan_streams(fig["bandwidth_bps"] / 1e6, fig["rtt_ms"], loss)
        lines += ["[[link]]", f'peer = {toml_str(peer)}', f"bandwidth_bps = {fig['bandwidth_bps']}", f"rtt_ms = {fig['rtt_ms']:g}",
                  f"pacing_bps = {fig['pacing_bps']}", f"# streams: {why}", f"streams = {streams}"]
        adaptive = wan_adaptive_pacing(topo, peer)
        if adaptive:
            port, floor = (pacing_bps(x) for x in adaptive)
            lines += [f"# wan_pacing = \"adaptive\": paced at {peer}'s gateway port ({adaptive[0]:g} Mb/s) less what its nodes",
                      f"# are seen sending back on this link, between {adaptive[1]:g} Mb/s and pacing_bps "
                      "(docs/design/wan-pacing.md)",
                      f"pacing_far_port_bps = {port}", f"pacing_floor_bps = {min(floor, fig['pacing_bps'])}"]
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
    """A fresh 256-bit pre-shared key, readable by root only.

    It is all a WAN link needs, encrypted or not: the HMAC challenge uses it,
    and the Noise handshake (NNpsk0) mixes a key derived from it with fresh
    ephemeral keys per connection (docs/design/wan-encryption.md). Written to
    a temporary file and renamed, so a gateway reloading on SIGHUP never reads
    half a key.
    """
    tmp = path.with_name(f".{path.name}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.replace(tmp, path)


def fetch_status(url: str) -> dict[str, Any]:
    parts = urllib.parse.urlsplit(url)
    try:
        port_ok = parts.port is None or 0 < parts.port
    except ValueError:  # urllib refuses a port out of range when asked for it
        port_ok = False
    if parts.scheme != "http" or not parts.hostname or not port_ok:
        raise GridsplitError(f"--url {url!r}: give a gateway's admin status URL, http://HOST:PORT/status "
                             f"(HOST:PORT is its admin_listen, e.g. http://{ADMIN}/status)")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise GridsplitError(f"cannot read gateway status from {url}: {e}; is gridsplitd running with that admin_listen?") from None
