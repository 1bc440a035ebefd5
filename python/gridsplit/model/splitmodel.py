"""Split or direct, per site pair and operation, from the topology the lab uses (docs/model.md §5).

Where the pLogP models (grid.py) take a network's measured gaps, this model takes
the grid's description (NIC and WAN rates, RTTs, switch buffers, random loss,
gateways) and the four things splitting changes, each a term of its own:

* capacity (`rates`): every byte crosses a sender's NIC, maybe a WAN link and a
  receiver's NIC; a relayed byte also crosses a gateway's NIC on each leg, once
  in each direction of the NIC it uses (twice per direction when the site both
  sends and receives across), and a site has one gateway;
* incast at a drop-tail port (`port_window`, `burst_rounds`): the flows that
  converge on one switch port hold at most buffer + rate x RTT in flight; what
  they send beyond is dropped and recovered one round trip later by the
  connection that lost it (WAN RTT direct, LAN RTT on a split LAN leg), or by a
  timeout (RTO_MIN) when its window is too small for three duplicate ACKs;
* slow start (`slow_start_s`): a connection opens IW segments and doubles per
  RTT; direct connections restart cold after an idle longer than their RTO,
  the gateways' WAN links never do (tcp_slow_start_after_idle = 0);
* random WAN loss (`mathis_mbps`): one connection per rank pair direct, K
  striped connections per split link (gateway.wan_streams).

A cell's time is the operation's latency rounds (the same in both modes, plus
the relays' cost per crossing when split), plus the time its bytes take through
the slowest stage at the rate TCP holds there, plus the idle round trips of slow
start and the rounds lost to incast. Everything is per repetition of the
operation, as `gridsplit bench` times it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..bench.results import GOODPUT, HEADERS
from ..errors import GridsplitError
from ..gateway import LAN_RTT_S, lan_window_budget, wan_streams
from ..tcpbound import mathis_mbps
from ..topology import Site, Topology

MSS = 1448
IW = 10 * MSS                    # Linux's initial window, RFC 6928
BETA = 0.7                       # CUBIC's multiplicative decrease
DUPACK_WINDOW = 4 * MSS          # a lost segment needs three behind it for fast retransmit
RTO_MIN = 0.2                    # Linux's minimum retransmission timeout, s
RELAY_S = 110e-6                 # one crossing through the two gateways (relay-latency.md: 0.10-0.12 ms)
OPS = ("gather", "bcast", "alltoall", "pingpong")
# MPI library facts the model needs (docs/model.md §5.2): the largest message sent eagerly,
# whether ranks busy-poll (MPICH's UCX has no yield setting; the lab's Open MPI yields),
# and whether the library's gather is a binomial tree (MPICH) or linear (Open MPI).
IMPLS = {"openmpi": {"eager": 65536, "poll": False, "tree": False},
         "mpich": {"eager": 65536, "poll": True, "tree": True}}
# MPICH's (UCX's) rendezvous threshold is not recorded; v8 shows none at 10 KB and one at 100 KB.


def Bps(mbps: float) -> float:
    """Payload bytes per second of a link of `mbps` carrying full-size frames."""
    return mbps * 1e6 / 8 * GOODPUT


@dataclass(frozen=True)
class Job:
    """What the model needs to know about the MPI job besides the grid."""
    op: str
    size: int                    # bytes per rank (per pair for alltoall)
    impl: str = "openmpi"
    streams: int | None = None   # WAN connections per split link; None: the topology's or gateway.wan_streams
    senders: int | None = None   # gather/bcast: nodes of the bigger site taking part (None: all)

    @property
    def lib(self) -> dict:
        return IMPLS[self.impl]

    @property
    def rendezvous(self) -> bool:
        return self.size > self.lib["eager"]


# -- the terms ---------------------------------------------------------------


def port_window(buffer: int, rate: float, rtt: float, arrival: float, bursty: bool) -> float:
    """Bytes the flows converging on one drop-tail port hold in flight without loss.

    ACK-clocked senders arrive at the port's own rate once the pipe is full: the
    port holds its buffer plus what is on the way (rate x RTT). Senders whose ACKs
    come in batches (busy-polling ranks sharing cores with the kernel) send whole
    windows at their aggregate rate `arrival`; the port drains `rate` of it while
    the burst lasts, so a burst of B overflows once B (1 - rate/arrival) > buffer.
    Infinite when the arrival rate cannot exceed the port's."""
    if arrival <= rate * 1.0001:
        return math.inf
    if not bursty:
        return buffer + rate * rtt
    return buffer / (1 - rate / arrival)


def burst_rounds(flight: float, buffer: int, rate: float, arrival: float) -> int:
    """Extra round trips lost to a first flight of `flight` bytes arriving at `arrival` into a
    port of `rate` and `buffer`: each round drops what the buffer cannot hold, and the
    retransmissions arrive again as a burst, until they fit."""
    rounds, lost = 0, flight
    while rounds < 20 and arrival > rate and lost * (1 - rate / arrival) > buffer:
        lost = lost * (1 - rate / arrival) - buffer
        rounds += 1
    return rounds


def recovery_s(window: float, rtt: float) -> float:
    """What one round of losses costs the connection that lost: fast retransmit one RTT later
    when at least three segments follow the loss, otherwise a retransmission timeout."""
    return rtt if window >= DUPACK_WINDOW else max(RTO_MIN, rtt)


def slow_start_s(volume: float, flows: int, w0: float, rate: float, rtt: float) -> float:
    """Idle time slow start adds to sending `volume` over `flows` connections that open with
    `w0` bytes each and double per RTT, on a path of `rate` and `rtt`: in each round before
    the pipe (rate x rtt) is full, the part of the round trip the window does not fill."""
    pipe, w, sent, idle = rate * rtt, flows * w0, 0.0, 0.0
    while w < pipe and sent + w < volume:   # a round that sends the rest ends the transfer
        idle += rtt - w / rate
        sent += w
        w *= 2
    return idle


def steady_rate(rate: float, rtt: float, limit: float, flows: int, bursty: bool = False) -> float:
    """Bytes/s the flows sustain on a path of `rate` when a port holds `limit` bytes of them
    in flight without loss. ACK-clocked flows fill the queue together and lose together,
    so CUBIC's sawtooth averages (1 + BETA)/2 of the limit; a burst's overflow hits one
    flow's tail, so the aggregate loses only that flow's share, 1 - (1 - BETA)/(2 flows)."""
    if not math.isfinite(limit):
        return rate
    avg = (1 - (1 - BETA) / (2 * flows)) if bursty else (1 + BETA) / 2
    return min(rate, avg * limit / rtt)


def random_loss_rate(rate: float, volume: float, rtt: float, loss: float, conns: int) -> float:
    """The rate `conns` connections keep at random loss p (Mathis et al.'s bound, one per
    connection), for a transfer of `volume` bytes. The bound is a long-run average over loss
    events; a connection that meets fewer than one loss in the transfer keeps its window
    (warm links, between repetitions, regrow), so the bound weighs in by the share f of a
    loss event each connection meets: 1/rate' = (1 - f)/rate + f/(conns x Mathis)."""
    if loss <= 0:
        return rate
    f = min(1.0, volume / MSS * loss / conns)
    bound = conns * mathis_mbps(MSS, rtt * 1e3, loss) * 1e6 / 8
    return 1 / ((1 - f) / rate + f / min(rate, bound))


def lan_frame_efficiency(budget: int, flows: int) -> float:
    """Payload share a clamped LAN leg keeps (incast-windows.md, "Frames"): a share of two
    segments or more is filled with full frames; a smaller one is sent as two frames per
    window (a 1448- and an 88-byte segment, or 768 and 384 under one segment)."""
    if not budget or flows <= 0:
        return 1.0
    share = budget / flows
    if share >= 2 * MSS:
        return 1.0
    payload = min(share, 1536)
    return min(1.0, payload / (payload + 2 * HEADERS) / GOODPUT)


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


def one_to_many(topo: Topology, job: Job, split: bool, gather: bool) -> dict:
    """A gather (n senders of the bigger site into a root of the other) or a flat broadcast
    (the root to n nodes), direct or split, per repetition."""
    src, dst = pair_sites(topo)
    n = job.senders or src.nodes
    vol = n * job.size
    w = topo.wan(src.name, dst.name)
    rtt, loss = w.rtt_ms / 1e3, w.loss
    bursty = job.lib["poll"]
    lat, crossings = latency_rounds(job, n + 1, rtt)
    many, one = (src, dst) if gather else (dst, src)   # `one` hosts the root, `many` the n nodes
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
        warm = max(IW, (limit if math.isfinite(limit) else rate * rtt) / flows)
        # Idle restart: a repetition longer than the RTO leaves every connection cold.
        cold = lat + vol / sustained > RTO_MIN + rtt
        ss = slow_start_s(vol, flows, IW if cold else warm, rate, rtt)
        rounds, rec = 0, 0.0
        for i, part in enumerate(phases(job)):
            per = [part * s for s in shares]
            start = IW if (cold and i == 0) else warm
            flight = sum(min(p, start) for p in per)
            r = burst_rounds(flight, buf, rate, arrival)
            rounds += r
            rec += r * recovery_s(min(max(per), start), rtt)
        parts = {"latency": lat, "transfer": vol / sustained, "slow_start": ss, "incast": rec}
        return {"seconds": sum(parts.values()), "parts": parts, "rate_Bps": sustained, "flows": flows,
                "cold": cold, "loss_rounds": rounds}
    # Split: n LAN flows into (or out of) one gateway, one warm WAN link of K streams, the far LAN leg.
    k = streams_for(topo, src, dst, job)
    budget = lan_window_budget(topo, many.name)
    eff = lan_frame_efficiency(budget, n) if gather else 1.0
    stages = {"lan_many": min(nic_many, Bps(many.gateway_nic_mbps)) * eff,
              "wan": min(wan, Bps(src.gateway_nic_mbps), Bps(dst.gateway_nic_mbps),
                         topo.gateways.per_flow_buffer / rtt),
              "lan_one": min(Bps(one.gateway_nic_mbps), nic_one)}
    if not budget and gather:
        # No LAN clamps: the senders' windows meet at the gateway's port, recovered at LAN RTT.
        lim = port_window(many.switch_buffer_bytes, Bps(many.gateway_nic_mbps), LAN_RTT_S, nic_many, bursty)
        stages["lan_many"] = steady_rate(stages["lan_many"], LAN_RTT_S, lim, n, bursty)
    stages["wan"] = random_loss_rate(stages["wan"], vol, rtt, loss, k)
    bottleneck = min(stages, key=stages.get)
    rate = stages[bottleneck]
    parts = {"latency": lat, "relay": RELAY_S * crossings, "transfer": vol / rate, "slow_start": 0.0, "incast": 0.0}
    return {"seconds": sum(parts.values()), "parts": parts, "rate_Bps": rate, "bottleneck": bottleneck, "streams": k}


def alltoall(topo: Topology, job: Job, split: set[frozenset[str]]) -> dict:
    """An all-to-all of every node of the grid, `job.size` bytes per ordered rank pair, with
    the site pairs in `split` relayed: the busiest NIC direction or WAN link sets the time
    (`rates` counts each relayed byte on both legs of a one-NIC gateway), plus the latency
    rounds of the farthest pair and, for the direct flows, the incast rounds at a node's port."""
    m = job.size
    load: dict[str, float] = {}
    rate: dict[str, float] = {}

    def add(res: str, bps: float, nbytes: float) -> None:
        load[res] = load.get(res, 0.0) + nbytes
        rate[res] = bps

    for a in topo.sites:
        for b in topo.sites:
            pairs = a.nodes * (b.nodes - (1 if a.name == b.name else 0))
            if pairs <= 0:
                continue
            per_node_tx, per_node_rx = m * pairs / a.nodes, m * pairs / b.nodes
            add(f"{a.name} node NIC out", Bps(a.nic_mbps), per_node_tx)
            add(f"{b.name} node NIC in", Bps(b.nic_mbps), per_node_rx)
            if a.name == b.name:
                continue
            w = topo.wan(a.name, b.name)
            add(f"WAN {a.name}->{b.name}", Bps(w.rate_mbps), m * pairs)
            if frozenset((a.name, b.name)) in split:
                # One NIC per gateway: in from the nodes and out to the WAN at a, in from the WAN and out to the nodes at b.
                for site in (a, b):
                    add(f"{site.name} gateway NIC in", Bps(site.gateway_nic_mbps), m * pairs)
                    add(f"{site.name} gateway NIC out", Bps(site.gateway_nic_mbps), m * pairs)
    times = {r: load[r] / rate[r] for r in load}
    bottleneck = max(times, key=times.get)
    ranks = sum(s.nodes for s in topo.sites)
    rtts = [w.rtt_ms / 1e3 for w in topo.wans if topo.site(w.a).nodes and topo.site(w.b).nodes]
    rtt = max(rtts, default=LAN_RTT_S)
    lat, crossings = latency_rounds(job, ranks, rtt)
    # Direct flows into one node's port: the senders of one remote site leave together and arrive
    # together (those of other sites arrive a different one-way delay later), so each site's
    # first flights meet as one burst; overflow costs that site's WAN round trips.
    rec = 0.0
    for s in topo.sites:
        for o in topo.sites:
            if o.name == s.name or not s.nodes or not o.nodes or frozenset((s.name, o.name)) in split:
                continue
            far = topo.wan(s.name, o.name).rtt_ms / 1e3
            for part in phases(job):
                r = burst_rounds(o.nodes * min(part, IW), s.switch_buffer_bytes, Bps(s.nic_mbps), Bps(o.nic_mbps) * o.nodes)
                rec = max(rec, r * recovery_s(min(part, IW), far))
    relay = RELAY_S * crossings if split else 0.0
    parts = {"latency": lat, "relay": relay, "transfer": times[bottleneck], "slow_start": 0.0, "incast": rec}
    return {"seconds": sum(parts.values()), "parts": parts, "bottleneck": bottleneck,
            "loads": {r: {"bytes": load[r], "seconds": times[r]} for r in sorted(load)}}


def pingpong(topo: Topology, job: Job, split: bool) -> dict:
    """Half a round trip of one message between the two sites of the pair: the one-way delay
    and the bytes at the path's rate; a direct connection idle longer than its RTO starts
    cold (slow start over the WAN RTT), a split one finds its WAN link warm."""
    src, dst = pair_sites(topo)
    w = topo.wan(src.name, dst.name)
    rtt = w.rtt_ms / 1e3
    rate = min(Bps(src.nic_mbps), Bps(dst.nic_mbps), Bps(w.rate_mbps))
    if split:
        rate = min(rate, Bps(src.gateway_nic_mbps), Bps(dst.gateway_nic_mbps))
    ss = 0.0 if split else slow_start_s(job.size, 1, IW, rate, rtt)
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
    if job.op == "alltoall":
        pairs = {frozenset((w.a, w.b)) for w in topo.wans}
        chosen = pairs if pair is None else {frozenset(pair)}
        return alltoall(topo, job, chosen if split else set())
    sub = restrict(topo, pair) if pair else topo
    if job.op == "pingpong":
        return pingpong(sub, job, split)
    return one_to_many(sub, job, split, gather=job.op == "gather")


def restrict(topo: Topology, pair: tuple[str, str]) -> Topology:
    """The topology of one site pair: its two sites (the bigger first) and their WAN link."""
    from dataclasses import replace
    a, b = pair_sites(topo, *pair)
    return replace(topo, sites=(a, b), wans=(topo.wan(a.name, b.name),))


def cell(topo: Topology, job: Job, pair: tuple[str, str] | None = None) -> dict:
    """Direct and split times, split/direct, the decision and K for one (pair, op, size)."""
    d, s = predict(topo, job, False, pair), predict(topo, job, True, pair)
    ratio = s["seconds"] / d["seconds"]
    out = {"op": job.op, "size": job.size, "impl": job.impl, "direct_s": d["seconds"], "split_s": s["seconds"],
           "ratio": ratio, "split": ratio < 1.0, "direct_parts": d["parts"], "split_parts": s["parts"]}
    if job.op != "alltoall":
        a, b = pair_sites(topo, *pair) if pair else pair_sites(topo)
        out["streams"] = streams_for(topo, a, b, job)
    return out
