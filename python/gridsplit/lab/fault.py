"""`gridsplit lab fault ...`: WAN events injected into a running lab, and their undoing.

Each fault is made of kernel objects the lab already uses, and of the delay line's
own control, so that it looks to TCP as the real event would:

- blackout: in both routers' namespaces, a routing rule (priority FAULT_BASE + id)
  sends every lookup first to a table of its own (FAULT_BASE + id) holding
  blackhole routes for the far site's subnet and the link's /30. Forwarded
  packets are dropped without a word, as on a path that went dark; the links
  stay up and no ICMP error comes back.
- loss: a classic-BPF classifier (cls_bpf, direct action) on the clsact egress
  hook of each router's WAN interface drops a packet when the kernel's random
  number is under the threshold (this kernel has no gact nor netem). Per frame,
  before the WAN's tbf, so it is the WAN that loses them.
- delay: the delay line's control file (its `control_path`), re-read on SIGHUP;
  frames received from then on wait that much longer (crates/wanem, control.rs).
- kill-gateway: SIGKILL to the site's gridsplitd, by the PID the lab recorded;
  optionally restarted from its config after a while.

What is active is recorded in the lab's state (`faults`, with the exact objects to
remove), so `lab status` shows it, `lab fault clear` and `lab down` remove it.
A timed fault has an undo process (`python -m gridsplit.lab.fault`, its PID
recorded) that removes it when its time is up, or at once on SIGTERM/SIGINT/SIGHUP;
it is started with those signals blocked, so no signal can end it before it has
undone its fault. The foreground command waits for it and hands it Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .. import sysdeps
from ..errors import GridsplitError
from ..procs import zombie
from ..topology import WanLink
from . import names as N
from . import gateways as G
from . import realize
from .names import LabNames
from .sh import ip_batch, list_netns, run, tc_batch
from .undoers import is_undoer

KINDS = ("blackout", "loss", "delay", "kill-gateway")
# Routing rule priority, routing table and tc filter priority of fault N: FAULT_BASE + N
# (below the main table's rule, 32766; tc priorities go to 65535).
FAULT_BASE = 1000
MAX_SECONDS = 24 * 3600
# The signals that end a fault early (the undo process blocks them, see above).
ENDING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long an undo waits for the lab's lock (another fault being applied, a bench restarting gateways).
LOCK_WAIT = 30


# ---------------------------------------------------------------------------
# what a fault applies to
# ---------------------------------------------------------------------------


def resolve_links(state: realize.LabState, pair: str | None, site: str | None) -> tuple[str, list[WanLink]]:
    """The WAN links named by --pair A:B or --site S, and a label for them."""
    topo = state.topo
    if (pair is None) == (site is None):
        raise GridsplitError("give either --pair SITE_A:SITE_B or --site SITE")
    sites = ", ".join(s.name for s in topo.sites)
    links = ", ".join(f"{w.a}:{w.b}" for w in topo.wans) or "none"
    if site is not None:
        if site not in {x.name for x in topo.sites}:
            raise GridsplitError(f"--site {site!r}: no site named {site!r} in this lab; sites: {sites}")
        found = [w for w in topo.wans if site in (w.a, w.b)]
        if not found:
            raise GridsplitError(f"site {site!r} has no WAN link in this lab; links: {links}")
        return f"site {site}", found
    parts = pair.split(":")
    if len(parts) != 2 or not all(parts):
        raise GridsplitError(f"--pair {pair!r}: give two sites as SITE_A:SITE_B (sites: {sites})")
    a, b = parts
    for s in (a, b):
        if s not in {x.name for x in topo.sites}:
            raise GridsplitError(f"--pair {pair!r}: no site named {s!r} in this lab; sites: {sites}")
    if a == b:
        raise GridsplitError(f"--pair {pair!r}: a site has no WAN link to itself; give two different sites ({sites})")
    w = next((w for w in topo.wans if {w.a, w.b} == {a, b}), None)
    if w is None:
        raise GridsplitError(f"--pair {pair!r}: no WAN link between {a} and {b}; links: {links}")
    return f"{a}:{b}", [w]


def check_seconds(seconds: float | None, what: str = "--seconds") -> None:
    if seconds is not None and not 0 < seconds <= MAX_SECONDS:
        raise GridsplitError(f"{what} {seconds:g}: give a duration in seconds, over 0 and at most {MAX_SECONDS}")


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------


def _read(names: LabNames) -> dict[str, Any] | None:
    """The state file's data, or None when no lab is up (retries a file caught mid-write)."""
    for _ in range(20):
        try:
            return json.loads(names.state_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            time.sleep(0.05)
    raise GridsplitError(f"the lab's state file {names.state_file} is unreadable; run `gridsplit lab down`")


def _write(names: LabNames, data: dict[str, Any]) -> None:
    tmp = names.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(names.state_file)


def active(names: LabNames) -> list[dict[str, Any]]:
    """The active faults, for `lab status`: each record with remaining_s and undo_alive."""
    data = _read(names) or {}
    now = time.time()
    out = []
    for f in data.get("faults", []):
        pid = f.get("undo_pid")
        out.append({**f, "remaining_s": None if f.get("ends_at") is None else round(max(f["ends_at"] - now, 0), 1),
                    "undo_alive": bool(pid and is_undoer(pid))})
    return out


def describe(f: dict[str, Any]) -> str:
    p = f["params"]
    what = {"blackout": "blackout", "loss": f"loss {p.get('percent', 0):g} %",
            "delay": f"delay +{p.get('add_ms', 0):g} ms each way",
            "kill-gateway": "gateway killed"}[f["kind"]]
    return f"fault {f['id']}: {what} on {f['target']}"


# ---------------------------------------------------------------------------
# applying and undoing the kernel objects
# ---------------------------------------------------------------------------


def _blackout(state: realize.LabState, fid: int, links: list[WanLink], objs: list[dict]) -> None:
    per_router: dict[str, list[str]] = {}
    for w in links:
        for s in (w.a, w.b):
            for net in (str(state.topo.site(w.peer(s)).subnet), str(w.subnet)):
                if net not in per_router.setdefault(s, []):
                    per_router[s].append(net)
    for s, nets in per_router.items():
        ns, n = state.names.router_ns(s), FAULT_BASE + fid
        objs.append({"type": "blackhole", "ns": ns, "pref": n, "table": n})
        ip_batch(ns, [f"route add blackhole {net} table {n}" for net in nets] + [f"rule add pref {n} lookup {n}"])


def loss_bytecode(percent: float) -> str:
    """Classic BPF for cls_bpf in direct-action mode: TC_ACT_SHOT (2) when the
    kernel's random u32 (ancillary load SKF_AD_RANDOM) is under percent/100 of 2^32,
    TC_ACT_UNSPEC (-1: not ours) otherwise."""
    if percent >= 100:
        return "1,6 0 0 2"
    threshold = int(round(percent / 100 * 2 ** 32))
    ld_rand = 0xFFFFF000 + 56  # SKF_AD_OFF + SKF_AD_RANDOM
    # ld rand; jge #threshold -> ret -1, else -> ret 2
    return f"4,32 0 0 {ld_rand},53 0 1 {threshold},6 0 0 {2 ** 32 - 1},6 0 0 2"


def _loss(state: realize.LabState, fid: int, links: list[WanLink], percent: float, objs: list[dict]) -> None:
    code = loss_bytecode(percent)
    for w in links:
        for s in (w.a, w.b):
            ns, dev, n = state.names.router_ns(s), N.rt_wan_if(w.peer(s)), FAULT_BASE + fid
            if "clsact" not in run(["tc", "-n", ns, "qdisc", "show", "dev", dev]).stdout:
                tc_batch(ns, [f"qdisc add dev {dev} clsact"])
            objs.append({"type": "drop-filter", "ns": ns, "dev": dev, "pref": n})
            run(["tc", "-n", ns, "filter", "add", "dev", dev, "egress", "pref", str(n), "protocol", "all",
                 "bpf", "bytecode", code, "da"])


def _delay(state: realize.LabState, objs: list[dict]) -> None:
    if not json.loads((state.names.state_dir / "wanem.json").read_text()).get("control_path"):
        raise GridsplitError("this lab's delay line has no run-time control (started by an older gridsplit); "
                             "restart the lab: `gridsplit lab down && gridsplit lab up`")
    objs.append({"type": "delay"})
    _control(state, state.data)


def _control(state: realize.LabState, data: dict[str, Any]) -> None:
    """Write the delay line's control file from the active delay faults, have it
    re-read it, and wait until its report shows the new delays."""
    path = json.loads((state.names.state_dir / "wanem.json").read_text())["control_path"]
    extra: dict[str, list[int]] = {w.name: [0, 0] for w in state.topo.wans}
    for f in data.get("faults", []):
        if f["kind"] == "delay":
            for name in f["params"]["links"]:
                us = round(f["params"]["add_ms"] * 1000)
                extra[name][0] += us
                extra[name][1] += us
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps({"links": [{"name": k, "add_delay_us_ab": v[0], "add_delay_us_ba": v[1]}
                                         for k, v in extra.items() if v != [0, 0]]}))
    tmp.replace(path)
    pid = state.wanem_pid
    if pid is None or not Path(f"/proc/{pid}").exists():
        raise GridsplitError(f"the delay line (pid {pid}) is not running; see {state.names.state_dir / 'wanem.log'}")
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            links = state.wanem_stats().get("links", [])
            if all(x.get("extra_delay_us") == extra[x["name"]][x["dir"] == "ba"] for x in links if x["name"] in extra):
                return
        except GridsplitError:
            pass
        time.sleep(0.05)
    tail = (state.names.state_dir / "wanem.log").read_text().strip().splitlines()
    raise GridsplitError(f"the delay line did not take the new delays within 5 s: {tail[-1] if tail else 'no log'}")


def _gateway_pid_alive(names: LabNames, label: str, pid: int | None) -> bool:
    """Whether `pid` is the lab's gridsplitd with label `label`: by its command line,
    which names that gateway's config (a reused PID is not taken for it)."""
    cmd = b""
    for _ in range(5):  # empty for a moment while the process execs (ip netns exec, chrt, gridsplitd)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
        except OSError:
            return False
        if cmd:
            break
        time.sleep(0.01)
    return str(names.state_dir / f"gw-{label}.toml").encode() in cmd.split(b"\0") and not zombie(pid)


def _kill_gateway(state: realize.LabState, label: str, objs: list[dict], check_only: bool = False) -> int | None:
    """SIGKILL one gateway's gridsplitd (by label: gateway_label_of); `check_only`: only refuse what cannot be killed."""
    pid = state.data["pids"].get(f"gw-{label}")
    if not _gateway_pid_alive(state.names, label, pid):
        raise GridsplitError(f"the gateway {G.host_of(label)} (pid {pid}) is not running; "
                             "`gridsplit lab fault clear` restarts it")
    if check_only:
        return None
    objs.append({"type": "gateway", "site": label, "killed_pid": pid})  # "site": the label (a site's name for its first)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _gateway_pid_alive(state.names, label, pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid


def _restart_gateway(names: LabNames, data: dict[str, Any], label: str) -> None:
    if _gateway_pid_alive(names, label, data["pids"].get(f"gw-{label}")):
        return  # already running (restarted by a bench, for one)
    pid = G.spawn_gateway(names, G.gateway_binary(data), label, data.get("gateway_rt_priority") or 0,
                                append=True)
    data["pids"][f"gw-{label}"] = pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our child: exited (and reaped)
            tail = (names.state_dir / f"gw-{label}.log").read_text().strip().splitlines()
            raise GridsplitError(f"the restarted gridsplitd on {G.host_of(label)} exited: "
                                 f"{tail[-1] if tail else 'no output'}")
        if G.gateway_status(names, label, quiet=True) is not None:
            return
        time.sleep(0.1)
    raise GridsplitError(f"the restarted gridsplitd on {G.host_of(label)} does not answer; "
                         f"see {names.state_dir}/gw-{label}.log")


def _remove(state: realize.LabState, data: dict[str, Any], obj: dict[str, Any], existing: set[str]) -> None:
    """Remove one object a fault made; already gone is fine."""
    t = obj["type"]
    if t in ("blackhole", "drop-filter") and obj["ns"] not in existing:
        return
    if t == "blackhole":
        ns, pref = obj["ns"], str(obj["pref"])
        if run(["ip", "-n", ns, "rule", "show", "pref", pref]).stdout.strip():
            run(["ip", "-n", ns, "rule", "del", "pref", pref])
        run(["ip", "-n", ns, "route", "flush", "table", str(obj["table"])], check=False)
        if run(["ip", "-n", ns, "route", "show", "table", str(obj["table"])]).stdout.strip():
            raise GridsplitError(f"blackhole routes of table {obj['table']} in {ns} could not be removed")
    elif t == "drop-filter":
        ns, dev = obj["ns"], obj["dev"]
        if run(["tc", "-n", ns, "filter", "show", "dev", dev, "egress", "pref", str(obj["pref"])]).stdout.strip():
            run(["tc", "-n", ns, "filter", "del", "dev", dev, "egress", "pref", str(obj["pref"])])
        if not run(["tc", "-n", ns, "filter", "show", "dev", dev, "egress"]).stdout.strip() and \
                "clsact" in run(["tc", "-n", ns, "qdisc", "show", "dev", dev]).stdout:
            run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "clsact"])
    elif t == "delay":
        if state.names.wan_ns in existing:
            _control(state, data)
    elif t == "gateway":
        if state.names.host_ns(G.host_of(obj["site"])) in existing:
            _restart_gateway(state.names, data, obj["site"])


def _undo_record(state: realize.LabState, data: dict[str, Any], f: dict[str, Any]) -> None:
    """Remove a fault's objects (the record must already be out of `data`)."""
    existing = set(list_netns())
    errors = []
    for obj in reversed(f["objects"]):
        try:
            _remove(state, data, obj, existing)
        except GridsplitError as e:
            errors.append(str(e))
    if errors:
        raise GridsplitError(f"fault {f['id']} could not be fully undone: {'; '.join(errors)}")


def undo(names: LabNames, fid: int) -> dict[str, Any] | None:
    """Undo fault `fid` now; its record, or None if it was not active (undone already, lab down)."""
    with realize._lock(names, wait=LOCK_WAIT):
        data = _read(names)
        if data is None:
            return None
        f = next((x for x in data.get("faults", []) if x["id"] == fid), None)
        if f is None:
            return None
        state = realize.load_state(names)
        data["faults"] = [x for x in data["faults"] if x["id"] != fid]
        state.data = data
        try:
            _undo_record(state, data, f)
        except GridsplitError:
            data["faults"].append({**f, "undo_failed": True})
            raise
        finally:
            _write(names, data)
    return f


# ---------------------------------------------------------------------------
# starting a fault
# ---------------------------------------------------------------------------


def start(names: LabNames, kind: str, target: str, params: dict[str, Any], seconds: float | None,
          apply: Callable[[realize.LabState, int, list[dict]], Any]) -> tuple[dict[str, Any], subprocess.Popen | None]:
    """Apply a fault, record it, and (when timed) start its undo process.

    The ending signals are blocked from before the fault exists until its undo
    process runs (which inherits the block), so an interrupt never leaves a fault
    without someone to undo it."""
    sysdeps.need_root("gridsplit lab fault")
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    try:
        with realize._lock(names, wait=5):
            state = realize.load_state(names)
            data = state.data
            fid = int(data.get("fault_seq", 0)) + 1
            data["fault_seq"] = fid
            now = time.time()
            rec = {"id": fid, "kind": kind, "target": target, "params": params,
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)), "started_at": round(now, 3),
                   "ends": None if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now + seconds)),
                   "ends_at": None if seconds is None else round(now + seconds, 3), "undo_pid": None, "objects": []}
            data.setdefault("faults", []).append(rec)
            try:
                apply(state, fid, rec["objects"])
            except BaseException as e:
                data["faults"].remove(rec)
                try:
                    _undo_record(state, data, rec)  # roll back what was made
                except GridsplitError as undo_error:
                    raise GridsplitError(f"{e}; and undoing what was applied failed: {undo_error} "
                                         "(`gridsplit lab down` removes everything)") from None
                finally:
                    _write(names, data)
                raise
            proc = None
            if seconds is not None:
                log = open(names.state_dir / f"fault-{fid}.log", "w")
                proc = subprocess.Popen([sys.executable, "-m", "gridsplit.lab.fault", str(fid), str(rec["ends_at"])],
                                        env={**os.environ, "GRIDSPLIT_LAB_PREFIX": names.prefix},
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
                log.close()
                rec["undo_pid"] = proc.pid
            _write(names, data)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return rec, proc


def wait(names: LabNames, rec: dict[str, Any], proc: subprocess.Popen) -> bool:
    """Stay with a fault until its undo process has undone it. Ctrl-C or SIGTERM
    has it undone at once; returns whether the fault was cut short."""
    interrupted = False

    def stop(signum, frame):
        raise KeyboardInterrupt

    prev = signal.signal(signal.SIGTERM, stop)
    try:
        try:
            while proc.poll() is None:
                time.sleep(0.1)
        except KeyboardInterrupt:
            interrupted = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait()
    finally:
        signal.signal(signal.SIGTERM, prev)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if proc.returncode != 0 and not names.state_file.exists():
        return interrupted  # `lab down` removed the fault with everything else
    if proc.returncode != 0:
        log = (names.state_dir / f"fault-{rec['id']}.log")
        tail = log.read_text().strip().splitlines() if log.exists() else []
        raise GridsplitError(f"fault {rec['id']} was not undone: {tail[-1] if tail else f'its undo process exited {proc.returncode}'}"
                             "; `gridsplit lab fault clear` retries, `gridsplit lab down` removes everything")
    return interrupted


def clear(names: LabNames) -> list[dict[str, Any]]:
    """Undo every active fault now (timed ones through their undo process)."""
    sysdeps.need_root("gridsplit lab fault clear")
    if _read(names) is None:
        realize.load_state(names)  # says no lab is up
    done = []
    for f in active(names):
        if f["undo_alive"]:
            os.kill(f["undo_pid"], signal.SIGTERM)
            deadline = time.monotonic() + LOCK_WAIT + 15
            while is_undoer(f["undo_pid"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        if undo(names, f["id"]) is not None or f["undo_alive"]:
            done.append(f)
    return done


# ---------------------------------------------------------------------------
# undo processes
# ---------------------------------------------------------------------------


def _undo_main(argv: list[str]) -> int:
    """The undo process: sleep until the fault's end (or an ending signal), then undo it.

    Started with the ending signals blocked (see start), so they are taken here,
    by sigtimedwait, and none can cut an undo short."""
    signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    fid, ends_at = int(argv[0]), float(argv[1])
    names = LabNames.from_env()
    while (left := ends_at - time.time()) > 0:
        got = signal.sigtimedwait(ENDING, left)
        if got is not None:
            print(f"{time.strftime('%H:%M:%S')} signal {got.si_signo}: undoing fault {fid} now", flush=True)
            break
    try:
        f = undo(names, fid)
    except GridsplitError as e:
        print(f"gridsplit: error: {e}", flush=True)
        return 2
    print(f"{time.strftime('%H:%M:%S')} fault {fid} {'undone' if f else 'was no longer active'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_undo_main(sys.argv[1:]))
