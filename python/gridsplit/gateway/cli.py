"""`gridsplit gateway ...`: operating gateways.

`gateway config` writes a site's gridsplitd config from a topology (lab or real
deployment), `gateway nodes-config` the node file every node's libgridsplit.so
reads, `gateway new-key` rotates the WAN key, and `gateway status` renders a
gateway's /status JSON. `gridsplit run` (launching ranks with the library) is in
launch.py.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ..console import emit_json, out
from ..errors import GridsplitError
from ..lab.names import LabNames
from ..lab.gateways import gateway_label_of, gateway_status
from ..lab.realize import load_state
from ..netcheck.measure import load_report
from ..netcheck.tuning import gateway_links
from ..topology_file import load_topology

from . import ADMIN, fetch_status, gateway_toml, new_psk, nodes_conf
from .nodes import is_host_port


@click.group()
def gateway() -> None:
    """Site gateways (gridsplitd): generate configs, read status."""


def check_endpoint(flag: str, value: str) -> None:
    """IP:PORT (or [v6]:PORT), as gridsplitd's config requires, else one line naming the flag."""
    if not is_host_port(value):
        raise GridsplitError(f"{flag} {value!r}: give an IP:PORT address, e.g. {ADMIN}")


@gateway.command("config")
@click.option("--topology", "-t", required=True, metavar="NAME|FILE")
@click.option("--site", required=True, help="The site whose gateway this config is for.")
@click.option("--gateway", "gw", type=int, default=1, show_default=True, metavar="N",
              help="Which of the site's gateways (1 = the first of its `gateways` list), for sites with several.")
@click.option("--psk-file", default="/etc/gridsplit/psk", show_default=True,
              help="Pre-shared key file (same content on every gateway, ≥ 16 bytes, mode 600).")
@click.option("--admin", default=ADMIN, show_default=True, help="Admin endpoint (JSON /status, Prometheus /metrics).")
@click.option("--from-netcheck", "netcheck_file", metavar="FILE",
              help="Take each WAN link's socket buffer, pacing rate, RTT and CC from a netcheck JSON report.")
@click.option("--new-key", is_flag=True,
              help="Also write a fresh 256-bit key to --psk-file (refused if it exists); copy it to the other "
                   "gateways over a secure channel. It is the only key a WAN link needs.")
def config(topology: str, site: str, gw: int, psk_file: str, admin: str, netcheck_file: str | None,
           new_key: bool) -> None:
    """Print the gridsplitd config of SITE's gateway (nodes read `gateway nodes-config`'s file instead)."""
    topo = load_topology(topology)
    topo.site(site)
    if not psk_file.strip():
        raise GridsplitError("--psk-file is empty: give the path of the WAN key file (the same key on every gateway)")
    check_endpoint("--admin", admin)
    if not any(topo.site(w.peer(site)).gateway for w in topo.wans if site in (w.a, w.b)):
        raise GridsplitError(f"site {site!r} has no WAN link to another site with a gateway in topology {topo.name!r}: "
                             f"its gateway would relay nothing; add the other sites and their [[wan]] links")
    measured = None
    if netcheck_file:
        measured = gateway_links(load_report(netcheck_file), site)
        if not measured:
            raise GridsplitError(f"{netcheck_file}: no measured pair involves site {site!r}; "
                                 f"run `gridsplit netcheck` on pairs with {site} first")
    # The whole config first, so that a bad option leaves no key file behind.
    text = gateway_toml(topo, site, psk_file, admin, measured, netcheck_file or "", index=gw - 1)
    if new_key:
        p = Path(psk_file)
        if p.exists():
            raise GridsplitError(f"{psk_file} exists: keep it (omit --new-key), or rotate it with "
                                 f"`gridsplit gateway new-key --psk-file {psk_file}`")
        if not p.parent.is_dir():
            raise GridsplitError(f"{p.parent} is not a directory: create it (mkdir -p {p.parent}) or pass --psk-file")
        new_psk(p)
        click.echo(f"wrote a new WAN key to {psk_file} (mode 600): copy it to every other gateway", err=True)
    click.echo(text, nl=False)


@gateway.command("new-key")
@click.option("--psk-file", required=True, help="The key file to replace (written to a temporary file, then renamed).")
def new_key(psk_file: str) -> None:
    """Rotate the WAN key: write a fresh key to PSK_FILE. Then copy it to the other gateways yourself
    and send each gridsplitd SIGHUP (docs/deployment.md, "Keys"); links that are up keep their flows."""
    p = Path(psk_file)
    if not p.parent.is_dir():
        raise GridsplitError(f"{p.parent} is not a directory: create it or pass another --psk-file")
    new_psk(p)
    click.echo(f"wrote a new WAN key to {psk_file}; now copy it to every other gateway and run "
               "`systemctl kill -s HUP gridsplitd` (or kill -HUP PID) on each", err=True)


@gateway.command("nodes-config")
@click.option("--topology", "-t", required=True, metavar="NAME|FILE")
def nodes_config(topology: str) -> None:
    """Print the node file: every site's subnet and gateway, and the split policy, for libgridsplit.so
    (GRIDSPLIT_CONFIG; `gridsplit run --config`). The same file serves every node of every site."""
    topo = load_topology(topology)
    if sum(1 for s in topo.sites if s.gateway) < 2:
        raise GridsplitError(f"topology {topo.name!r} has fewer than two sites with a gateway: no connection "
                             f"would be split; add the other sites (with gateway = true)")
    click.echo(nodes_conf(topo), nl=False)


@gateway.command()
@click.option("--lab", "lab_site", metavar="SITE", help="A gateway of the running lab, by its site.")
@click.option("--gateway", "gw", type=int, default=1, show_default=True, metavar="N",
              help="With --lab: which of the site's gateways, for a site with several.")
@click.option("--url", default=f"http://{ADMIN}/status", show_default=True, help="A gateway's admin /status URL.")
@click.option("--json", "as_json", is_flag=True)
def status(lab_site: str | None, gw: int, url: str, as_json: bool) -> None:
    """Links, flows, WAN TCP state (tcp_info) and counters of one gateway."""
    if lab_site:
        names = LabNames.from_env()
        st = gateway_status(names, gateway_label_of(load_state(names), lab_site, gw))
    else:
        st = fetch_status(url)
    if as_json:
        emit_json(st)
        return
    render_status(st, lab_site or url)


def render_status(st: dict, name: str) -> None:
    c = st.get("counters", {})
    out.print(f"gateway [bold]{st.get('site', name)}[/bold]: {c.get('flows_active', 0)} active flows, "
              f"{c.get('flows_opened', 0)} opened, {c.get('flows_reset', 0)} reset; relayed out "
              f"{c.get('relayed_bytes_out', 0)} B, in {c.get('relayed_bytes_in', 0)} B; auth failures "
              f"{c.get('auth_failures', 0)}, WAN protocol errors {c.get('wan_protocol_errors', 0)}")
    enc = st.get("encryption")
    if enc:
        out.print(f"WAN encryption: {enc}"
                  + (f"; last handshake refusal: {escape(st['last_handshake_refusal'])}" if st.get("last_handshake_refusal") else ""))
    for w in st.get("warnings") or []:
        out.print(f"[bold red]warning:[/bold red] {escape(w)}")
    lan = st.get("lan") or {}
    if lan.get("window_budget"):
        out.print(f"LAN incast control: budget {lan['window_budget']} B over {lan.get('sockets_clamped', 0)} sockets, "
                  f"smallest window clamp {lan.get('window_clamp', 0)} B"
                  + (f" ({lan['sockets_sub_segment']} under one segment)" if lan.get("sockets_sub_segment") else "")
                  + (f"; {lan['sockets_wide']} offered two segments or more (wide)" if lan.get("sockets_wide") else "")
                  + ("" if lan.get("sub_segment", True) else "; sub-segment windows off")
                  + (f"; LAN senders offered an MSS of {lan['mss']} B" if lan.get("mss") else "")
                  + (f"; writes toward each LAN host paced to share {lan['rate_bps'] / 1e6:.1f} Mb/s"
                     + (f" beyond {lan['burst_bytes']} B queued" if lan.get("burst_bytes") else "")
                     + (f" ({lan.get('pacing_overruns', 0)} host overruns so far"
                        + (f"; now {lan['hosts_paced_shared']} hosts shared, smallest share "
                           f"{lan.get('smallest_pacing_rate_bps', 0) / 1e6:.1f} Mb/s" if lan.get("hosts_paced_shared") else "")
                        + ")")
                     if lan.get("rate_bps") else "")
                  + (f"; LAN minimum RTO {lan['rto_min_us']} µs" if lan.get("rto_min_us") else ""))
    host = st.get("host") or {}
    if host:
        out.print(f"host TCP: slow start after idle {host.get('slow_start_after_idle', '?')}, pacing ratios "
                  f"{host.get('pacing_ss_ratio', '?')} % (slow start) / {host.get('pacing_ca_ratio', '?')} % "
                  "(congestion avoidance) of cwnd/RTT, under the link's pacing cap")
    t = Table("peer", "role", "state", "streams", "reconnects", "replayed", "strategy", "flows", "queued", "frames out/in",
              "chunks aggregated", "cwnd", "RTT", "retrans", "RTO timeouts", "sndbuf/rcvbuf/lowat", "CC",
              title="WAN links")
    for link in st.get("links", []):
        tis = link.get("tcp_info") or [{}]
        ap = (link.get("applied") or [{}])[0]
        state = link.get("state", "up")
        if link.get("down_seconds") is not None:
            state += f" (down {link['down_seconds']:.1f} s of {link.get('outage_limit_s', 0):g})"
        t.add_row(link.get("peer", "?"), link.get("role", ""), state, str(link.get("streams", 1)),
                  str(link.get("reconnects", 0)),
                  f"{link.get('bytes_replayed', 0)} B", link.get("strategy", ""), str(link.get("flows", 0)),
                  f"{link.get('queued_bytes', 0)} B", f"{link.get('frames_out', 0)}/{link.get('frames_in', 0)}",
                  f"{link.get('chunks_aggregated', 0)} in {link.get('batch_frames', 0)} frames",
                  " ".join(str(ti.get("snd_cwnd", "")) for ti in tis),
                  " ".join(f"{ti.get('rtt_us', 0) / 1000:.2f} ms" for ti in tis),
                  " ".join(str(ti.get("total_retrans", ti.get("retransmits", ""))) for ti in tis),
                  " ".join(str(ti.get("total_rto", ti.get("rto_timeouts", ""))) for ti in tis),
                  f"{ap.get('sndbuf', '')}/{ap.get('rcvbuf', '')}/{ap.get('notsent_lowat', '')}",
                  str(ap.get("congestion", "")))
    out.print(t)
    c = st.get("counters") or {}
    if c.get("wan_connections_lost") or st.get("flows_held"):
        out.print(f"WAN outages: {c.get('wan_connections_lost', 0)} connections lost, "
                  f"{c.get('wan_reconnects', 0)} resumed ({c.get('wan_bytes_replayed', 0)} B replayed); "
                  f"{st.get('flows_held', 0)} flows held now; {c.get('flows_reset_outage', 0)} flows reset "
                  f"by {c.get('sessions_expired', 0)} outages past the limit")
    flows = st.get("flows", [])
    if flows:
        t = Table("flow", "peer", "origin", "source", "destination", "state", "bytes out", "bytes in", "queued",
                  "frames out", "credit", title=f"flows ({st.get('flows_truncated', 0)} more not listed)")
        for f in flows[:50]:
            t.add_row(*[str(f.get(k, "")) for k in ("id", "peer", "origin", "src", "dst", "state", "bytes_out",
                                                      "bytes_in", "queued_bytes", "frames_out", "credit")])
        out.print(t)
