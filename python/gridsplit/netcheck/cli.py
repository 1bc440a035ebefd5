"""`gridsplit netcheck`: measure site-to-site TCP, explain the wizard gap, say what to change."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click
from click.core import ParameterSource

from .. import sysdeps
from ..console import emit_json, err
from ..console import out as con
from ..errors import GridsplitError
from ..lab.names import LabNames
from ..lab.realize import load_state
from . import measure, render
from .diagnose import DEFAULT_THRESHOLDS


def _streams(spec: str) -> tuple[int, ...]:
    if spec.strip().lower() in ("", "none", "0"):
        return ()
    try:
        vals = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise GridsplitError(f"--streams {spec!r}: give stream counts separated by commas, e.g. 1,2,5,10 (or none)") from None
    if any(not 1 <= v <= 128 for v in vals):
        raise GridsplitError(f"--streams {spec!r}: each count must be 1-128")
    return vals


# The options that only shape a measurement (refused with --from).
MEASURING = ("pairs", "one_way", "resume", "count", "interval", "duration", "omit", "streams", "headroom",
             "congestion", "port", "iperf_args", "keep_raw")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lab", "use_lab", is_flag=True, help="Measure every site pair of the running lab ($GRIDSPLIT_LAB_PREFIX).")
@click.option("--hosts", "hosts_file", metavar="FILE", help="Measure real hosts over ssh, listed per site in a TOML file.")
@click.option("--from", "from_file", metavar="FILE", help="Measure nothing: show a saved report (and write its PNGs).")
@click.option("--pairs", metavar="A:B,...", help="Only these site pairs (both directions unless --one-way).")
@click.option("--one-way", is_flag=True, help="With --pairs: only A -> B.")
@click.option("--out", "-o", metavar="FILE", help="Write the JSON report here (rewritten after every pair).")
@click.option("--resume", metavar="FILE", help="Continue a report: measured cells are kept, the rest measured (written back to FILE unless --out).")
@click.option("--count", type=click.IntRange(3, 1000), default=20, show_default=True, help="Pings per pair.")
@click.option("--interval", type=click.FloatRange(0.01, 5), default=None, help="Seconds between pings [lab 0.05, ssh 0.2].")
@click.option("--duration", type=click.FloatRange(1, 600), default=5.0, show_default=True, help="Seconds per iperf3 test (after --omit).")
@click.option("--omit", type=click.IntRange(0, 30), default=1, show_default=True, help="Seconds of slow start left out.")
@click.option("--streams", default="1,2,5,10", show_default=True, help="Parallel-flow counts (tuned buffers), or none.")
@click.option("--headroom", type=click.FloatRange(1, 16), default=2.0, show_default=True, help="Buffer = headroom × BDP, rounded up to a power of two.")
@click.option("--ok", "ok", type=click.FloatRange(0, 1), default=DEFAULT_THRESHOLDS["ok"], show_default=True,
              help="Grid and verdict: OK at or above this fraction of the achievable goodput.")
@click.option("--critical", type=click.FloatRange(0, 1), default=DEFAULT_THRESHOLDS["critical"], show_default=True,
              help="Grid: critical below this fraction (warning in between).")
@click.option("--congestion", "-C", type=click.Choice(["cubic", "reno", "bbr"]), default=None,
              help="Congestion control for the tests (default: each host's own).")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="iperf3 port [5201, or the hosts file's].")
@click.option("--png", metavar="DIR", help="Write heatmaps and the grid as PNG files into DIR.")
@click.option("--reference", metavar="DIR", help="Guillier et al. 2006's g5k_*.csv tables, drawn beside ours in the heatmaps.")
@click.option("--iperf-args", default="", metavar="ARGS", help="Extra iperf3 client arguments, e.g. \"-l 64K -Z\".")
@click.option("--keep-raw", metavar="DIR", help="Also keep every raw iperf3 JSON (with its context) in DIR.")
@click.option("--details", type=int, default=8, show_default=True, help="How many per-flow diagnoses to print.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report instead of tables.")
def netcheck(use_lab, hosts_file, from_file, pairs, one_way, out, resume, count, interval, duration, omit, streams,
             headroom, ok, critical, congestion, port, png, reference, iperf_args, keep_raw, details, as_json) -> None:
    """Site-to-site TCP diagnosis: RTT and throughput matrices, parallel flows, the wizard gap, tuning advice.

    \b
    For every ordered site pair: RTT (ping), one TCP flow with the hosts' own
    settings, one with buffers sized to the measured BDP, and parallel flows;
    each cell gets a verdict (window-, loss-, host-limited, OK) and the
    sysctl lines that fix it. Examples:
      gridsplit netcheck --lab --out nc.json --png nc/
      gridsplit netcheck --hosts sites.toml --pairs rennes:nancy --streams none
      gridsplit netcheck --resume nc.json
      gridsplit netcheck --from nc.json --png nc/ --reference ../shared/reference
    """

    modes = [m for m, on in (("--lab", use_lab), ("--hosts", hosts_file), ("--from", from_file)) if on]
    if len(modes) > 1:
        raise GridsplitError(f"{' and '.join(modes)} exclude each other; pick one target")
    if from_file:
        # A saved report is shown as it is: an option that only shapes a measurement would be ignored.
        ctx = click.get_current_context()
        given = [f"--{n.replace('_', '-')}" for n in MEASURING if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
        if given:
            raise GridsplitError(f"{', '.join(given)}: --from shows a saved report and measures nothing; leave "
                                 f"{'them' if len(given) > 1 else 'it'} out, or measure again with --lab or --hosts")
    if critical > ok:
        raise GridsplitError(f"--critical {critical} is above --ok {ok}; critical must be the lower threshold")
    ref = render.read_reference(reference) if reference else None
    if reference and not ref:
        raise GridsplitError(f"--reference {reference}: no g5k_*.csv tables there (e.g. ../shared/reference)")

    old = None
    if resume:
        old = measure.load_report(resume)
        out = out or resume
    if from_file:
        # Saved measurements, judged by today's rules and these thresholds.
        report = measure.rediagnose(measure.load_report(from_file), {"ok": ok, "critical": critical})
        if out:
            Path(out).write_text(json.dumps(report, indent=1, default=str))
    else:
        if not modes:
            if old is None:
                raise GridsplitError("nothing to measure: give --lab, --hosts FILE, --resume FILE or --from FILE")
            use_lab, hosts_file = (True, None) if old["mode"] == "lab" else (False, old["target"].get("hosts_file"))
        settings = measure.Settings(count=count, duration=duration, omit=omit, streams=_streams(streams),
                                    headroom=headroom, thresholds={"ok": ok, "critical": critical},
                                    congestion=congestion, keep_raw=Path(keep_raw) if keep_raw else None,
                                    iperf_args=tuple(shlex.split(iperf_args)))
        if use_lab:
            sysdeps.need_root("gridsplit netcheck --lab")
            sysdeps.need_tool("iperf3")
            target = measure.lab_target(load_state(LabNames.from_env()))
            settings.interval = interval or 0.05
            settings.port = port or 5201
        else:
            target, file_port = measure.load_hosts(hosts_file)
            settings.interval = interval or 0.2
            settings.port = port or file_port or 5201
        if old is not None and old.get("mode") != target.mode:
            raise GridsplitError(f"--resume {resume}: that report measured {old.get('mode')}, not {target.mode}")
        outp = Path(out) if out else None
        if outp is not None and outp.parent and not outp.parent.exists():
            raise GridsplitError(f"--out {out}: directory {outp.parent} does not exist")
        session = measure.Session(target, settings, old, outp,
                                  progress=(lambda m: None) if as_json else (lambda m: err.print(f"[dim]·[/dim] {m}")))
        todo = session.pairs(measure.parse_pairs(pairs) if pairs else None, one_way)
        skip = sum(1 for p in todo if p in session.done)
        if not as_json:
            err.print(f"netcheck: {len(todo)} site pair(s), {skip} already measured; "
                      f"{settings.duration:g} s per test, streams {', '.join(map(str, settings.streams)) or 'none'}")
        def on_cell(i: int, n: int, c: dict) -> None:
            if not as_json:
                err.print(f"[bold]{i + 1}/{n}[/bold] {c['src_site']} → {c['dst_site']}: {c['status']}"
                          + (f" ({c['reason']})" if c.get("reason") else ""))
        report = session.run(todo, on_cell=on_cell)
    if png:
        d = Path(png)
        d.mkdir(parents=True, exist_ok=True)
        paths = [render.heatmaps(report, d / "netcheck-heatmaps.png", ref), render.grid_png(report, d / "netcheck-grid.png")]
        if not as_json:
            err.print("PNG: " + ", ".join(str(p) for p in paths))
    if as_json:
        emit_json(report)
        return
    render.render(report, con, details=details)
    if out:
        err.print(f"report: {out}")
