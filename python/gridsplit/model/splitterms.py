"""The terms of the split model (docs/model.md §5.1): what TCP does at a port, a WAN path and a
gateway, each a function of the grid's figures, Linux's and the MPI library's. splitmodel.py
puts them together per operation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..tcpbound import FRAME_OVERHEAD as HEADERS, GOODPUT
from ..tcpbound import MSS, mathis_mbps

IW = 10 * MSS                    # Linux's initial window, RFC 6928
BETA = 0.7                       # CUBIC's multiplicative decrease
DUPACK_WINDOW = 4 * MSS          # a lost segment needs three behind it for fast retransmit
RTO_MIN = 0.2                    # Linux's minimum retransmission timeout, s
FLOOR_WINDOW = 2 * MSS           # the smallest window Linux's loss response leaves (its ssthresh floor)
RELAY_S = 110e-6                 # one crossing through the two gateways (relay-latency.md: 0.10-0.12 ms)
OPS = ("gather", "bcast", "alltoall", "halo", "pingpong")
EXCHANGES = ("alltoall", "halo")   # ops that span every site of the grid
# Split is advised below this predicted split/direct: a gain smaller than the model's median
# error in its validation (results/model/2026-11-26-split-fanin) is not one to deploy gateways for.
DECIDE_BELOW = 0.95
# Measured split/direct within 5 % of 1: either mode is as good (issue 22's scoring, and
# the policy's "never slower beyond noise").
TOLERANCE = 0.05
# MPI library facts the model needs (docs/model.md §5.1, "Protocol"): the largest message sent
# eagerly (MPICH's is UCX's over TCP: in the lab's pingpong 18 KB arrives in half a round trip,
# 20 KB in two and a half; results/matrix/2026-11-28-mpich-rendezvous),
# whether ranks busy-poll (MPICH's UCX has no yield setting; the lab's Open MPI yields), and
# whether the library's gather is a binomial tree (MPICH) or linear (Open MPI).
IMPLS = {"openmpi": {"eager": 65536, "poll": False, "tree": False},
         "mpich": {"eager": 19000, "poll": True, "tree": True}}


# Which MPI_Alltoall algorithm a library runs, by communicator size and bytes per rank pair:
# "linear" posts every send and receive at once, "pairwise" runs P-1 steps of one send and one
# receive each (docs/model.md §5.2). MPICH (MPIR_Alltoall_intra_auto with its CVAR defaults):
# pairwise above 32768 bytes (MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE); below, batches of 32 at once
# (as many as the lab's jobs have peers), and Bruck's under 256 bytes from 8 ranks (at once here).
# Open MPI 4.1 (coll/tuned's fixed decision, ompi_coll_tuned_alltoall_intra_dec_fixed): rows of
# (communicator size below, ((bytes below, algorithm), ...), algorithm beyond); its linear_sync
# with the default max_requests (0) and its Bruck are "linear" here, two_procs "pairwise".
_L, _P = "linear", "pairwise"
OMPI_ALLTOALL = (
    (3, ((32768, _P), (262144, _L)), _P),
    (8, ((524288, _L), (1048576, _P)), _L),
    (64, (), _L),
    (128, ((262144, _L),), _P),
    (256, ((262144, _L),), _P),
    (512, ((32768, _L),), _P),
    (1024, ((262144, _L),), _P),
)


def alltoall_algorithm(impl: str, ranks: int, size: int) -> str:
    """"linear" or "pairwise": what `impl`'s MPI_Alltoall runs for `ranks` ranks and `size` bytes
    per pair (OMPI_ALLTOALL; MPICH by its medium-message size)."""
    if impl != "openmpi":
        return _P if size > 32768 else _L
    for below, rows, beyond in OMPI_ALLTOALL:
        if ranks < below:
            return next((alg for lt, alg in rows if size < lt), beyond)
    return _L


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
    poll: bool | None = None     # ranks busy-poll; None: the library's habit (IMPLS)

    @property
    def lib(self) -> dict:
        lib = IMPLS[self.impl]
        return lib if self.poll is None else {**lib, "poll": self.poll}

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


def restart_window(window: float, idle: float, rtt: float) -> float:
    """The window a connection resumes with after `idle` seconds (Linux, slow start after
    idle): halved once per RTO elapsed (the RTO being about the RTT plus RTO_MIN), never
    below the initial window; untouched after an idle shorter than one RTO."""
    halvings = int(idle // (RTO_MIN + rtt))
    return max(float(IW), window / 2 ** min(halvings, 30)) if halvings else window


def ramp_s(volume: float, w0: float, rate: float, rtt: float, add: float = 0.0) -> float:
    """Idle time a window below the pipe (rate x rtt) adds to sending `volume`: in each round
    trip before the window fills the pipe, the part of the round trip it leaves empty. The
    window doubles per round trip (slow start), or grows by `add` bytes (congestion avoidance
    after a loss: one segment per connection per round trip)."""
    pipe, w, sent, idle = rate * rtt, w0, 0.0, 0.0
    while w < pipe and sent + w < volume:   # a round that sends the rest ends the transfer
        idle += rtt - w / rate
        sent += w
        w = w + add if add else 2 * w
    return idle


def fallen_window(w0: float, rival: float, rtt: float, conns: int = 1) -> float:
    """Term (j): the window of `conns` WAN connections that lost in every round trip of `rival`
    seconds, starting from `w0`: BETA per round trip, never below Linux's floor of two segments
    per connection."""
    return max(conns * FLOOR_WINDOW, w0 * BETA ** min(int(rival // rtt), 60))


def lan_rival_s(volume: float, w0: float, rate: float, rtt: float, rival: float, conns: int = 1) -> float:
    """Term (j), docs/model.md §5.1: the time WAN connections (a direct one, or a relayed link's
    `conns` striped ones) take to deliver `volume` when LAN flows drain into the same drop-tail
    port (the receiver's, or the far gateway's) beside them for `rival` seconds. The LAN flows
    refill the port's buffer within their sub-millisecond round trips, so what the WAN
    connections send meanwhile is lost and their window falls (`fallen_window`): they deliver
    next to nothing. Once the LAN flows have drained, the whole volume leaves from the fallen
    window, one segment more per connection per round trip (ramp_s; CUBIC's plateau is that
    window, so it grows as Reno does)."""
    w = fallen_window(w0, rival, rtt, conns)
    return rival + volume / rate + ramp_s(volume, w, rate, rtt, conns * MSS)


def slow_start_s(volume: float, flows: int, w0: float, rate: float, rtt: float) -> float:
    """Idle time slow start adds to `flows` connections opening with `w0` bytes each (ramp_s)."""
    return ramp_s(volume, flows * w0, rate, rtt)


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


# -- issue 22's terms: many flows on one gateway port, and both directions through one NIC --------

# Loss episodes at a node's port fed by a faster gateway: Reno's sawtooth predicts one per
# (1 - BETA) buffer^2 / (flows x MSS) bytes; KAPPA scales it to the fast recoveries per MB the
# held-out grid's split gathers showed at the root's port (results/matrix/2026-11-26-holdout;
# fitted on its 100 KB and 1 MB gathers, docs/model.md §5.1 (e)) with Open MPI's yielding root;
# MPICH's busy-polling root, whose ACKs leave in batches (the `bursty` of port_window), fitted
# about twice as high, so twice for it.
FED_PORT_KAPPA = 0.45


def fed_port_excess(flows: int, buffer: int, rate: float, arrival: float, bursty: bool = False) -> float:
    """Extra time, as a fraction of the bytes' time at the port's rate, that a node's switch port
    costs when a gateway faster than the node feeds it `flows` relayed flows at once (a split
    gather's far leg). Each of the gateway's LAN sockets is paced at the node's rate, so the port
    overflows only when several flows arrive together faster than it drains (`arrival` > `rate`).
    The flows then share buffer + a LAN BDP of next to nothing: every time their windows regrow to
    it, they lose at once; Reno's sawtooth regrows (1 - BETA) of the buffer by `flows` segments
    per round trip, and a round trip there is the full queue's drain (buffer / rate), which
    is also what an episode costs (the retransmission waits behind that queue while the
    in-order receiver holds the flow's later bytes). The cost per byte is then
    flows x MSS / ((1 - BETA) buffer) of the port's time, scaled by FED_PORT_KAPPA (twice that
    for a busy-polling receiver) and capped at 1 (the port still runs half the time)."""
    if flows < 2 or arrival <= rate * 1.0001:
        return 0.0
    return min(1.0, FED_PORT_KAPPA * (2 if bursty else 1) * flows * MSS / ((1 - BETA) * buffer))


def half_duplex(budget: int, flows: int) -> bool:
    """Whether a one-NIC gateway that relays both directions at once carries them one after the
    other. The gateway's LAN clamps divide `budget` (its port's buffer and LAN BDP) among the
    `flows` LAN flows converging on its port; under one segment each, a flow sends a window and
    then waits for the gateway's window update. Those updates leave through the gateway's one
    NIC, behind the relayed bytes it is writing to the site's nodes and the WAN (a standing
    queue while both directions run), so the inbound flows advance only as that queue drains:
    the NIC's two directions add up instead of overlapping (results/matrix/2026-11-26-holdout:
    a 10 KB all-to-all of 36 flows per site, 804 KB per repetition through each gateway's port,
    measured 72-82 ms split against the 46 ms of a full-duplex NIC; docs/model.md §5.1 (f))."""
    return bool(budget) and flows > 0 and budget / flows < MSS


# -- a clamped LAN leg in a pairwise exchange (docs/model.md §5.1 (g)) ----------------------------

# The smallest receive window Linux clamps to (incast-windows.md, mechanism 3: "narrow" flows).
NARROW_WINDOW = 1152
# What one window of a clamped LAN flow waits between its first segment reaching the gateway and
# the window update that lets the next one go: the gateway's relay reading the socket and the ACK
# coming back, on a LAN whose propagation is next to nothing (LAN_RTT_S), so mostly host time
# (wake-ups of the relay and of the sending rank on a loaded machine). Fitted, the one figure of
# term (g), on the pairwise all-to-alls of every committed grid whose gateways clamp (docs/model.md
# §5.1 (g)); it is this VM's, under the load of a lab of 7-12 ranks.
LAN_TURN_S = 0.6e-3


def clamp_share(budget: int, open_flows: int) -> float:
    """The window a gateway's LAN clamp offers each of `open_flows` open LAN sockets: its port's
    `budget` divided among them (incast-windows.md: every open socket gets a share, active or not),
    never under the narrow floor. Infinite without clamps (budget 0) or flows."""
    if not budget or open_flows <= 0:
        return math.inf
    return max(float(NARROW_WINDOW), budget / open_flows)


def clamped_flow_rate(window: float, rate: float, turn: float = LAN_TURN_S) -> float:
    """Bytes/s one LAN flow held to `window` bytes keeps into its gateway: a window's first segment
    (at most MSS, the whole window when narrower) crosses at the node's `rate`, its ACK comes back
    `turn` later with the window update, so the flow holds `window` per round trip of
    min(window, MSS)/rate + turn, and never more than `rate`. Sized for a gather, where every
    open flow sends at once and their windows add up to the port's budget, the clamp costs nothing;
    in a pairwise all-to-all step only one of a node's many open relayed sockets is active, and it
    runs at this rate."""
    if not math.isfinite(window):
        return rate
    return min(rate, window / (min(window, MSS) / rate + turn))


# -- (h) a WAN link into a gateway port that the gateway's own nodes send through -----------------


def shared_port_rounds(flight: float, buffer: int, port: float, wan_in: float, lan_in: float) -> int:
    """Loss rounds of a WAN link's `flight` at the far gateway's switch port (`port` bytes/s,
    `buffer`) when that gateway's own nodes send their relayed bytes through the same port at once
    (`lan_in` bytes/s): in an exchange a one-NIC gateway's port takes the WAN links' arrivals
    (`wan_in`, each paced at most at the path's rate, so alone they fit) and its LAN senders'
    together (docs/model.md §5.1 (h)). None when nothing of the site leaves through the gateway."""
    if lan_in <= 0:
        return 0
    return burst_rounds(flight, buffer, port, wan_in + lan_in)
