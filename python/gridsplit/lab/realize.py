"""Turning a topology into namespaces, links, qdiscs and a delay line (lab up/down).

The emulated grid, per site:

    host ns (node or gateway)          switch ns                 router ns
    eth0 [tbf: NIC rate] ─────────── hK [tbf: NIC rate, drop-tail switch buffer]
                                       br0
                                       up [tbf: uplink rate] ── lan0
                                                                  to-<peer> [tbf: WAN rate, WAN buffer] ── l<j>a (WAN ns)

and one WAN namespace holding both ends of every WAN link, bridged frame by frame
by gridsplit-wanem, the user-space delay line (this kernel has no netem). Rates
and drop-tail buffers are kernel tbf; delay and random loss are the delay line's.
The switch's output port toward a host is where gather traffic converges, as in
Alter and Glück's figure 8, so that is where its buffer is.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterator

from .. import sysdeps
from ..errors import GridsplitError
from ..model.splitadvise import split_policy
from ..gateway import lan_initrwnd
from ..topology import GatewaySettings, Host, Topology, WanLink
from ..topology_file import load_topology, topology_text
from . import names as N
from ..procs import zombie
from .gateways import (gateway_host_sysctls, gateway_labels, gateway_lan_mss,
                       gateway_rt_priority, start_gateways)
from .undoers import kill_undoers
from .names import LabNames
from .pinger import ping
from .sh import in_ns, ip_batch, list_netns, netns_pids, run, tc_batch
from .tcptrace import remove_instances

MTU_FRAME = 1514


def tbf_burst(rate_mbps: float, ms: float) -> int:
    """Token-bucket depth: `ms` of traffic at the rate, at least two full frames.

    The bucket must cover the kernel's timer and softirq latency on a loaded VM,
    or tbf under-delivers (at 1 Gb/s it needs >= 256 KB here, see docs/lab.md).
    """
    return max(int(rate_mbps * 1e6 / 8 * ms / 1000), 2 * MTU_FRAME)


# Bucket depths, in ms of traffic at the shaped rate. Host NICs and the WAN get
# the deep bucket the delay line needs; switch output ports a shallow one, since
# a full bucket lets a burst through at infinite speed and would add to the
# switch buffer that incast (the gather) is meant to overflow.
BURST_MS = {"nic": 2.1, "switch": 0.25, "wan": 2.1}

# A real NIC never sends faster than its line rate, but a full 2.1 ms bucket
# lets an idle host put 26 KB (at 100 Mb/s) on the wire at memory speed: a
# one-to-many send then finishes in half the time a NIC needs, which no host
# of the emulated platform can do (Barchet-Estefanel and Mounié's small-message models were off by
# a quarter for it). tbf's second (peak) bucket caps the NIC at NIC_PEAK
# times its rate; the deep bucket still pays back timer latency and VM
# stalls, but only 10 % faster than real time. The peak bucket holds PEAK_US of
# traffic at the rate, and at least PEAK_MTU bytes: above one 1514-byte frame
# (tc rounds it down to its rate-table cells, and a frame larger than the bucket
# would be dropped), below two. At 100 Mb/s that is one frame; at 1 Gb/s four,
# because a tbf timer per frame (one per 12 µs per busy host) costs the whole
# machine a good part of a 1 Gb/s flow (docs/design/delay-line-and-fidelity.md),
# while a 50 us burst is below anything a gather or a model resolves.
NIC_PEAK = 1.1
PEAK_MTU = 2000
PEAK_US = 50


def peak_bucket(rate_mbps: float) -> int:
    return max(PEAK_MTU, int(rate_mbps * 1e6 / 8 * PEAK_US / 1e6))


def delay_line_cpu(topo: Topology) -> int | None:
    """The CPU the delay line's threads are pinned to, or None (the default).

    Every frame the delay line sends is received by the peer router inside its
    own sendmmsg, and the whole stack behind it (routing, switch, tbf, the
    receiving host's TCP and its ACKs) runs there too: at 1 Gb/s that is most of
    a core, and the line falls behind its schedule. With `[lab] wanem_steer = true`
    the routers' WAN interfaces steer that work (RPS) to the other CPUs and the
    delay line runs on the last one. Off by default: on 2 vCPUs the one CPU left
    then saturates at 1 Gb/s, its backlog (net.core.netdev_max_backlog) overflows
    and frames are lost in the kernel, where no buffer of the topology is, and
    nothing in `lab check` sees it (crates/wanem/README.md, "Full rate").
    """
    n = os.cpu_count() or 1
    return n - 1 if n >= 2 and topo.lab.wanem_steer else None


def _rps_mask(cpu: int) -> str:
    return format(((1 << (os.cpu_count() or 1)) - 1) & ~(1 << cpu), "x")


def tbf_line(dev: str, rate_mbps: float, limit: int, kind: str) -> str:
    burst = tbf_burst(rate_mbps, BURST_MS[kind])
    peak = f" peakrate {int(rate_mbps * 1e6 * NIC_PEAK)}bit mtu {peak_bucket(rate_mbps)}" if kind == "nic" else ""
    return (f"qdisc replace dev {dev} root tbf rate {int(rate_mbps * 1e6)}bit burst {burst}{peak} "
            f"limit {max(limit, burst)}")


@dataclass
class LabState:
    """What `lab up` recorded: enough for every later command, and for `lab down`."""

    names: LabNames
    topo: Topology
    data: dict[str, Any]

    @property
    def emulation(self) -> dict[str, Any]:
        """The emulator's settings a measurement depends on (recorded by `lab status` and every bench meta row)."""
        return {**{k: self.data.get(k) for k in ("scale", "delay_compensation_us", "tbf_burst_ms", "nic_peak",
                                                  "gateway_rt_priority", "idle")},
                # which site pairs the node file splits, and why (`--split=all` overrides it per run)
                "split_policy": {f"{a}-{b}": why for (a, b), (_, why) in split_policy(self.topo).items()}
                if self.data.get("gateways") else None}

    @property
    def wanem_pid(self) -> int | None:
        return self.data.get("pids", {}).get("wanem")

    @property
    def wanem_stats_path(self) -> Path:
        return self.names.state_dir / "wanem-stats.json"

    def wanem_stats(self) -> dict[str, Any]:
        try:
            return json.loads(self.wanem_stats_path.read_text())
        except (OSError, ValueError):
            raise GridsplitError(f"the delay line's statistics ({self.wanem_stats_path}) are unreadable; is the lab up? (`gridsplit lab status`)") from None

    def ns(self, host: Host | str) -> str:
        return self.names.host_ns(self.topo.host(host) if isinstance(host, str) else host)


def load_state(names: LabNames) -> LabState:
    if not names.state_file.exists():
        raise GridsplitError(f"no lab is up (prefix {names.prefix!r}); start one with `gridsplit lab up`")
    data = json.loads(names.state_file.read_text())
    topo = load_topology(str(names.state_dir / "topology.toml"), data.get("nodes"), data.get("scale"))
    topo = _renamed(topo, data["topology_name"])
    overrides = _gateway_overrides(data)
    if overrides:
        topo = replace(topo, gateways=replace(topo.gateways, **overrides))
    return LabState(names, topo, data)


def _gateway_overrides(data: dict) -> dict:
    """The gateway settings a benchmark left overridden (restart_gateways). Keys an
    older gridsplit wrote and this one no longer knows are dropped: they describe
    gateways that are restarted from the topology anyway."""
    known = {f.name for f in fields(GatewaySettings)}
    return {k: v for k, v in (data.get("gateway_overrides") or {}).items() if k in known}


# The GatewaySettings fields a benchmark may override (restart_gateways).
OVERRIDABLE = ("strategy", "congestion", "lan_tuning", "lan_pacing", "wan_streams", "encryption", "wan_pacing",
               "wan_quickack", "lan_rto_min_us")


def restart_gateways(state: LabState, gridsplitd: str | None = None, **overrides: str | bool | int) -> LabState:
    """Restart the lab's gridsplitd processes with other gateway settings.

    `overrides` are GatewaySettings fields (OVERRIDABLE: strategy, congestion, lan_tuning,
    lan_pacing, wan_streams, encryption, wan_pacing, wan_quickack, lan_rto_min_us: the ranks' node library reads
    the returned state's topology too). Benchmarks use this to compare strategies and
    WAN and LAN tuning on one unchanged lab, so the network under test stays the same
    between variants. `gridsplitd` is the binary
    to run (None: this checkout's build); the state records it.
    """
    labels = state.data.get("gateways") or []
    if not labels:
        raise GridsplitError("this lab has no gateways to restart (topology without gateway = true, or `lab up --no-gateways`)")
    bad = {k for k in overrides if k not in OVERRIDABLE}
    if bad:
        raise GridsplitError(f"cannot override gateway setting(s) {', '.join(sorted(bad))}; "
                             f"only {', '.join(OVERRIDABLE[:-1])} and {OVERRIDABLE[-1]}")
    names = state.names
    with _lock(names):
        current = json.loads(names.state_file.read_text())  # as it is now: faults may have changed it
        pids = current.get("pids", {})
        stop_pids([p for k, p in pids.items() if k.startswith("gw-")])
        merged = {**_gateway_overrides(state.data), **overrides}
        topo = replace(state.topo, gateways=replace(state.topo.gateways, **merged))
        rt = gateway_rt_priority(topo)
        binary = gridsplitd or sysdeps.built("gridsplitd")
        new = start_gateways(topo, names, binary, labels, rt)
        data = {**current, "pids": {**{k: v for k, v in pids.items() if not k.startswith("gw-")}, **new},
                "gateway_overrides": merged, "gateway_rt_priority": rt, "gridsplitd": binary}
        names.state_file.write_text(json.dumps(data, indent=1))
    return LabState(names, topo, data)


def _renamed(topo: Topology, name: str) -> Topology:
    return replace(topo, name=name)


@contextmanager
def _lock(names: LabNames, wait: float = 0) -> Iterator[None]:
    """The lab's lock, for anything that changes it; `wait`: seconds to wait for it."""
    names.state_dir.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    with open(names.state_dir.parent / f"{names.prefix}.lock", "w") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GridsplitError(f"another gridsplit command is building or removing lab {names.prefix!r}; wait for it to finish") from None
                time.sleep(0.05)
        yield


# ---------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------


def up(spec: str, nodes: int | None, names: LabNames, progress=lambda msg: None,
       gateways: bool = True, scale: float | None = None, keep_failed: bool = False,
       scale_auto: bool = False) -> LabState:
    topo = load_topology(spec, nodes, scale)  # bad input first: it needs no privilege to report
    text = topology_text(spec)[0]
    sysdeps.need_root("gridsplit lab up")
    for tool in ("ip", "tc", "ethtool", "unshare", "hostname", "sysctl", "chrt"):
        sysdeps.need_tool(tool)
    wanem = sysdeps.built("gridsplit-wanem")
    gw_labels = gateway_labels(topo) if gateways else []
    gridsplitd = sysdeps.built("gridsplitd") if gw_labels else None
    rt = gateway_rt_priority(topo) if gw_labels else None
    poll = topo.lab.idle == "poll"

    with _lock(names):
        leftovers = [ns for ns in list_netns() if names.owns_ns(ns)]
        if names.state_file.exists() or leftovers:
            raise GridsplitError(f"a lab with prefix {names.prefix!r} is already up ({len(leftovers)} namespaces); "
                                 "run `gridsplit lab down` first, or use another GRIDSPLIT_LAB_PREFIX")
        names.state_dir.mkdir(parents=True, exist_ok=True)
        (names.state_dir / "topology.toml").write_text(text)
        try:
            _build(topo, names, progress)
            progress("starting the WAN delay line")
            pid = _start_wanem(topo, names, wanem, 0, poll)
            comp = 0
            if topo.wans:
                progress("calibrating the delay line against the path's own latency")
                pid, comp = _calibrate(topo, names, wanem, pid, poll)
            pids = {"wanem": pid}
            if gw_labels:
                progress(f"starting gridsplitd on {len(gw_labels)} gateway(s)")
                pids.update(start_gateways(topo, names, gridsplitd, gw_labels, rt))
            data = {
                "prefix": names.prefix, "topology_name": topo.name, "topology_spec": spec, "nodes": nodes, "scale": scale,
                "scale_auto": scale_auto,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pids": pids, "delay_compensation_us": comp,
                "gateways": gw_labels, "gridsplitd": gridsplitd,
                "tbf_burst_ms": BURST_MS, "nic_peak": NIC_PEAK,
                "gateway_rt_priority": rt, "idle": "poll" if poll else "halt", "topology": topo.to_dict(),
                "namespaces": _all_ns(topo, names),
            }
            names.state_file.write_text(json.dumps(data, indent=1))
        except BaseException:
            if keep_failed:
                progress(f"setup failed; --keep-failed: the half-built lab stays for inspection ({names.state_dir})")
                raise
            progress("setup failed; removing what was built")
            _teardown(names)
            raise
    return LabState(names, topo, data)


def _all_ns(topo: Topology, names: LabNames) -> list[str]:
    out = [names.host_ns(h) for h in topo.hosts()]
    for s in topo.sites:
        out += [names.switch_ns(s.name), names.router_ns(s.name)]
    return out + [names.wan_ns]


def _hosts_file(topo: Topology) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{h.ip} {h.name}" for h in topo.hosts()]
    for s in topo.sites:
        lines.append(f"{s.router_ip} {s.name}-router")
    return "\n".join(lines) + "\n"


def _sysctl(ns: str, values: dict[str, str]) -> None:
    in_ns(ns, ["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in values.items()]])


NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}


def _build(topo: Topology, names: LabNames, progress) -> None:
    hosts_text = _hosts_file(topo)
    for ns in _all_ns(topo, names):
        run(["ip", "netns", "add", ns])
        etc = names.netns_etc(ns)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_text)
        ip_batch(ns, ["link set lo up"])
        _sysctl(ns, NO_IPV6)

    initrwnd = topo.lab.initrwnd
    for site in topo.sites:
        ngw = len(site.gateway_addrs)
        progress(f"site {site.name}: switch, router, {site.nodes} node(s)"
                 + (f" and {ngw} gateway{'s' if ngw > 1 else ''}" if ngw else ""))
        sw, rt = names.switch_ns(site.name), names.router_ns(site.name)
        ip_batch(sw, [f"link add {N.BRIDGE} type bridge stp_state 0 forward_delay 0 mcast_snooping 0",
                      f"link set {N.BRIDGE} up"])
        sw_lines, sw_tc = [], []
        for h in [h for h in topo.hosts() if h.site == site.name]:
            hns, port = names.host_ns(h), N.sw_port(h)
            sw_lines += [f"link add {port} type veth peer name {N.HOST_IF} netns {hns}",
                         f"link set dev {port} master {N.BRIDGE}", f"link set dev {port} up"]
            # The port runs at the host's NIC rate (a gateway's: gateway_nic_mbps).
            sw_tc.append(tbf_line(port, h.nic_mbps, site.switch_buffer_bytes, "switch"))
        sw_lines += [f"link add {N.SW_UPLINK} type veth peer name {N.RT_LAN} netns {rt}",
                     f"link set dev {N.SW_UPLINK} master {N.BRIDGE}", f"link set dev {N.SW_UPLINK} up"]
        sw_tc.append(tbf_line(N.SW_UPLINK, site.uplink_mbps, site.switch_buffer_bytes, "switch"))
        ip_batch(sw, sw_lines)
        in_ns(sw, ["sh", "-c", " ; ".join(f"ethtool -K {d} tso off gso off gro off >/dev/null" for d in
                                         [N.sw_port(h) for h in topo.hosts() if h.site == site.name] + [N.SW_UPLINK])])
        tc_batch(sw, sw_tc)

        for h in [h for h in topo.hosts() if h.site == site.name]:
            hns = names.host_ns(h)
            cc = f"congctl {site.tcp.congestion}"
            # A gateway host's LAN route offers new connections a one-segment
            # initial window (docs/deployment.md, "initrwnd").
            # With a reduced LAN MSS, two of its segments (gateway.lan_initrwnd).
            rwnd = lan_initrwnd(gateway_lan_mss(topo, site.name), initrwnd) if h.role == "gateway" else 0
            lan_route = f"{cc} initrwnd {rwnd}" if rwnd else cc
            ip_batch(hns, [f"addr add {h.ip}/{site.subnet.prefixlen} dev {N.HOST_IF}", f"link set {N.HOST_IF} up",
                           f"route replace {site.subnet} dev {N.HOST_IF} proto kernel scope link src {h.ip} {lan_route}",
                           *[f"route add {net} via {site.router_ip} dev {N.HOST_IF} {cc}"
                             for net in _remote_nets(topo, site.name)]])
            in_ns(hns, ["ethtool", "-K", N.HOST_IF, "tso", "off", "gso", "off", "gro", "off"])
            tc_batch(hns, [tbf_line(N.HOST_IF, h.nic_mbps, site.nic_queue_bytes, "nic")])
            extra = {"net.ipv4.tcp_no_metrics_save": "1"}
            if h.role == "gateway":
                # Tuned like a real gateway host (docs/deployment.md).
                extra.update(gateway_host_sysctls(topo.lab))
            _sysctl(hns, {**site.tcp.sysctls(), **extra})

        ip_batch(rt, [f"addr add {site.router_ip}/{site.subnet.prefixlen} dev {N.RT_LAN}", f"link set {N.RT_LAN} up"])
        # The delay line hands the router GSO super-frames (GRO on the WAN side,
        # below); segmenting them on the way out to the switch keeps every switch
        # port's drop-tail buffer dropping one MTU-sized frame at a time.
        in_ns(rt, ["ethtool", "-K", N.RT_LAN, "tso", "off", "gso", "off", "gro", "off"])
        _sysctl(rt, {"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "0",
                     # An unroutable grid's router answers every refused packet (routes_to_peer): not
                     # one a second per sender, which would leave a node's later connects to time out.
                     **({} if topo.routed else {"net.ipv4.icmp_ratelimit": "0"})})
        if not topo.routed:  # the own gateways' packets skip the refusals of routes_to_peer
            ip_batch(rt, [f"rule add pref {GATEWAY_RULE_PREF} from {ip}/32 lookup main" for ip in site.gateway_addrs])

    progress(f"WAN: {len(topo.wans)} link(s)")
    wan_lines, wan_gro = [], []
    cpu = delay_line_cpu(topo)
    for w in topo.wans:
        for side, site in (("a", w.a), ("b", w.b)):
            rt, dev, peer = names.router_ns(site), N.rt_wan_if(w.peer(site)), N.wan_if(w.index, side)
            ip_batch(rt, [f"link add {dev} type veth peer name {peer} netns {names.wan_ns}",
                          f"addr add {w.ip(site)}/30 dev {dev}", f"link set {dev} up",
                          *routes_to_peer(topo, w, site, dev)])
            in_ns(rt, ["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"])
            if cpu is not None:
                in_ns(rt, ["sh", "-c", f"echo {_rps_mask(cpu)} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"])
            tc_batch(rt, [tbf_line(dev, w.rate_mbps, w.buffer_bytes, "wan")])
            wan_lines.append(f"link set {peer} up")
            # GRO on the delay line's receive side merges what left the WAN tbf
            # (which has dropped per frame already) into super-frames: one receive,
            # copy and send per ~20 frames at 1 Gb/s. Not on a lossy link, where
            # random loss must hit single frames.
            if w.loss == 0:
                wan_gro.append(f"ethtool -K {peer} gro on >/dev/null")
    ip_batch(names.wan_ns, wan_lines)
    if wan_gro:
        in_ns(names.wan_ns, ["sh", "-c", " && ".join(wan_gro)])


def _remote_nets(topo: Topology, site: str) -> list[str]:
    """What a host of `site` routes through its site router: the address plan's
    block, and any other site's own subnet outside it (`[[site]] subnet`)."""
    return [str(topo.sites_block), *(str(o.subnet) for o in topo.sites
                                     if o.name != site and not o.subnet.subnet_of(topo.sites_block))]


# Routing rule priorities of an unroutable grid's routers ([addressing] routed =
# false): after the faults' rules (fault.FAULT_BASE + id, so a blackout still
# blackholes the gateways' traffic), before the main table's (32766).
GATEWAY_RULE_PREF = 29000


def routes_to_peer(topo: Topology, w: WanLink, site: str, dev: str) -> list[str]:
    """`ip` commands giving `site`'s router its routes toward the peer site of WAN link `w`.

    Routed grids: the peer site's subnet, via the link. Unroutable grids
    ([addressing] routed = false), as behind real site firewalls: only the peer
    gateway's address is routed, and only for the own gateway (a rule, added
    with the router, sends the own gateway's packets to the main table; one
    per peer refuses everyone else's to the peer gateway), and the peer's
    subnet is a `prohibit` route. A refused packet is answered at once with ICMP "administratively prohibited", which ends the
    sender's connect() with EHOSTUNREACH ("No route to host") within a LAN round
    trip, like a firewall's REJECT; a `blackhole` (a DROP) would leave it
    retrying SYNs for two minutes, and `unreachable` would claim that no such
    host exists, where a policy refuses it.
    """
    peer = topo.site(w.peer(site))
    via = f"via {w.ip(peer.name)} dev {dev}"
    if topo.routed:
        return [f"route add {peer.subnet} {via}"]
    k = sorted(s.name for s in topo.sites).index(peer.name)
    out = [f"route add prohibit {peer.subnet}"]
    for ip in peer.gateway_addrs:
        out += [f"route add {ip}/32 {via}", f"rule add pref {GATEWAY_RULE_PREF + 1 + k} to {ip}/32 prohibit"]
    return out


CALIBRATION_PROBES = 50


def _calibrate(topo: Topology, names: LabNames, wanem: str, pid: int, poll: bool) -> tuple[int, int]:
    """Take the path's intrinsic latency out of the configured delay.

    Veth hops, bridges, routers and the delay line's own wake-up add about a
    tenth of a millisecond per direction. Configured RTTs are node-to-node
    figures (Guillier et al. 2006 measured them with ping between nodes), so the delay line
    is restarted with that much less delay per direction.

    The path's own latency is what its fastest probes take: anything more is
    waiting (a vCPU the host took, a late timer), which must stay in the
    measurements, not be taken off the configured delay. The median did that on
    a busy host: a lab came up 2 ms short on a 10 ms path (pings of 8.1 ms,
    gathers faster than the physical bound; docs/design/delay-line-and-fidelity.md).
    So the fastest of 50 probes, the choice that leaves the path least faster
    than configured. Idle probes still pay wake-ups that a loaded path does not:
    under an iperf3 flow, with idle CPUs halting, pings ran 0.06-0.10 ms under
    the configured 10 ms at their fastest (a 10th percentile: 0.08-0.13), inside
    `lab check`'s 0.2 ms bound.
    """
    w = topo.wans[0]
    # Node to node; on an unroutable grid the gateways are all that reach each
    # other across sites, over the same hops (NIC, switch, router, WAN).
    role = ("node", "gateway") if topo.routed else ("gateway",)
    src = next(h for h in topo.hosts() if h.site == w.a and h.role in role)
    dst = next(h for h in topo.hosts() if h.site == w.b and h.role in role)
    ping_ns = names.host_ns(src)
    ping(ping_ns, str(dst.ip), 2, 0.05)  # resolve ARP on every hop first
    samples = ping(ping_ns, str(dst.ip), CALIBRATION_PROBES, 0.01)
    if len(samples) < CALIBRATION_PROBES * 2 // 3:
        raise GridsplitError(f"calibration: {src.name} cannot reach {dst.name} across the WAN ({len(samples)}/{CALIBRATION_PROBES} replies); see {names.state_dir / 'wanem.log'}")
    samples.sort()
    overhead_us = (samples[0] - w.rtt_ms) * 1000
    comp = int(min(max(overhead_us / 2, 0), 1000))
    if comp == 0:
        return pid, 0
    stop_pids([pid])
    return _start_wanem(topo, names, wanem, comp, poll), comp


def _start_wanem(topo: Topology, names: LabNames, wanem: str, comp_us: int, poll: bool) -> int:
    stats = names.state_dir / "wanem-stats.json"
    stats.unlink(missing_ok=True)
    cfg = {
        "links": [
            {"name": w.name, "a": N.wan_if(w.index, "a"), "b": N.wan_if(w.index, "b"),
             "delay_us_ab": max(round(w.delay_ms_ab * 1000) - comp_us, 0),
             "delay_us_ba": max(round(w.delay_ms_ba * 1000) - comp_us, 0),
             "loss_ab": w.loss, "loss_ba": w.loss,
             # Serialise at the link's rate (tbf only shapes the average and
             # releases bursts); 2 % faster than tbf so this never becomes the
             # bottleneck and never builds a queue of its own.
             "rate_bps": int(w.rate_mbps * 1e6 * 1.02)}
            for w in topo.wans
        ],
        "stats_path": str(stats), "stats_interval_ms": 500, "late_threshold_us": 200, "seed": 1,
        "max_queue_bytes": 64 * 1024 * 1024,
        # Delay added at run time by `lab fault delay` (re-read on SIGHUP; fault.py).
        "control_path": str(names.state_dir / "wanem-control.json"),
    }
    path = names.state_dir / "wanem.json"
    path.write_text(json.dumps(cfg, indent=1))
    log = open(names.state_dir / "wanem.log", "w")
    cpu = delay_line_cpu(topo)
    pin = ["--cpu", str(cpu)] if cpu is not None else []
    if poll:
        pin += ["--cpu-latency-us", "0"]
    proc = subprocess.Popen(["ip", "netns", "exec", names.wan_ns, wanem, "--config", str(path), "--rt-priority", "10", *pin],
                            stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (names.state_dir / "wanem.log").read_text().strip().splitlines()
            raise GridsplitError(f"the WAN delay line exited at start: {tail[-1] if tail else 'no output'}")
        if stats.exists():
            return proc.pid
        time.sleep(0.05)
    raise GridsplitError("the WAN delay line did not report within 10 s; see " + str(names.state_dir / "wanem.log"))


# ---------------------------------------------------------------------------
# down
# ---------------------------------------------------------------------------


def down(names: LabNames) -> list[str]:
    """Remove every namespace, process and file of this lab; safe on a half-built lab."""
    sysdeps.need_root("gridsplit lab down")
    with _lock(names, wait=10):  # a fault's undo holds it for a moment
        return _teardown(names)


def stop_pids(pids: list[int]) -> None:
    """SIGTERM, up to 3 s to exit, then SIGKILL for whatever is left (zombies count as gone)."""
    def alive(p: int) -> bool:
        return Path(f"/proc/{p}").exists() and not zombie(p)

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        if not pids:
            return


def _teardown(names: LabNames) -> list[str]:
    removed = []
    ours = [ns for ns in list_netns() if names.owns_ns(ns)]
    # Every process living in one of our namespaces was started by the lab
    # (daemons, MPI ranks, iperf3); stop those by PID before removing the namespaces.
    pids: set[int] = set()
    for ns in ours:
        pids.update(netns_pids(ns))
    if names.state_file.exists():
        try:
            data = json.loads(names.state_file.read_text())
            pids.update(p for p in data.get("pids", {}).values() if isinstance(p, int))
            # Faults' undo processes go first and at once: what they would undo goes
            # with the namespaces, and they would only wait for the lock we hold.
            kill_undoers(data)
        except ValueError:
            pass
    pids.discard(os.getpid())
    stop_pids(sorted(pids))
    for ns in ours:
        run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    etc = Path("/etc/netns")
    if etc.exists():
        for d in etc.iterdir():
            if names.owns_ns(d.name):
                shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(names.state_dir, ignore_errors=True)
    remove_instances(names.prefix)
    still = [ns for ns in list_netns() if names.owns_ns(ns)]
    if still:
        raise GridsplitError(f"could not remove namespaces {', '.join(still)}; a process may hold them (see `ip netns pids NS`)")
    return removed
