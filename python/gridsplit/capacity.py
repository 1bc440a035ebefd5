"""What a grid's ports, WAN links and gateways can carry: the physics that the
gateway config (how many WAN streams, how wide the LAN windows), the split model
and its validation share. Kept apart from gateway/ and model/ so that each
imports it without importing the other (the gateway config asks the model for
its split policy)."""

from __future__ import annotations

import math

from .tcpbound import FULL_FRAME, IP_MTU, MSS, mathis_mbps
from .topology import Topology

# A switched LAN's base round-trip time, for the LAN bandwidth-delay product in
# the incast budget. Under-estimating it only makes the budget more cautious.
LAN_RTT_S = 100e-6


# Most TCP connections a link is striped over (gridsplitd's config/wan.rs MAX_STREAMS).
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


def wan_pacing_mbps(topo: Topology, site: str, peer: str, path_mbps: float) -> float:
    """The rate a gateway paces its WAN link to `peer` at, before framing (gateway.pacing_bps); the
    split model reads it too (splitterms.shared_port_rounds).

    `[gateways] wan_pacing = "full"`: the path's rate. `"shared"`: also at most half of
    either end's gateway NIC, but never under a node's NIC. In an exchange a one-NIC
    gateway's switch port takes its own nodes' relayed sends and the WAN link's arrivals
    at once; paced at the whole NIC, the WAN link overruns that port, its one connection
    loses and its window stays small (a repetition of a 100 KB halo then takes two or
    three WAN round trips: results/matrix/2026-11-27-halo-diagnosis). One flow into one
    node never needs more than the node's NIC, so that floor costs a gather nothing."""
    if topo.gateways.wan_pacing != "shared":
        return path_mbps
    halves = [max(topo.site(x).host_nic_mbps("node"), topo.site(x).host_nic_mbps("gateway") / 2) for x in (site, peer)]
    return min(path_mbps, *halves)


def wan_adaptive_pacing(topo: Topology, peer: str) -> tuple[float, float] | None:
    """`[gateways] wan_pacing = "adaptive"`: the far gateway's NIC (its switch port's rate) and the
    floor (the far site's node NIC) that gridsplitd paces a link toward `peer` between, taking off
    the port's rate what the far site's nodes are seen sending back on the link (link/pacer.rs).
    None for the fixed settings. The split model takes the same remainder off the far port in
    term (h) (model/splitmodel.py `_far_ports`)."""
    if topo.gateways.wan_pacing != "adaptive":
        return None
    far = topo.site(peer)
    return far.host_nic_mbps("gateway"), far.host_nic_mbps("node")


def gateway_path_mbps(topo: Topology, site: str, peer: str) -> float:
    """The rate of the path a WAN link runs on: the slowest of the two gateways' NICs,
    their sites' uplinks and the WAN between them."""
    return topo.bottleneck_mbps(topo.gateway_hosts(site)[0], topo.gateway_hosts(peer)[0])


def lan_port_wire_bytes(topo: Topology, site: str, role: str = "gateway") -> float:
    """Wire bytes in flight that the switch port toward a site's host of `role`
    ("gateway" or "node") holds without loss: its drop-tail buffer plus the LAN's
    bandwidth-delay product at that host's NIC rate."""
    s = topo.site(site)
    return s.switch_buffer_bytes + s.host_nic_mbps(role) * 1e6 / 8 * LAN_RTT_S


def lan_port_payload_bytes(topo: Topology, site: str, role: str = "gateway") -> int:
    """`lan_port_wire_bytes` as payload (1448 of every 1514 wire bytes), less one
    frame of slack for the ACKs and probes that share the port."""
    return int(lan_port_wire_bytes(topo, site, role) * MSS / FULL_FRAME) - FULL_FRAME


def lan_window_budget(topo: Topology, site: str) -> int:
    """Payload bytes the switch port toward the gateway holds in flight without
    loss: its drop-tail buffer plus the LAN's bandwidth-delay product, counted in
    wire bytes (1448 of every 1514 are payload), less one frame for the ACKs
    and probes that share the port (66-byte frames; two full frames of slack
    had pushed 8 senders, at two segments each, just over the budget; on
    `paper` it holds 16 senders at one segment). 0 when LAN tuning is off."""
    if not topo.gateways.lan_tuning:
        return 0
    return max(lan_port_payload_bytes(topo, site), 4096)


def lan_pacing_rate_bps(topo: Topology, site: str) -> int:
    """gridsplitd's `[lan] rate_bps` for a site's gateways: what a gateway writes toward
    one LAN host is paced so that its sockets to that host together stay under the
    host's port rate (docs/design/lan-legs.md); 0 = off.

    `[gateways] lan_pacing` decides where: "on" at every site, "auto" only where the
    gateway's NIC is faster than the nodes' (else the gateway cannot overrun a node's
    switch port), "off" nowhere. The rate is the site's node NIC rate as the topology
    holds it (divided by the lab's scale, as every rate here) in IP bytes, which is
    what Linux paces, while the port (a NIC, or the lab's tbf) counts Ethernet frames:
    1514 bytes on the wire carry 1500."""
    s = topo.site(site)
    node, mode = s.host_nic_mbps("node"), topo.gateways.lan_pacing
    if mode == "off" or (mode == "auto" and s.host_nic_mbps("gateway") <= node):
        return 0
    return round(node * 1e6 * IP_MTU / FULL_FRAME)


def lan_pacing_burst_bytes(topo: Topology, site: str) -> int:
    """gridsplitd's `[lan] burst_bytes`: the payload bytes a node's switch port absorbs
    (its buffer plus the LAN's bandwidth-delay product, less one frame of slack, as
    `lan_window_budget` counts them). While a gateway's sockets toward one node hold no
    more than this queued in total, they are not divided (docs/design/lan-legs.md)."""
    return max(lan_port_payload_bytes(topo, site, "node"), 0)


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
            if s.gateway_capacity_mbps < need * 0.999:
                short[s.name] = (f"{s.name}'s gateway NICs ({s.gateway_capacity_mbps:g} Mb/s) are below the {need:g} Mb/s "
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
