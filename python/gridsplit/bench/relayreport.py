"""`gridsplit bench relay` results: per-chain summaries of the interleaved rounds (latency
percentiles, the hop each relay adds paired within a round, throughput and CPU per GB), the
terminal table and the Markdown write-up. The runs themselves are relay.py's."""

from __future__ import annotations

import statistics

from rich.table import Table

# The chains a run measures (relay.py starts them), the C relays among them that
# are the floor any relay pays, and the blocks each chain's round is cut into
# (relay.py's measure() interleaves them; the write-up names the count).
CHAINS = ("direct", "floor", "epoll", "gridsplitd", "haproxy")
FLOORS = ("floor", "epoll")
BLOCKS = 10

def paired_hop(run: dict, chain: str, base: str) -> float:
    """Median over a repeat's rounds of (chain − base) / 2, block against block of
    the same round; 0-dimensional when older results have no block medians."""
    a, b = (run["ping"][x].get("block_medians_us") or [run["ping"][x]["rtt_us"]["median"]] for x in (chain, base))
    return statistics.median((x - y) / 2 for x, y in zip(a, b))


def summarize(runs: list[dict]) -> dict:
    """Per-chain series over repeats, and their median/min/max."""

    def stats(xs: list[float]) -> dict:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "values": xs}

    out: dict = {}
    for c in [c for c in CHAINS if c in runs[0]["ping"]]:
        rtt = [r["ping"][c]["rtt_us"]["median"] for r in runs]
        p99 = [r["ping"][c]["rtt_us"]["p99"] for r in runs]
        gbps = [r["stream"][c]["gbps"] for r in runs]
        m = {"rtt_median_us": stats(rtt), "rtt_p99_us": stats(p99), "throughput_gbps": stats(gbps)}
        if c != "direct":
            # Two relay hops per chain; compare with the direct run of the same repeat.
            m["added_rtt_per_hop_us"] = stats(
                [(r["ping"][c]["rtt_us"]["median"] - r["ping"]["direct"]["rtt_us"]["median"]) / 2 for r in runs]
            )
            m["added_rtt_per_hop_paired_us"] = stats([paired_hop(r, c, "direct") for r in runs])
            m["added_p99_per_hop_us"] = stats(
                [(r["ping"][c]["rtt_us"]["p99"] - r["ping"]["direct"]["rtt_us"]["p99"]) / 2 for r in runs]
            )
            m["relay_cpu_s_per_gb"] = stats(
                [sum(r["stream"][c]["relay_cpu_s"].values()) / (r["stream"][c]["bytes"] / 1e9) for r in runs]
            )
            m["relay_cpu_us_per_round_trip"] = stats(
                [
                    sum(r["ping"][c]["relay_cpu_s"].values()) * 1e6
                    / (r["ping"][c]["count"] + r["ping"][c]["warmup"])
                    for r in runs
                ]
            )
        out[c] = m
    g, h = out["gridsplitd"], out["haproxy"]
    out["gridsplitd_minus_haproxy_per_hop_paired_us"] = stats([paired_hop(r, "gridsplitd", "haproxy") for r in runs])
    out["ratios_gridsplitd_over_haproxy"] = {
        k: (g[k]["median"] / h[k]["median"] if h[k]["median"] else None)
        for k in ("added_rtt_per_hop_us", "added_rtt_per_hop_paired_us", "added_p99_per_hop_us", "throughput_gbps", "relay_cpu_s_per_gb",
                  "relay_cpu_us_per_round_trip")
    }
    out["targets"] = {
        "added_rtt_per_hop_le_10us": g["added_rtt_per_hop_us"]["median"] <= 10.0,
        "added_rtt_per_hop_le_haproxy": g["added_rtt_per_hop_us"]["median"] <= h["added_rtt_per_hop_us"]["median"],
        "throughput_ge_haproxy": g["throughput_gbps"]["median"] >= h["throughput_gbps"]["median"],
        "cpu_per_gb_le_haproxy": g["relay_cpu_s_per_gb"]["median"] <= h["relay_cpu_s_per_gb"]["median"],
    }
    return out


# ------------------------------------------------------------------ reporting

ROWS = [
    ("rtt_median_us", "8 B ping-pong RTT, median (µs)", 2),
    ("rtt_p99_us", "8 B ping-pong RTT, p99 (µs)", 2),
    ("added_rtt_per_hop_us", "added RTT per relay hop, median (µs)", 2),
    ("added_rtt_per_hop_paired_us", "added RTT per relay hop, paired per block (µs)", 2),
    ("added_p99_per_hop_us", "added RTT per relay hop, p99 (µs)", 2),
    ("throughput_gbps", "one-stream throughput (Gb/s)", 2),
    ("relay_cpu_s_per_gb", "relay CPU, both relays (CPU-s per GB)", 3),
    ("relay_cpu_us_per_round_trip", "relay CPU, both relays (CPU-µs per round trip)", 1),
]


def cell(m: dict | None, digits: int) -> str:
    if m is None:
        return "—"
    return f"{m['median']:.{digits}f} ({m['min']:.{digits}f}–{m['max']:.{digits}f})"


def chains_in(summary: dict) -> list[str]:
    return [c for c in CHAINS if c in summary]


def table(summary: dict, repeat: int) -> Table:
    t = Table(title=f"relay benchmark: median (min–max) over {repeat} repeats")
    t.add_column("metric")
    for c in chains_in(summary):
        t.add_column(c, justify="right")
    t.add_column("gridsplitd / haproxy", justify="right")
    ratios = summary["ratios_gridsplitd_over_haproxy"]
    for key, label, digits in ROWS:
        r = ratios.get(key)
        t.add_row(label, *(cell(summary[c].get(key), digits) for c in chains_in(summary)),
                  f"{r:.2f}" if r is not None else "—")
    return t


def markdown(doc: dict) -> str:
    s, p, m = doc["summary"], doc["parameters"], doc["machine"]
    lines = [
        f"# Relay benchmark, {doc['date']} on {m['hostname']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}.  ",
        f"Versions: gridsplitd {doc['versions']['gridsplitd']}; {doc['versions']['haproxy']}.  ",
        f"Parameters: {p['repeat']} repeats (processes restarted and chain order rotated every repeat), "
        f"{p['ping_count']} round trips of {p['ping_size']} B per chain and repeat, in {BLOCKS} blocks "
        f"alternating between chains, "
        f"{p['seconds']} s streams of {p['stream_block']} B writes; gridsplitd strategy `{p['strategy']}`, "
        f"client {'with libgridsplit.so preloaded' if p['preload'] else 'speaking GSq1 itself'}; "
        f"HAProxy `mode tcp`, `nbthread 1`, splice {'on' if p['haproxy_splice'] else 'off'}; "
        f"gridsplitd {p['gridsplitd_args'] or 'default options'}. "
        f"Load average before/after: {m['loadavg_before']} / {m['loadavg_after']}.",
        "",
        "Each chain has two relay hops; added RTT per hop = (chain RTT − direct RTT) / 2 in the same "
        "repeat; the paired row takes that difference block by block (blocks of one round run back to "
        "back) and its median over the repeat's rounds, which cancels most of the machine's drift. "
        "Relay CPU is utime+stime of both relay processes during the stream, per GB carried. "
        "`floor` is two minimal blocking C relays (recv then send, one thread per direction), `epoll` "
        "two minimal single-thread epoll C relays (recv then send in the same wake-up): the cost of the "
        "extra sockets and wake-ups alone on this machine.",
        "",
        "| metric | " + " | ".join(chains_in(s)) + " | gridsplitd / haproxy |",
        "|---|" + "---:|" * (len(chains_in(s)) + 1),
    ]
    for key, label, digits in ROWS:
        r = s["ratios_gridsplitd_over_haproxy"].get(key)
        lines.append(
            f"| {label} | " + " | ".join(cell(s[c].get(key), digits) for c in chains_in(s))
            + f" | {f'{r:.2f}' if r is not None else '—'} |"
        )
    tg = s["targets"]
    d = s.get("gridsplitd_minus_haproxy_per_hop_paired_us")
    if d:
        lines += ["", f"gridsplitd − HAProxy per hop, paired per block: {cell(d, 2)} µs "
                      f"(negative: gridsplitd adds less; {sum(v < 0 for v in d['values'])} of "
                      f"{len(d['values'])} repeats)."]
    lines += [
        "",
        "Targets: added RTT per hop ≤ 10 µs: " + ("met" if tg["added_rtt_per_hop_le_10us"] else "**missed**")
        + "; ≤ HAProxy's: " + ("met" if tg["added_rtt_per_hop_le_haproxy"] else "**missed**")
        + "; throughput ≥ HAProxy's: " + ("met" if tg["throughput_ge_haproxy"] else "**missed**")
        + "; relay CPU per GB ≤ HAProxy's: " + ("met" if tg["cpu_per_gb_le_haproxy"] else "**missed**") + ".",
        "",
    ]
    floors = [c for c in FLOORS if c in s]
    if floors:
        best = min(floors, key=lambda c: s[c]["added_rtt_per_hop_us"]["median"])
        hop = s[best]["added_rtt_per_hop_us"]["median"]
        lines += [
            f"Floor: the cheapest relay measured (`{best}`) adds {hop:.2f} µs per hop"
            + (", so ≤ 10 µs per hop is below what any relay that sleeps between messages achieves on this "
               "machine in this run." if hop > 10 else "."),
            "",
        ]
    lines += [
        "Reproduce: `python3 -m gridsplit.bench.relay --repeat "
        f"{p['repeat']} --seconds {p['seconds']}` (raw per-repeat numbers in the JSON file beside this one).",
        "",
    ]
    return "\n".join(lines)
