"""Split or direct, per site pair and operation, from the topology the lab uses (docs/model.md §5).

Where the pLogP models (grid.py) take a network's measured gaps, this model takes
the grid's description (NIC and WAN rates, RTTs, switch buffers, random loss,
gateways) and the things splitting changes, each a term of its own:

* capacity (`Bps`, `_path`, the split stages of `one_to_many`): every byte crosses a sender's NIC, maybe a WAN link and a
  receiver's NIC; a relayed byte also crosses a gateway's NIC on each leg, once
  in each direction of the NIC it uses (twice per direction when the site both
  sends and receives across), and a site has one gateway;
* incast at a drop-tail port (`port_window`, `burst_rounds`): the flows that
  converge on one switch port hold at most buffer + rate x RTT in flight; what
  they send beyond is dropped and recovered one round trip later by the
  connection that lost it (WAN RTT direct, LAN RTT on a split LAN leg), or by a
  timeout (RTO_MIN) when its window is too small for three duplicate ACKs;
* slow start (`slow_start_s`, `restart_window`, `ramp_s`): a connection opens IW segments and doubles per
  RTT; a direct connection idle for longer than its RTO halves its window per RTO,
  the gateways' WAN links never do (tcp_slow_start_after_idle = 0);
* random WAN loss (`mathis_mbps`): one connection per rank pair direct, K
  striped connections per split link (gateway.wan_streams);
* a WAN flow beside LAN flows at one port (`lan_rival_s`, `fallen_window`: a halo's receiver,
  the root of a gather of every node, a relayed link at its far gateway's port): it loses every
  round trip while the LAN flows last, then crawls back from two segments at WAN round trips.

A cell's time is the operation's latency rounds (the same in both modes, plus
the relays' cost per crossing when split), plus the time its bytes take through
the slowest stage at the rate TCP holds there, plus the idle round trips of slow
start and the rounds lost to incast. Everything is per repetition of the
operation, as `gridsplit bench` times it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections import Counter
from functools import lru_cache

from ..errors import GridsplitError
from ..capacity import (LAN_RTT_S, gateway_path_mbps, lan_window_budget, wan_adaptive_pacing, wan_pacing_mbps,
                        wan_streams)
from ..topology import Site, Topology
from .splitterms import (BETA, DECIDE_BELOW, EXCHANGES, IMPLS, IW, MSS, OPS, RELAY_S,
                         Bps, Job, burst_rounds, lan_frame_efficiency, port_window, ramp_s, random_loss_rate,
                         recovery_s, restart_window, slow_start_s, lan_rival_s, fallen_window, steady_rate,
                         fed_port_excess, half_duplex, clamp_share, clamped_flow_rate, shared_port_rounds, alltoall_algorithm)

# -- the grid ----------------------------------------------------------------


def pair_sites(topo: Topology, a: str | None = None, b: str | None = None) -> tuple[Site, Site]:
    """(senders' site, root's site) for a pair: the one with more nodes sends, as in
    `gridsplit bench` (Alter and Glück §10.2's layout)."""
    if len(topo.sites) < 2:
        raise GridsplitError(f"topology {topo.name!r} has a single site: nothing crosses a WAN, so there is "
                             f"nothing to split; give a topology with two sites or more (`gridsplit netcheck` "
                             f"measures a real one)")
    if a is None:
        a, b = topo.sites[0].name, topo.sites[1].name
    sa, sb = topo.site(a), topo.site(b)
    return (sa, sb) if sa.nodes >= sb.nodes else (sb, sa)


def streams_for(topo: Topology, src: Site, dst: Site, job: Job) -> int:
    """K, the WAN connections of a split link: the job's, the topology's, or gateway.wan_streams."""
    if job.streams:
        return job.streams
    if topo.gateways.wan_streams:
        return topo.gateways.wan_streams
    w = topo.wan(src.name, dst.name)
    path = min(w.rate_mbps, src.gateway_nic_mbps, dst.gateway_nic_mbps)
    return wan_streams(path, w.rtt_ms, w.loss)[0]


def latency_rounds(job: Job, ranks: int, rtt: float) -> tuple[float, int]:
    """(seconds, WAN crossings) of an operation's protocol, the same direct and split: the
    barrier the bench times with it (Open MPI: the root's release reaches the senders in one
    crossing; MPICH's dissemination barrier: ceil(log2 P) crossings), the data's crossing,
    and a rendezvous round trip above the eager limit."""
    if job.op == "pingpong":
        return rtt / 2, 1
    barrier = max(1, math.ceil(math.log2(max(ranks, 2)))) if job.lib["poll"] else 1
    crossings = barrier + 1 + (2 if job.rendezvous else 0)
    return crossings * rtt / 2, crossings


def phases(job: Job) -> list[int]:
    """Bytes per sender that leave together: the whole message, or above the eager limit
    the eager part, then the rest once the rendezvous round trip has cleared it."""
    eager = job.lib["eager"]
    return [min(job.size, eager), job.size - eager] if job.rendezvous else [job.size]


def direct_flows(job: Job, n: int, gather: bool) -> list[float]:
    """Bytes each connection into (gather) or out of (broadcast) the root carries: one per
    remote rank, or a binomial tree's subtrees (MPICH's gather: ceil(log2(n+1)) children)."""
    if not (gather and job.lib["tree"]):
        return [1.0] * n
    sizes, left, k = [], n, 1
    while left > 0:
        take = min(k, left)
        sizes.append(float(take))
        left -= take
        k *= 2
    return sizes


def one_to_many(topo: Topology, job: Job, split: bool, gather: bool, sites: tuple[Site, Site] | None = None,
                ranks: int | None = None) -> dict:
    """A gather (n senders of the bigger site into a root of the other) or a flat broadcast
    (the root to n nodes), direct or split, per repetition. `sites`: (the n nodes' site, the
    root's) instead of the bigger and the other; `ranks`: the job's ranks (its barrier), if more."""
    src, dst = sites or pair_sites(topo)
    n = job.senders or src.nodes
    vol = n * job.size
    w = topo.wan(src.name, dst.name)
    rtt, loss = w.rtt_ms / 1e3, w.loss
    bursty = job.lib["poll"]
    lat, crossings = latency_rounds(job, max(n + 1, ranks or 0), rtt)
    many, one = src, dst   # `one` hosts the root, `many` the n nodes; a gather flows many -> one, a broadcast back
    nic_many, nic_one, wan = Bps(many.nic_mbps) * n, Bps(one.nic_mbps), Bps(w.rate_mbps)
    uplinks = min(Bps(src.uplink_mbps), Bps(dst.uplink_mbps))
    if not split:
        shares = direct_flows(job, n, gather)
        flows = len(shares)
        rate = min(nic_many, nic_one, wan, uplinks)
        # A gather's flows meet at the root's port, arriving at their NICs' sum; a broadcast's leave one NIC.
        arrival = min(Bps(many.nic_mbps) * flows, wan, uplinks) if gather else rate
        buf = one.switch_buffer_bytes
        limit = port_window(buf, rate, rtt, arrival, bursty)
        sustained = random_loss_rate(steady_rate(rate, rtt, limit, flows, bursty), vol, rtt, loss, flows)
        # What fits in the port's loss-free window goes at the path's rate; the rest at the sustained one.
        fits = min(vol, limit)
        transfer = fits / rate + (vol - fits) / sustained
        warm = max(IW, (limit if math.isfinite(limit) else rate * rtt) / flows)
        # Idle restart: a sender is idle while the others finish; past an RTO its window halves.
        idle = transfer * (1 - 1 / flows) + lat
        w0 = restart_window(warm, idle, rtt)
        cold = w0 < warm
        ss = slow_start_s(vol, flows, w0, rate, rtt)
        rounds, rec = 0, 0.0
        for i, part in enumerate(phases(job)):
            per = [part * s for s in shares]
            start = w0 if i == 0 else warm
            flight = sum(min(p, start) for p in per)
            r = burst_rounds(flight, buf, rate, arrival)
            rounds += r
            rec += r * recovery_s(min(max(per), start), rtt)
            if r:
                # The recovery cut the windows by BETA (once per episode, however many rounds) and
                # left ssthresh there: they regrow by one segment per connection per WAN round trip
                # to what the port sustains.
                rec += ramp_s(sum(per), flight * BETA, sustained, rtt, flows * MSS)
        parts = {"latency": lat, "transfer": transfer, "slow_start": ss, "incast": rec}
        return {"seconds": sum(parts.values()), "parts": parts, "rate_Bps": sustained, "flows": flows,
                "cold": cold, "loss_rounds": rounds}
    # Split: n LAN flows into (or out of) one gateway, one warm WAN link of K streams, the far LAN leg.
    k = streams_for(topo, src, dst, job)
    budget = lan_window_budget(topo, many.name)
    eff = lan_frame_efficiency(budget, n) if gather else 1.0
    # A site's gateways together (gateway_capacity_mbps: a NIC each) carry its n flows.
    stages = {"lan_many": min(nic_many, Bps(many.gateway_capacity_mbps)) * eff,
              "wan": min(wan, Bps(src.gateway_capacity_mbps), Bps(dst.gateway_capacity_mbps),
                         topo.gateways.per_flow_buffer / rtt),
              "lan_one": min(Bps(one.gateway_capacity_mbps), nic_one)}
    fed = 0.0
    if gather:
        # The far gateway feeds the root's port with the n relayed flows, each paced at the root's rate;
        # what goes beyond the port's buffer pays the loss episodes.
        fed = fed_port_excess(n, one.switch_buffer_bytes, nic_one, min(Bps(one.gateway_capacity_mbps), n * nic_one),
                              bursty)
        beyond = max(0.0, vol - one.switch_buffer_bytes)
        stages["lan_one"] = vol / (vol / stages["lan_one"] + beyond * fed / nic_one)
    if not budget and gather:
        # No LAN clamps: the senders' windows meet at the gateway's port, recovered at LAN RTT.
        lim = port_window(many.switch_buffer_bytes, Bps(many.gateway_nic_mbps), LAN_RTT_S, nic_many, bursty)
        stages["lan_many"] = steady_rate(stages["lan_many"], LAN_RTT_S, lim, n, bursty)
    cap = stages["wan"]
    stages["wan"] = random_loss_rate(cap, vol, rtt, loss, k)
    mathis_binds = stages["wan"] < cap * 0.999
    bottleneck = min(stages, key=stages.get)
    rate = stages[bottleneck]
    # The link delivers in order (striped lanes are reassembled by piece number): each random loss
    # holds what follows for the lane's fast retransmit, one WAN RTT, and the far LAN leg, the
    # bottleneck, idles meanwhile. (Where the WAN itself is the bottleneck, Mathis counts it.)
    stall = 0.0 if mathis_binds else vol / MSS * loss * rtt
    parts = {"latency": lat, "relay": RELAY_S * crossings, "transfer": vol / rate, "slow_start": 0.0,
             "incast": 0.0, "loss_stall": stall}
    return {"seconds": sum(parts.values()), "parts": parts, "rate_Bps": rate, "bottleneck": bottleneck, "streams": k,
            "fed_port": fed}


def all_to_one(topo: Topology, job: Job, split, gather: bool = True) -> dict:
    """A gather (or flat broadcast) of `gridsplit bench -n all`: the root on the second site's first
    node, every other node of the grid a sender, the site pairs in `split` relayed. Each remote
    site's senders are one_to_many's group (direct, or split when their pair with the root's site
    is relayed); the root's own site's send over the LAN. All of them share the root's port: the
    transfer is the slowest group's plus every other group's bytes at the root's NIC, and the
    other terms (protocol, slow start, incast, relays, loss stalls) are the slowest group's. A
    direct group of Open MPI's linear gather crawls back after the root's own site's senders
    (term (j))."""
    root = topo.sites[1]
    split = {frozenset(p) for p in split}
    total = sum(x.nodes for x in topo.sites)
    nic = Bps(root.nic_mbps)
    # Term (j)'s LAN rival: the seconds the root's own site's senders take at its NIC (Open MPI's
    # linear gather; MPICH's binomial tree sends the root a few subtrees' bytes at once instead).
    local = (root.nodes - 1) * job.size / nic if gather and not job.lib["tree"] else 0.0
    groups, vol = [], 0.0
    for x in topo.sites:
        c = x.nodes - (x.name == root.name)
        if c <= 0:
            continue
        vol += c * job.size
        if x.name == root.name:
            groups.append((c * job.size, {"latency": LAN_RTT_S * (1.5 if job.rendezvous else 0.5),
                                          "transfer": c * job.size / nic}))
            continue
        relayed = frozenset((x.name, root.name)) in split
        g = one_to_many(topo, replace(job, senders=c), relayed, gather, (x, root), total)
        parts = g["parts"]
        rtt = topo.wan(x.name, root.name).rtt_ms / 1e3
        if not relayed and local > rtt:
            # Term (j): the root's own site's senders reach its port at LAN round trips; while they
            # drain, this group's WAN flows lose what they send and fall by BETA per round trip,
            # then the group's bytes leave from there, a segment more per flow per round trip.
            rate, flows = g["rate_Bps"], g["flows"]
            crawl = ramp_s(c * job.size, fallen_window(rate * rtt, local, rtt, flows), rate, rtt, flows * MSS)
            if crawl > parts["slow_start"] + parts["incast"]:
                parts = {**parts, "slow_start": 0.0, "incast": crawl}
        groups.append((c * job.size, parts))
    transfer = max(p["transfer"] + (vol - v) / nic for v, p in groups)
    slowest = max((p for _, p in groups), key=lambda p: sum(v for k, v in p.items() if k != "transfer"))
    parts = {**slowest, "transfer": transfer}
    return {"seconds": sum(parts.values()), "parts": parts, "layout": "all"}


def crossed_pairs(topo: Topology, op: str) -> set[frozenset[str]]:
    """The site pairs an operation of `gridsplit bench -n all` sends bytes across: every pair of
    sites with nodes (alltoall), the ring's site boundaries (halo), or the pairs of the root's
    site (gather, bcast)."""
    if op == "halo":
        r = ranks_of(topo)
        return {frozenset((a.name, b.name)) for a, b in zip(r, r[1:] + r[:1]) if a.name != b.name}
    with_nodes = [x.name for x in topo.sites if x.nodes]
    if op == "alltoall":
        return {frozenset((a, b)) for a in with_nodes for b in with_nodes if a < b}
    root = topo.sites[1].name
    return {frozenset((x, root)) for x in with_nodes if x != root}


def ranks_of(topo: Topology) -> list[Site]:
    """The site of each rank of an all-node job as `gridsplit bench` places it: rank 0 on the
    second site's first node, then every other node in the topology's order."""
    order = [s for s in topo.sites for _ in range(s.nodes)]
    if len(topo.sites) > 1 and topo.sites[1].nodes:
        order.remove(topo.sites[1])
        order.insert(0, topo.sites[1])
    return order


def _path(topo: Topology, a: Site, b: Site, split: bool, hd: frozenset[str] = frozenset()) -> list[tuple[tuple, float]]:
    """The (resource, payload rate) a byte from a node of `a` to a node of `b` crosses; ("rank", site, ...)
    stands for the one rank's NIC at either end. A gateway of a site in `hd` carries its two
    directions one after the other (half_duplex): one resource for both."""
    res = [(("rank", a.name, "NIC out"), Bps(a.nic_mbps)), (("rank", b.name, "NIC in"), Bps(b.nic_mbps))]
    if a.name == b.name:
        return res
    res.append((("WAN", a.name, b.name), Bps(topo.wan(a.name, b.name).rate_mbps)))
    if split:
        # One NIC per gateway host: in from the nodes and out to the WAN at a, in from the WAN and out to the
        # nodes at b; a site's several gateways share its flows (gateway_capacity_mbps).
        res += [((x.name, "gateway NIC", "in+out" if x.name in hd else d), Bps(x.gateway_capacity_mbps))
                for x in (a, b) for d in ("in", "out")]
    return res


def _half_duplex_sites(topo: Topology, flows: Counter, split: frozenset[frozenset[str]]) -> frozenset[str]:
    """The sites whose gateway relays both directions at once with its LAN flows under a segment of
    clamp share each (half_duplex); `flows[s]`: the relayed LAN flows leaving s's nodes at once."""
    both = {x for p in split for x in p}
    return frozenset(s for s, f in flows.items() if s in both and half_duplex(lan_window_budget(topo, s), f))


def _far_ports(topo: Topology, job: Job, msgs: Counter, relay, rivals: bool = False) -> dict[tuple[str, str], tuple[float, ...]]:
    """For each relayed crossing (a, b) among `msgs` ((site, site) -> messages sent at once),
    what meets b's gateway port (term (h)), per gateway of b: the flight a's WAN link brings in,
    the rate of every relayed peer's link into it (each at its pacing rate: under adaptive pacing
    the far port less what b's nodes send back on that link), the rate of b's own relayed senders
    (their NICs), a's link's rate, and, with `rivals`, the seconds b's own relayed sends take
    through that port at the gateway NIC (term (j)'s LAN rival; 0 without). `relay(a, b)`: by
    site name."""
    out = {}
    for b in {y for (x, y) in msgs if relay(x, y)}:
        site = topo.site(b)
        g = max(1, len(site.gateway_addrs))
        senders = min(site.nodes, sum(n for (x, y), n in msgs.items() if x == b and relay(x, y)))
        pace = {x: Bps(wan_pacing_mbps(topo, x, b, gateway_path_mbps(topo, x, b)))
                for x in {x for (x, y) in msgs if y == b and relay(x, y)}}
        if adaptive := wan_adaptive_pacing(topo, b):
            # `wan_pacing = "adaptive"`: each link takes off the far port what b's nodes send back
            # on it (its own reverse direction: what they send to other sites is not seen), within
            # [b's node NIC, its cap] (gridsplitd link/pacer.rs, docs/model.md §5.1 (h)).
            port, floor = (Bps(v) for v in adaptive)
            pace = {x: min(r, max(floor, port - min(site.nodes, msgs[(b, x)] if relay(b, x) else 0)
                                  * Bps(site.nic_mbps) / g)) for x, r in pace.items()}
        # What b's own relayed senders put through that port: the link's LAN rival (term (j)).
        sent = sum(n for (x, y), n in msgs.items() if x == b and relay(x, y)) * job.size / g
        for x, link in pace.items():
            out[(x, b)] = (msgs[(x, b)] * job.size / g, sum(pace.values()), senders * Bps(site.nic_mbps) / g, link,
                           sent / Bps(site.host_nic_mbps("gateway")) if rivals else 0.0)
    return out


def _transfer(topo: Topology, job: Job, a: Site, b: Site, split: bool, share: float, volume: float,
              idle: float = 0.0, far: tuple[float, ...] | None = None, fan_in: int = 2,
              rival: float = 0.0) -> dict[str, float]:
    """The parts of one rank pair's message once its step starts: the protocol's crossings, the
    bytes at the pair's share of its path, the window a direct WAN connection resumes with
    after `idle` and its slow start, the loss rounds of its first flight and the regrowth
    after them, the relayed flow's window over the WAN RTT, random loss per connection or stream;
    relayed, the loss rounds of its WAN link's flight at the far gateway's port (`far`, from
    `_far_ports`) and the link's regrowth after them. `fan_in`: the flows whose first flights
    meet at the receiver's port at once. `rival`: seconds a LAN flow drains into the
    receiver's port beside a direct WAN connection (term (j), `lan_rival_s`)."""
    if a.name == b.name:
        return {"latency": LAN_RTT_S * (1.5 if job.rendezvous else 0.5), "transfer": volume / share}
    w = topo.wan(a.name, b.name)
    rtt = w.rtt_ms / 1e3
    lat = rtt * (1.5 if job.rendezvous else 0.5)
    if split:
        rate = min(share, topo.gateways.per_flow_buffer / rtt)
        rate = random_loss_rate(rate, volume, rtt, w.loss, streams_for(topo, a, b, job))
        out = {"latency": lat, "relay": RELAY_S * (3 if job.rendezvous else 1), "transfer": volume / rate}
        if far:
            # A paced link brings at most its rate times the RTT into the far port per round trip:
            # a larger message is several flights, which the window's regrowth (below) covers.
            carried, wan_in, lan_in, link, far_rival = far
            flight = min(carried, link * rtt)
            lost = shared_port_rounds(flight, b.switch_buffer_bytes, Bps(b.host_nic_mbps("gateway")), wan_in, lan_in)
            if lost and far_rival > rtt:
                # Term (j) on the link: its site's senders are the port's LAN rival while they last.
                k = streams_for(topo, a, b, job)
                out["incast"] = lan_rival_s(carried, flight, link, rtt, far_rival, k) - carried / link
            elif lost:
                # The link's one window lost at once: fast retransmit a WAN RTT later, then it
                # regrows from BETA of the flight (as a direct connection after incast, below).
                out["incast"] = lost * recovery_s(flight, rtt) + ramp_s(flight, BETA * flight, link, rtt, MSS)
        return out
    rate = random_loss_rate(share, volume, rtt, w.loss, 1)
    w0 = restart_window(rate * rtt, idle, rtt)
    if rival > rtt:
        # Kept at the floor while the LAN flow lasts, then regrowing from it: this replaces the
        # first flight's rounds below, which it includes (every round trip loses).
        return {"latency": lat, "transfer": volume / rate,
                "incast": lan_rival_s(volume, w0, rate, rtt, rival) - volume / rate}
    # Pairwise steps are not aligned: the first flight meets the previous step's flow still
    # draining into the receiver's port (two flows at its rate), so the port queues all of it.
    # All at once, the flights of every rank of the sender's site (one distance) meet there:
    # fan_in = n + 1 flows at their NICs' rate, counted as (n + 1)/2 flights (n = 1: the pairwise
    # case). Counting n flights scored the same (2026-11-27, docs/model.md §5.5) and was left out
    # so that the predictions registered for holdout4 stand.
    port = Bps(b.nic_mbps)
    lost = burst_rounds(fan_in / 2 * min(w0, volume), b.switch_buffer_bytes, port, fan_in * port)
    if not lost:
        return {"latency": lat, "transfer": volume / rate, "slow_start": slow_start_s(volume, 1, w0, rate, rtt)}
    # After the loss the window regrows from BETA of the flight by a segment per round trip (as a gather's).
    return {"latency": lat, "transfer": volume / rate,
            "incast": lost * recovery_s(w0, rtt) + ramp_s(volume, BETA * min(w0, volume), rate, rtt, MSS)}


def alltoall(topo: Topology, job: Job, split) -> dict:
    """`_alltoall` with the relayed site pairs given as any collection of pairs (cached: the
    direct exchange is the same for every site pair `advise` asks about)."""
    return _alltoall(topo, job, frozenset(frozenset(p) for p in split))


@lru_cache(maxsize=32)
def _alltoall(topo: Topology, job: Job, split: frozenset[frozenset[str]]) -> dict:
    """MPI_Alltoall of every node of the grid, `job.size` bytes per ordered rank pair, with the
    site pairs in `split` relayed. Above the eager limit both libraries run the pairwise
    exchange: P-1 steps, in step k rank i sends to i+k and receives from i-k, and a step ends
    with its slowest pair. A pair's share of a resource is its rate over the step's pairs
    that cross it, so a one-NIC gateway carries each relayed byte of a step twice per
    direction when its site both sends and receives across. Below the limit every message
    leaves at once: the busiest resource of the whole exchange, plus the farthest pair's
    crossing, plus the incast rounds at a node's port, where a remote site's senders each bring
    one of their P-1 messages at once (docs/model.md §5.2)."""
    names = [r.name for r in ranks_of(topo)]
    P = len(names)
    if P < 2:
        raise GridsplitError(f"topology {topo.name!r} has one node: an all-to-all needs two ranks or more")
    site = {x.name: x for x in topo.sites}
    relay = lambda a, b: a.name != b.name and frozenset((a.name, b.name)) in split
    rtt_max = max((w.rtt_ms / 1e3 for w in topo.wans if topo.site(w.a).nodes and topo.site(w.b).nodes), default=LAN_RTT_S)
    route = {(a, b): _path(topo, site[a], site[b], relay(site[a], site[b])) for a in site for b in site}
    hd: frozenset[str] = frozenset()
    linear = alltoall_algorithm(job.impl, P, job.size) == "linear"
    if not job.rendezvous:
        # Every message at once: a site's nodes open a relayed flow to every rank of each relayed peer.
        out = Counter({s.name: s.nodes * sum(o.nodes for o in topo.sites if relay(s, o)) for s in topo.sites})
        hd = _half_duplex_sites(topo, out, split)
        route = {(a, b): _path(topo, site[a], site[b], relay(site[a], site[b]), hd) for a in site for b in site}
    if job.rendezvous:
        # Per step, how many rank pairs go from each site to each: a rank's NIC carries one message
        # of a step, the WAN links and gateways are shared by the step's pairs that cross them.
        # Linear (Open MPI's choice for most sizes): one step of every pair, each rank's NIC
        # shared by its P-1 messages each way.
        steps = ([Counter((names[i], names[j]) for i in range(P) for j in range(P) if i != j)] if linear else
                 [Counter((names[i], names[(i + k) % P]) for i in range(P)) for k in range(1, P)])
        fan = P - 1 if linear else 1
        # What each step's relayed links bring into the far gateways' ports (term (h)).
        fars = [_far_ports(topo, job, step, lambda a, b: relay(site[a], site[b])) for step in steps]
        # The sending gateway's LAN clamp divides its port's budget among every open relayed socket
        # (a rank's connection to each relayed peer rank stays open), of which a step uses one per
        # node: that flow runs at its share's window per LAN turn (clamped_flow_rate, §5.1 (g)).
        clamp = {s.name: clamped_flow_rate(clamp_share(lan_window_budget(topo, s.name),
                                                       s.nodes * sum(o.nodes for o in topo.sites if relay(s, o))
                                                       // max(1, len(s.gateway_addrs))), Bps(s.nic_mbps))
                 for s in topo.sites}

        def exchange(idle: float) -> dict[str, float]:
            """The steps' parts, each step's from its slowest pair."""
            parts = {"latency": rtt_max / 2, "relay": 0.0, "transfer": 0.0, "slow_start": 0.0, "incast": 0.0}
            memo: dict[tuple, dict[str, float]] = {}
            for step, far in zip(steps, fars):
                users: Counter = Counter()
                for pair, n in step.items():
                    users.update({r: n for r, _ in route[pair] if r[0] != "rank"})
                times = []
                for a, b in step:
                    share = min(rate / (fan if r[0] == "rank" else users.get(r, 1)) for r, rate in route[(a, b)])
                    if relay(site[a], site[b]):
                        share = min(share, clamp[a])
                    fan_in = site[a].nodes + 1 if linear else 2
                    key = (a, b, share, far.get((a, b)), fan_in)
                    if key not in memo:
                        memo[key] = _transfer(topo, job, site[a], site[b], relay(site[a], site[b]), share, job.size,
                                              idle, far.get((a, b)), fan_in)
                    times.append(memo[key])
                for k, v in max(times, key=lambda t: sum(t.values())).items():
                    parts[k] += v
            return parts
        # Each pair's connection carries one message per repetition: idle for the rest of it
        # (the other steps, then the barrier), which a first estimate gives.
        first = sum(exchange((P - 2) * (job.size / min(Bps(x.nic_mbps) for x in topo.sites) + rtt_max)).values())
        parts = exchange(first * max(1, len(steps) - 1) / len(steps) + rtt_max)
        return {"seconds": sum(parts.values()), "parts": parts, "algorithm": "linear" if linear else "pairwise",
                "steps": len(steps)}
    load: Counter = Counter()
    rate: dict[tuple, float] = {}
    for (a, b), hops in route.items():
        pairs = site[a].nodes * (site[b].nodes - (a == b))
        if not pairs:
            continue  # a site of no nodes (its gateway alone) sends and receives nothing
        for r, bps in hops:
            # A rank's NIC carries its own share of the site's pairs.
            load[r] += job.size * pairs / (site[r[1]].nodes if r[0] == "rank" else 1)
            rate[r] = bps
    times = {r: load[r] / rate[r] for r in load if load[r]}
    bottleneck = max(times, key=times.get)
    rec = 0.0
    for s in topo.sites:
        for o in topo.sites:
            if o.name != s.name and s.nodes and o.nodes and not relay(s, o):
                # Each sender's NIC carries its P-1 messages at once (the libraries post them in
                # rotated order), so a remote site's first flights reach a port at o.nodes/(P-1)
                # of a NIC each: over it only from faster NICs.
                r = burst_rounds(o.nodes * min(job.size, IW), s.switch_buffer_bytes, Bps(s.nic_mbps),
                                 Bps(o.nic_mbps) * o.nodes / (P - 1))
                rec = max(rec, r * recovery_s(min(job.size, IW), topo.wan(s.name, o.name).rtt_ms / 1e3))
    parts = {"latency": rtt_max, "relay": RELAY_S * 2 if split else 0.0, "transfer": times[bottleneck],
             "slow_start": 0.0, "incast": rec}
    return {"seconds": sum(parts.values()), "parts": parts, "algorithm": "all at once",
            "bottleneck": " ".join(map(str, bottleneck)), "half_duplex": sorted(hd)}


def halo(topo: Topology, job: Job, split) -> dict:
    """`_halo` with the relayed site pairs given as any collection of pairs (cached)."""
    return _halo(topo, job, frozenset(frozenset(p) for p in split))


@lru_cache(maxsize=32)
def _halo(topo: Topology, job: Job, split: frozenset[frozenset[str]]) -> dict:
    """The neighbour exchange of `gridsplit bench halo` (mpi/coll.c): every node of the grid in
    the bench's rank order on a ring, each rank sending `job.size` bytes to both neighbours and
    receiving as much from them, all four transfers posted at once. The ring crosses a site
    boundary wherever consecutive ranks sit on different sites. Every message leaves at once:
    the busiest resource of the exchange, where a one-NIC gateway carries both directions of
    each relayed neighbour pair (in from its node and from the WAN, out to the WAN and to its
    node: twice what a boundary node's NIC carries), against the slowest crossing message on
    its own (its share of its path, slow start after the repetition's idle on a direct
    connection, two flows into the receiver's port). Above the eager limit a rendezvous
    round trip precedes the data."""
    ranks = ranks_of(topo)
    P = len(ranks)
    if P < 2:
        raise GridsplitError(f"topology {topo.name!r} has one node: a neighbour exchange needs two ranks or more")
    relay = lambda a, b: a.name != b.name and frozenset((a.name, b.name)) in split
    msgs = Counter()
    for i, x in enumerate(ranks):
        for j in ((i - 1) % P, (i + 1) % P):
            msgs[(x.name, ranks[j].name)] += 1
    out = Counter()
    for (a, b), n in msgs.items():
        if relay(topo.site(a), topo.site(b)):
            out[a] += n
    hd = _half_duplex_sites(topo, out, split)
    route = {(a, b): _path(topo, topo.site(a), topo.site(b), relay(topo.site(a), topo.site(b)), hd) for a, b in msgs}
    load: Counter = Counter()
    rate: dict[tuple, float] = {}
    users: Counter = Counter()
    for (a, b), n in msgs.items():
        for r, bps in route[(a, b)]:
            if r[0] == "rank":
                # A rank's NIC sends its two messages (and receives two); per rank of its site.
                load[r] = max(load[r], 2 * job.size)
                users[r] = 2
            else:
                load[r] += n * job.size
                users[r] += n
            rate[r] = bps
    times = {r: load[r] / rate[r] for r in load}
    bottleneck = max(times, key=times.get)
    crossing = [(a, b) for a, b in msgs if a != b]
    rtt_max = max((topo.wan(a, b).rtt_ms / 1e3 for a, b in crossing), default=LAN_RTT_S)
    lat = rtt_max * (1.5 if job.rendezvous else 0.5)
    parts = {"latency": lat, "relay": 0.0, "transfer": times[bottleneck], "slow_start": 0.0, "incast": 0.0}
    # Each connection carries one message per repetition, idle for the rest of it.
    idle = lat + times[bottleneck]
    worst = None
    far = _far_ports(topo, job, msgs, lambda a, b: relay(topo.site(a), topo.site(b)), rivals=True)
    # Term (j): a direct crossing into a rank whose other neighbour's message reaches it at LAN
    # round trips (a neighbour of its own site, or a relayed one from its gateway) shares that
    # rank's port with it for as long as that message drains, at half a NIC (its sender sends
    # both of its messages at once; a relayed one comes at its gateway's pace, taken the same).
    rivals = set()
    for i, x in enumerate(ranks):
        for j, k in (((i - 1) % P, (i + 1) % P), ((i + 1) % P, (i - 1) % P)):
            y, z = ranks[j], ranks[k]
            if y.name != x.name and not relay(y, x) and (z.name == x.name or relay(z, x)) and j != k:
                rivals.add((y.name, x.name))
    for a, b in crossing:
        share = min(bps / users[r] for r, bps in route[(a, b)])
        rival = 2 * job.size / Bps(topo.site(b).nic_mbps) if (a, b) in rivals else 0.0
        t = _transfer(topo, job, topo.site(a), topo.site(b), relay(topo.site(a), topo.site(b)), share, job.size, idle,
                      far.get((a, b)), rival=rival)
        if worst is None or sum(t.values()) > sum(worst.values()):
            worst = t
    if worst and sum(worst.values()) > sum(parts.values()):
        parts = {**parts, **worst, "transfer": max(worst["transfer"], times[bottleneck])}
    return {"seconds": sum(parts.values()), "parts": parts, "algorithm": "ring, all at once",
            "bottleneck": " ".join(map(str, bottleneck)), "half_duplex": sorted(hd), "crossings": len(crossing)}


def pingpong(topo: Topology, job: Job, split: bool) -> dict:
    """Half a round trip of one message between the two sites of the pair, in a loop of them
    (as `gridsplit bench pingpong` runs it): the one-way delay and the bytes at the path's
    rate, under random loss per connection (direct) or per stream (split). The connection is
    idle only while the reply travels, under an RTO, so it stays warm in both modes."""
    src, dst = pair_sites(topo)
    w = topo.wan(src.name, dst.name)
    rtt = w.rtt_ms / 1e3
    rate = min(Bps(src.nic_mbps), Bps(dst.nic_mbps), Bps(w.rate_mbps))
    if split:
        rate = min(rate, Bps(src.gateway_nic_mbps), Bps(dst.gateway_nic_mbps))
    rate = random_loss_rate(rate, job.size, rtt, w.loss, streams_for(topo, src, dst, job) if split else 1)
    ss = slow_start_s(job.size, 1, restart_window(rate * rtt, rtt, rtt), rate, rtt)
    parts = {"latency": rtt / 2, "relay": RELAY_S if split else 0.0, "transfer": job.size / rate,
             "slow_start": ss, "incast": 0.0}
    return {"seconds": sum(parts.values()), "parts": parts}


def predict(topo: Topology, job: Job, split: bool, pair: tuple[str, str] | None = None) -> dict:
    """One mode's time per repetition. `pair` picks the site pair of a two-site operation
    (gather, bcast, pingpong) on a bigger grid; alltoall always spans every site and, split,
    relays the pair given (or every pair)."""
    if job.op not in OPS:
        raise GridsplitError(f"op {job.op!r} is not modelled (it covers {', '.join(OPS)}); measure it with "
                             f"`gridsplit bench {job.op} --modes direct,split` if the bench has it")
    if job.impl not in IMPLS:
        raise GridsplitError(f"MPI library {job.impl!r} is unknown to the model (it knows {', '.join(IMPLS)}); "
                             f"its eager limit and polling are what it needs: `gridsplit model measure --impl` measures them")
    if job.op in EXCHANGES:
        pairs = frozenset(frozenset((w.a, w.b)) for w in topo.wans)
        chosen = pairs if pair is None else frozenset({frozenset(pair)})
        run = alltoall if job.op == "alltoall" else halo
        return run(topo, job, chosen if split else frozenset())
    sub = restrict(topo, pair) if pair else topo
    if job.op == "pingpong":
        return pingpong(sub, job, split)
    return one_to_many(sub, job, split, gather=job.op == "gather")


def restrict(topo: Topology, pair: tuple[str, str]) -> Topology:
    """The topology of one site pair: its two sites (the bigger first) and their WAN link."""
    a, b = pair_sites(topo, *pair)
    return replace(topo, sites=(a, b), wans=(topo.wan(a.name, b.name),))


def cell(topo: Topology, job: Job, pair: tuple[str, str] | None = None) -> dict:
    """Direct and split times, split/direct, the decision and K for one (pair, op, size)."""
    d, s = predict(topo, job, False, pair), predict(topo, job, True, pair)
    ratio = s["seconds"] / d["seconds"]
    out = {"op": job.op, "size": job.size, "impl": job.impl, "direct_s": d["seconds"], "split_s": s["seconds"],
           "ratio": ratio, "split": ratio < DECIDE_BELOW, "direct_parts": d["parts"], "split_parts": s["parts"]}
    if job.op not in EXCHANGES:
        a, b = pair_sites(topo, *pair) if pair else pair_sites(topo)
        out["streams"] = streams_for(topo, a, b, job)
    return out


def grid_facts(topo: Topology) -> dict[str, list[float]]:
    """The grid parameters the model's terms read, as [min, max] over the topology: what a
    validation covered, and what `model advise` checks a grid against."""
    pairs = [(topo.site(w.a), topo.site(w.b), w) for w in topo.wans]
    span = lambda xs: [min(xs), max(xs)]
    return {"rtt_ms": span([w.rtt_ms for *_, w in pairs]), "loss": span([w.loss for *_, w in pairs]),
            "nic_mbps": span([s.nic_mbps for s in topo.sites]),
            "gateway_nic_mbps": span([s.gateway_nic_mbps for s in topo.sites]),
            "switch_buffer_bytes": span([s.switch_buffer_bytes for s in topo.sites]),
            "wan_over_nic": span([w.rate_mbps / min(a.nic_mbps, b.nic_mbps) for a, b, w in pairs]),
            "nodes": span([s.nodes for s in topo.sites if s.nodes] or [0]), "sites": [len(topo.sites)] * 2}
