"""`gridsplit bench scale`'s analysis and report: per-step figures from a run's samples,
the summary over repeats against issue 21's targets, the console table and the Markdown
page (scale.py runs the gateways and gsload and calls these)."""

from __future__ import annotations

import statistics

from rich.table import Table

# Targets of issue 21 (per gateway).
TARGET_FLOWS = 10_000
TARGET_OPEN_RATE = 1_000.0


def analyse(run: dict) -> tuple[list[dict], dict]:
    """Per step: memory and descriptors per idle flow, open rate, latency, metrics."""
    ev, smp = run["events"], run["samples"]
    base = next(s for s in smp if s["phase"] == "baseline")
    lat = {e["idle_flows"]: e for e in ev if e["event"] == "latency"}
    opens = {e["step"]: e for e in ev if e["event"] == "open"}
    steps = []
    for s in smp:
        if s["phase"] != "idle":
            continue
        n = s["idle_flows"]
        o = opens[s["step"]]
        row = {"step": s["step"], "idle_flows": n, "opened": o["opened"], "requested": o["requested"],
               "failed": o["failed"], "failures": o["failures"], "open_seconds": o["seconds"],
               "open_rate_per_s": o["rate_per_s"], "open_rate_first_5000_per_s": o["rate_first_5000_per_s"],
               "open_latency_ms": o["open_latency_ms"], "gateways": {},
               "sockstat_tcp_mem_kb_per_flow": (s["sockstat"]["mem_kb"] - base["sockstat"]["mem_kb"]) / n if n else None}
        for g in ("alpha", "beta"):
            a, b = s["gateways"][g], base["gateways"][g]
            row["gateways"][g] = {
                "rss_kb": a["rss_kb"], "vmsize_kb": a["vmsize_kb"], "fds": a["fds"],
                "rss_bytes_per_flow": (a["rss_kb"] - b["rss_kb"]) * 1024 / n if n else None,
                "rss_anon_bytes_per_flow": ((a["rss_anon_kb"] - b["rss_anon_kb"]) * 1024 / n
                                            if n and a["rss_anon_kb"] is not None else None),
                "vmsize_bytes_per_flow": (a["vmsize_kb"] - b["vmsize_kb"]) * 1024 / n if n else None,
                "fds_per_flow": (a["fds"] - b["fds"]) / n if n else None,
                "flows_active": a["metrics"].get("flows_active"),
                "lan_accepted": a["metrics"].get("lan_accepted_total"),
                "flows_opened": a["metrics"].get("flows_opened_total"),
                "flows_reset": a["metrics"].get("flows_reset_total"),
                "cpu_s": a["cpu_s"],
                "idle_cpu_pct": (s.get("idle_cpu_pct") or {}).get(g),
            }
        l = lat.get(n)
        row["latency"] = ({"rtt_us": l["rtt_us"], "round_trips": l["round_trips"], "mismatched": l["mismatched"],
                           "errors": l["errors"], "active": l["active"], "msg_size": l["msg_size"]} if l else None)
        steps.append(row)
    closed = next((s for s in smp if s["phase"] == "closed"), None)
    done = next((e for e in ev if e["event"] == "done"), {})
    l0 = lat.get(0)
    total_opened = sum(e["opened"] for e in ev if e["event"] == "open") + next(
        (e["detail"]["opened"] for e in ev if e["event"] == "open_active"), 0)
    sink = done.get("sink", {})
    summary = {
        "baseline": {g: {k: base["gateways"][g][k] for k in ("rss_kb", "vmsize_kb", "fds")} for g in ("alpha", "beta")},
        "latency_idle0": {"rtt_us": l0["rtt_us"], "round_trips": l0["round_trips"], "mismatched": l0["mismatched"]} if l0 else None,
        "max_concurrent_flows": max((r["idle_flows"] for r in steps), default=0),
        "flows_opened": total_opened,
        "sink": sink,
        "all_checked": (sink.get("origin_ok") == total_opened and sink.get("origin_bad") == 0
                        and all(r["failed"] == 0 for r in steps)
                        and all((r["latency"] or {}).get("mismatched", 1) == 0 for r in steps)),
        "after_close": ({g: {"flows_active": closed["gateways"][g]["metrics"].get("flows_active"),
                             "rss_kb": closed["gateways"][g]["rss_kb"], "fds": closed["gateways"][g]["fds"]}
                         for g in ("alpha", "beta")} if closed else None),
        "stopped_early": any(e["event"] == "stopped" for e in ev),
    }
    return steps, summary


# ------------------------------------------------------------------ summary


def _stats(xs: list[float]) -> dict | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize(step_rows: list[dict], runs: list[dict]) -> dict:
    by_step: dict[int, list[dict]] = {}
    for r in step_rows:
        by_step.setdefault(r["step"], []).append(r)
    out_steps = []
    for step, rows in sorted(by_step.items()):
        d = {"step": step, "repeats": len(rows),
             "idle_flows": _stats([r["idle_flows"] for r in rows]),
             "open_rate_per_s": _stats([r["open_rate_per_s"] for r in rows]),
             "open_latency_p99_ms": _stats([r["open_latency_ms"]["p99"] for r in rows]),
             "rtt_p50_us": _stats([(r["latency"] or {}).get("rtt_us", {}).get("p50") for r in rows]),
             "rtt_p99_us": _stats([(r["latency"] or {}).get("rtt_us", {}).get("p99") for r in rows]),
             "rtt_p999_us": _stats([(r["latency"] or {}).get("rtt_us", {}).get("p999") for r in rows])}
        for g in ("alpha", "beta"):
            d[g] = {k: _stats([r["gateways"][g][k] for r in rows])
                    for k in ("rss_bytes_per_flow", "vmsize_bytes_per_flow", "fds_per_flow", "flows_active",
                              "idle_cpu_pct")}
        out_steps.append(d)
    idle0 = [r["summary"]["latency_idle0"] for r in runs if r["summary"].get("latency_idle0")]
    best = max((s["idle_flows"]["max"] for s in out_steps), default=0)
    rates = [r["open_rate_per_s"] for r in step_rows]
    return {
        "steps": out_steps,
        "idle0": {k: _stats([x["rtt_us"][k] for x in idle0]) for k in ("p50", "p99", "p999")},
        "max_concurrent_flows": best,
        "all_checked": all(r["summary"]["all_checked"] for r in runs),
        "targets": {
            f"concurrent flows >= {TARGET_FLOWS}": best >= TARGET_FLOWS,
            f"opens >= {TARGET_OPEN_RATE:.0f}/s": bool(rates) and statistics.median(rates) >= TARGET_OPEN_RATE,
        },
    }


def _fmt(s: dict | None, digits: int = 0, scale: float = 1.0) -> str:
    if not s:
        return "-"
    m, lo, hi = s["median"] * scale, s["min"] * scale, s["max"] * scale
    if s["n"] == 1 or lo == hi:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def table(summary: dict) -> Table:
    t = Table(title="gridsplit bench scale: medians (min–max) over repeats")
    for c in ("idle flows", "opens/s", "open p99 ms", "RSS B/flow A", "RSS B/flow B", "VmSize B/flow A",
              "fds/flow A", "idle CPU % A", "idle CPU % B", "RTT p50 µs", "p99 µs", "p99.9 µs"):
        t.add_column(c, justify="right")
    i0 = summary["idle0"]
    t.add_row("0", "-", "-", "-", "-", "-", "-", "-", "-", _fmt(i0["p50"], 1), _fmt(i0["p99"], 1), _fmt(i0["p999"], 1))
    for s in summary["steps"]:
        t.add_row(_fmt(s["idle_flows"]), _fmt(s["open_rate_per_s"]), _fmt(s["open_latency_p99_ms"], 1),
                  _fmt(s["alpha"]["rss_bytes_per_flow"]), _fmt(s["beta"]["rss_bytes_per_flow"]),
                  _fmt(s["alpha"]["vmsize_bytes_per_flow"]), _fmt(s["alpha"]["fds_per_flow"], 2),
                  _fmt(s["alpha"]["idle_cpu_pct"], 1), _fmt(s["beta"]["idle_cpu_pct"], 1),
                  _fmt(s["rtt_p50_us"], 1), _fmt(s["rtt_p99_us"], 1), _fmt(s["rtt_p999_us"], 1))
    return t


def markdown(meta: dict, summary: dict, probe: dict | None) -> str:
    r = meta["requested"]
    lines = [f"# gridsplit bench scale, {meta['machine']['date']}", "",
             f"Command: `{meta['command']}`", "",
             f"Machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores, "
             f"{meta['machine']['memory_gib']} GiB, Linux {meta['machine']['kernel']}, git {meta['machine']['git']}.", "",
             f"Limits: per_flow_buffer {meta['limits']['per_flow_buffer']}, total_buffer {meta['limits']['total_buffer']}; "
             f"RLIMIT_NOFILE {r['nofile']} for every process started; {r['repeat']} repeat(s).", "",
             "LAN controls: " + (", ".join(f"{k} {v}" for k, v in meta["lan"].items()) if any(meta.get("lan", {}).values())
                                 else "off") + ".", "",
             "| idle flows | opens/s | open p99 ms | RSS B/flow alpha | RSS B/flow beta | VmSize B/flow alpha | fds/flow alpha | idle CPU % alpha | idle CPU % beta | RTT p50 µs | p99 µs | p99.9 µs |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    i0 = summary["idle0"]
    lines.append(f"| 0 | | | | | | | | | {_fmt(i0['p50'], 1)} | {_fmt(i0['p99'], 1)} | {_fmt(i0['p999'], 1)} |")
    for s in summary["steps"]:
        lines.append(f"| {_fmt(s['idle_flows'])} | {_fmt(s['open_rate_per_s'])} | {_fmt(s['open_latency_p99_ms'], 1)} | "
                     f"{_fmt(s['alpha']['rss_bytes_per_flow'])} | {_fmt(s['beta']['rss_bytes_per_flow'])} | "
                     f"{_fmt(s['alpha']['vmsize_bytes_per_flow'])} | {_fmt(s['alpha']['fds_per_flow'], 2)} | "
                     f"{_fmt(s['alpha']['idle_cpu_pct'], 1)} | {_fmt(s['beta']['idle_cpu_pct'], 1)} | "
                     f"{_fmt(s['rtt_p50_us'], 1)} | {_fmt(s['rtt_p99_us'], 1)} | {_fmt(s['rtt_p999_us'], 1)} |")
    lines += ["", "Targets: " + "; ".join(f"{k}: {'met' if v else 'missed'}" for k, v in summary["targets"].items()),
              f"All flows opened and echoed correctly: {'yes' if summary['all_checked'] else 'NO'}."]
    if probe:
        lines += ["", f"Product-default [limits] probe: {probe['opened']} of {probe['requested']} flows admitted "
                      f"within {probe['open_timeout_ms']} ms each (failures: {probe['failures']})."]
    return "\n".join(lines) + "\n"
