"""The lab's gateway processes: one gridsplitd per gateway host, named by label.

A gateway's label is its site's name for the site's first gateway and "SITE.N"
for the N-th after it (topology.gateway_label); its host is "SITE-gw",
"SITE-gwN" (topology.gateway_host_name), and its config, log and PID entry in
the lab's state directory are gw-LABEL.toml, gw-LABEL.log and pids["gw-LABEL"].
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import sysdeps
from ..errors import GridsplitError
from ..gateway import ADMIN, GATEWAY_HOST_SYSCTLS, gateway_toml, lan_mss, new_psk, nodes_conf
from ..procs import zombie
from ..topology import LabSettings, Topology, gateway_host_name, gateway_label, gateway_of_label
from .names import LabNames
from .sh import in_ns


def gateway_binary(data: dict) -> str:
    """The gridsplitd the lab's gateways run: the one a benchmark restarted them with
    (`bench ab` compares builds), else this checkout's."""
    return data.get("gridsplitd") or sysdeps.built("gridsplitd")


def gateway_host_sysctls(lab: LabSettings) -> dict[str, str]:
    """The gateway hosts' TCP settings: gateway.GATEWAY_HOST_SYSCTLS, as on a
    real gateway host; `[lab] pacing_ratio = "kernel"` leaves the pacing ratios
    at the kernel's defaults (to measure what they change)."""
    if lab.pacing_ratio == "kernel":
        return {k: x for k, x in GATEWAY_HOST_SYSCTLS.items() if "pacing" not in k}
    return dict(GATEWAY_HOST_SYSCTLS)


def gateway_lan_mss(topo: Topology, site: str) -> int:
    """`[lan] mss` of a site's gateway: 0 (the interface's MSS) unless `[lab]
    lan_mss` is "auto" (gateway.lan_mss) or N (N where lan_mss would reduce
    it), to measure what a reduced MSS changes."""
    v = topo.lab.lan_mss
    auto = lan_mss(topo, site)
    return auto if v == "auto" else int(v) if auto else 0


def gateway_rt_priority(topo: Topology) -> int:
    """SCHED_FIFO priority of the lab's gridsplitd processes (`[lab] gateway_rt`; 0: normal scheduling).

    A real gateway is a host of its own; in the lab it shares two vCPUs with
    every MPI rank. Twenty ranks that yield when idle still keep the run queue
    full, so a gateway woken by a packet waited for a time slice: each relayed
    message paid the ranks' scheduling, which direct mode (no gateway) never
    does. Real-time priority, below the delay line's (10), gives the gateways
    the CPU when they have work, as their own host would; they sleep otherwise.
    """
    return topo.lab.gateway_rt


def gateway_labels(topo: Topology) -> list[str]:
    """Every gateway of the topology, by its lab label (topology.gateway_label)."""
    return [gateway_label(s.name, k) for s in topo.sites for k in range(len(s.gateway_addrs))]


def start_gateways(topo: Topology, names: LabNames, gridsplitd: str, labels: list[str], rt: int) -> dict[str, int]:
    """One gridsplitd per gateway host (`labels`: gateway_labels), sharing one fresh
    pre-shared key; `rt`: gateway_rt_priority(topo)."""
    psk = names.state_dir / "psk"
    new_psk(psk)
    (names.state_dir / "nodes.conf").write_text(nodes_conf(topo))  # the ranks' GRIDSPLIT_CONFIG (mpi.split_env)
    pids = {}
    for label in labels:
        site, k = gateway_of_label(label)
        cfg = names.state_dir / f"gw-{label}.toml"
        cfg.write_text(gateway_toml(topo, site, str(psk), sub_segment=topo.lab.sub_segment,
                                    mss=gateway_lan_mss(topo, site), index=k))
        pids[f"gw-{label}"] = spawn_gateway(names, gridsplitd, label, rt)
    # Ready when every gateway answers on its admin port and sees all its peers:
    # a full mesh, one link to each gateway of every other site.
    deadline = time.monotonic() + 15
    pending = set(labels)
    while pending and time.monotonic() < deadline:
        for label in list(pending):
            pid = pids[f"gw-{label}"]
            if not Path(f"/proc/{pid}").exists() or zombie(pid):
                tail = (names.state_dir / f"gw-{label}.log").read_text().strip().splitlines()
                raise GridsplitError(f"gridsplitd on {host_of(label)} exited at start: "
                                     f"{tail[-1] if tail else 'no output'}")
            st = gateway_status(names, label, quiet=True)
            peers = sum(1 for x in labels if gateway_of_label(x)[0] != gateway_of_label(label)[0])
            if st is not None and _links_up(st) >= peers:
                pending.discard(label)
        time.sleep(0.1)
    if pending:
        raise GridsplitError(f"gateways {', '.join(sorted(pending))} did not bring up their WAN links within 15 s; "
                             f"see {names.state_dir}/gw-*.log")
    return pids


def _raise_nofile() -> None:
    """In spawn_gateway's child: a gateway holds one descriptor per flow, so give it
    deploy/gridsplitd.service's LimitNOFILE (1048576) where allowed (CAP_SYS_RESOURCE),
    else the hard limit; the inherited soft limit (often 1024) caps a lab's flows."""
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def host_of(label: str) -> str:
    """The host name of the gateway with lab label `label` ("east.2" -> "east-gw2")."""
    return gateway_host_name(*gateway_of_label(label))


def gateway_label_of(state: Any, site: str, n: int) -> str:
    """The label of `site`'s gateway number n (1-based, `--gateway`), refused with one line if the lab has none."""
    gws = state.data.get("gateways") or []
    if site not in {x.name for x in state.topo.sites}:
        raise GridsplitError(f"--site {site!r}: no site named {site!r} in this lab; "
                             f"sites: {', '.join(s.name for s in state.topo.sites)}")
    mine = [g for g in gws if gateway_of_label(g)[0] == site]
    if not mine:
        raise GridsplitError(f"site {site!r} runs no gateway in this lab; gateways: "
                             f"{', '.join(host_of(g) for g in gws) or 'none'} "
                             "(topology with gateway = true, lab up without --no-gateways)")
    if not 1 <= n <= len(mine):
        raise GridsplitError(f"--gateway {n}: site {site!r} has {len(mine)} gateway(s); give 1 to {len(mine)}")
    return mine[n - 1]


def spawn_gateway(names: LabNames, gridsplitd: str, label: str, rt: int, append: bool = False) -> int:
    """Start one gateway's gridsplitd (by its label) from its config in the state
    directory; its PID (`ip netns exec` and `chrt` exec it). `append` keeps the
    log of an earlier run."""
    prio = ["chrt", "-f", str(rt)] if rt else []
    log = open(names.state_dir / f"gw-{label}.log", "a" if append else "w")
    ns = names.host_ns(host_of(label))
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *prio, gridsplitd, "--config",
                             str(names.state_dir / f"gw-{label}.toml")],
                            stdout=log, stderr=log, start_new_session=True, preexec_fn=_raise_nofile)
    log.close()
    return proc.pid


def _links_up(status: dict[str, Any]) -> int:
    # gridsplitd lists a link in /status only once it is authenticated and up.
    return sum(1 for l in status.get("links", []) if l.get("peer"))


def gateway_status(names: LabNames, label: str, quiet: bool = False) -> dict[str, Any] | None:
    """The /status JSON of a lab gateway, by its label (read from inside its namespace)."""
    cp = in_ns(names.host_ns(host_of(label)), [
        sys.executable, "-c",
        "import sys,urllib.request;sys.stdout.write(urllib.request.urlopen(sys.argv[1],timeout=3).read().decode())",
        f"http://{ADMIN}/status"], check=False, timeout=10)
    if cp.returncode != 0:
        if quiet:
            return None
        raise GridsplitError(f"gateway {host_of(label)} does not answer on {ADMIN}: {cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else 'no output'}")
    return json.loads(cp.stdout)
