"""Renderers of the live view (``analyze_logs --follow``): a terminal view drawn with rich, or one
JSON object per refresh (NDJSON) for scripts and dashboards. Both read a ``LiveSnapshot``
(``analysis/live_results.py``) and compute nothing beyond unit changes.

The terminal view shows, per session: its alerts first (a red or yellow line each while raised, a green
one for a minute once cleared), progress (step / max steps, ETA), samples/s, step-time
p50/p95, data and sync share of step time, GPU utilization and memory where sampled, the
straggler, a row per rank (``rank N``; a summary from ``live.SUMMARY_RANKS`` ranks on) and the
findings, newest first.
"""

from __future__ import annotations

import sys

import orjson
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from logkit.analysis.results.live import LiveAlert, LiveRank, LiveSession, LiveSnapshot, RankSummary, Spread
from logkit.report.format import fmt, pct
from logkit.schema.vocab import AlertKind, AlertState, Status

FINDINGS_SHOWN = 5  # findings a session shows in the terminal (the JSON has its last MAX_FINDINGS)
_STATUS_STYLE = {Status.RUNNING: "green", Status.COMPLETED: "bold green", Status.FAILED: "bold red",
                 Status.INTERRUPTED: "bold yellow", Status.LOST: "bold red"}
_SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "cyan"}
_ALERT_STYLE = {AlertKind.STALL: "bold white on red", AlertKind.NONFINITE: "bold white on red",
                AlertKind.SLOWDOWN: "bold black on yellow", AlertKind.STRAGGLER: "bold black on yellow"}


def duration(seconds) -> str:
    """A duration for a person: 42 s, 3m05s, 2h07m; "n/a" when unknown."""
    if seconds is None:
        return "n/a"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _seconds(value) -> str:
    return fmt(value, ".3f", " s")


def _step(step, max_steps) -> str:
    if step is None:
        return "-"
    return f"{step}/{max_steps}" if max_steps else str(step)


def _header(s: LiveSession) -> Text:
    text = Text()
    text.append(s.session_id, style="bold")
    if s.folder not in (".", "", s.session_id):
        text.append(f"  ({s.folder})", style="dim")
    ranks = f"{s.world_size} rank{'s' if s.world_size != 1 else ''}" if s.world_size else None
    facts = [x for x in (s.mode, ranks, s.model) if x]
    if facts:
        text.append("  " + " · ".join(facts))
    status = s.end.status if s.end else Status.RUNNING
    text.append(f"   {status}", style=_STATUS_STYLE.get(status, ""))
    if s.end is None and s.idle_s is not None:
        text.append(f" · last record {duration(s.idle_s)} ago", style="dim")
    return text


def _figures(s: LiveSession) -> Text:
    progress = _step(s.step, s.max_steps)
    if s.step is not None and s.max_steps:
        progress += f" ({s.step / s.max_steps:.0%})"
    parts = [f"step {progress}", f"ETA {duration(s.eta_s)}" if s.end is None else None,
             f"{fmt(s.samples_per_s, '.1f')} samples/s", f"step p50 {_seconds(s.step_p50_s)}",
             f"p95 {_seconds(s.step_p95_s)}", f"data {pct(s.data_share)}", f"sync {pct(s.sync_share)}"]
    return Text(" · ".join(p for p in parts if p))


def _gpus(s: LiveSession) -> Text | None:
    if not s.gpus:
        return None
    items = []
    for g in s.gpus:
        where = f"{g.host}:{g.gpu}" if g.host else f"GPU {g.gpu}"
        memory = (f"{g.memory_used_mb / 1e3:.1f}/{g.memory_total_mb / 1e3:.1f} GB"
                  if g.memory_used_mb is not None and g.memory_total_mb else None)
        mem_pct = fmt(g.memory_pct, ".0f", "%")
        items.append(f"{where} {fmt(g.utilization_pct, '.0f', '%')} util, memory "
                     + (f"{memory} ({mem_pct})" if memory else mem_pct))
    return Text("GPU  " + " · ".join(items))


def _straggler(s: LiveSession) -> Text | None:
    g = s.straggler
    if g is None:
        return None
    if g.last_arrival_share is not None:
        line = (f"rank {g.rank}: last to the gradient sync in {pct(g.last_arrival_share)} of the window's steps, "
                f"{_seconds(g.lateness_s)} late (p {fmt(g.p_value, '.2g')})")
    else:
        line = (f"rank {g.rank}: median step {_seconds(g.median_step_s)}, {fmt(g.vs_fastest, '.2f', 'x')} "
                f"the fastest rank's (p {fmt(g.p_value, '.2g')})")
    if g.is_straggler:
        cause = f"; cause: {g.cause}" if g.cause else ""
        return Text(f"straggler {line}{cause}", style="yellow")
    return Text(f"no straggler (nearest {line})", style="dim")


def rank_table(ranks: tuple[LiveRank, ...]) -> Table:
    """One row per rank, labelled ``rank N``."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in ("rank", "step", "loss", "samples/s", "step p50", "step p95", "data", "sync", "last record",
                 "status"):
        table.add_column(name, justify="left" if name in ("rank", "status") else "right")
    for r in ranks:
        status = r.status + (f": {r.reason}" if r.reason else "")
        table.add_row(f"rank {r.rank}", _step(r.step, r.max_steps), fmt(r.loss, ".4f"), fmt(r.samples_per_s, ".1f"),
                      _seconds(r.step_p50_s), _seconds(r.step_p95_s), pct(r.data_share), pct(r.sync_share),
                      duration(r.idle_s), Text(status, style=_STATUS_STYLE.get(r.status, "")))
    return table


def _spread_row(table: Table, name: str, sp: Spread, spec: str, unit: str = "") -> None:
    table.add_row(name, *(fmt(v, spec, unit) for v in (sp.min, sp.median, sp.max)))


def summary_table(summary: RankSummary) -> Group:
    """Many ranks in a few lines: min / median / max across ranks, the slowest ranks named."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  title=f"{summary.ranks} ranks: min / median / max across ranks", title_justify="left")
    for name in ("figure", "min", "median", "max"):
        table.add_column(name, justify="left" if name == "figure" else "right")
    _spread_row(table, "step", summary.step, ".0f")
    _spread_row(table, "samples/s", summary.samples_per_s, ".1f")
    _spread_row(table, "step p50", summary.step_p50_s, ".3f", " s")
    _spread_row(table, "step p95", summary.step_p95_s, ".3f", " s")
    slowest = ", ".join(f"rank {r} ({t:.3f} s)" for r, t in summary.slowest) or "n/a"
    behind = ", ".join(f"rank {r} (step {s})" for r, s in summary.behind) or "n/a"
    statuses = ", ".join(f"{n} {status}" for status, n in summary.statuses)
    return Group(table, Text(f"slowest ranks (median step time): {slowest}"),
                 Text(f"furthest behind: {behind}"), Text(f"ranks: {statuses}"))


def _findings(s: LiveSession) -> list[Text]:
    if not s.findings_total:
        return []
    out = [Text(f"findings ({s.findings_total}, most severe first):")]
    for f in s.findings[:FINDINGS_SHOWN]:
        line = Text("  ")
        line.append(f"{f.severity.value:<9}", style=_SEVERITY_STYLE.get(f.severity.value, ""))
        step = f.extra.get("step")
        where = " ".join(x for x in (f"rank {f.ranks[0]}" if f.ranks else "",
                                      f"step {step}" if step is not None else "") if x)
        line.append(f"{where:<18} {f.title}: {f.detail}")
        out.append(line)
    if s.findings_total > FINDINGS_SHOWN:
        out.append(Text(f"  ... and {s.findings_total - FINDINGS_SHOWN} more", style="dim"))
    return out


def _clock(iso: str | None) -> str:
    """hh:mm:ss of an ISO 8601 time (its own zone: the snapshot's and the emitter's are UTC)."""
    return iso[11:19] if iso and len(iso) >= 19 else "?"


def alert_line(a: LiveAlert) -> Text:
    """One alert: raised (red for a stall or NaN/Inf, yellow for a slowdown or a straggler), or cleared (green)."""
    about = f" · rank {a.rank}" if a.rank is not None else ""
    where = f"  [{a.evidence[0]}{f' +{len(a.evidence) - 1}' if len(a.evidence) > 1 else ''}]" if a.evidence else ""
    if a.state == AlertState.CLEARED:
        return Text(f"cleared {_clock(a.cleared_at)}: {a.kind}{about} (since {_clock(a.since)}): {a.cleared}",
                    style="green")
    line = Text()
    line.append(f" ALERT {a.kind}{about} · since {_clock(a.since)} ", style=_ALERT_STYLE.get(a.kind, "bold red"))
    line.append(f" {a.detail}{where}", style="red" if a.kind in (AlertKind.STALL, AlertKind.NONFINITE) else "yellow")
    return line


def session_view(s: LiveSession) -> Group:
    parts = [*(alert_line(a) for a in s.alerts), _header(s), _figures(s), _gpus(s), _straggler(s)]
    parts.append(summary_table(s.summary) if s.summary is not None else rank_table(s.ranks))
    parts.extend(_findings(s))
    if s.end is not None:
        parts.append(Text(f"ended: {s.end.detail}", style=_STATUS_STYLE.get(s.end.status, "")))
    if s.unreadable_lines:
        parts.append(Text(f"{s.unreadable_lines} lines were no record", style="dim"))
    return Group(*(p for p in parts if p is not None))


def snapshot_view(snap: LiveSnapshot, root: str) -> Group:
    """The whole terminal view of one refresh."""
    top = Text(f"analyze_logs --follow {root} · {snap.time[11:19]} UTC · Ctrl-C to stop", style="dim")
    if snap.folder_missing and not snap.sessions:
        return Group(top, Text(f"waiting for {root} to appear (it does not exist yet)"))
    if not snap.sessions:
        waiting = Text(f"waiting for a session to start under {root}")
        if snap.not_followed:
            waiting.append(f" ({len(snap.not_followed)} found there had ended and are not followed)", style="dim")
        return Group(top, waiting)
    blocks = [top]
    for s in snap.sessions:
        blocks += [Text(""), session_view(s)]
    return Group(*blocks)


def end_lines(snap: LiveSnapshot | None) -> list[str]:
    """How each followed session ended (or that it had not), one line each."""
    if snap is None or not snap.sessions:
        return ["no session was followed"]
    return [f"{s.session_id}: {s.end.detail}" if s.end else
            f"{s.session_id}: still running at step {_step(s.step, s.max_steps)}" if s.step is not None else
            f"{s.session_id}: still running, no step logged yet" for s in snap.sessions]


class _View:
    end_lines = staticmethod(end_lines)


class TerminalView(_View):
    """The rich view, redrawn in place at each ``update``."""

    def __init__(self, root: str, console: Console | None = None):
        self.root = root
        self.console = console or Console()
        self._live = Live(Text(""), console=self.console, auto_refresh=False, transient=False,
                          redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> TerminalView:
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        self._live.stop()

    def update(self, snap: LiveSnapshot) -> None:
        self._live.update(snapshot_view(snap, self.root), refresh=True)

    def say(self, lines: list[str]) -> None:
        for line in lines:
            self.console.print(line, highlight=False, markup=False)

    def warn(self, line: str) -> None:
        """A line on stderr: above the view when stderr is the view's terminal (so the view stays whole)."""
        if sys.stderr.isatty() and self.console.is_terminal:
            self.console.print(line, style="yellow", highlight=False, markup=False)
        else:
            print(line, file=sys.stderr, flush=True)


class NdjsonView(_View):
    """One JSON object per refresh on ``out`` (a binary stream); what is said goes to stderr."""

    def __init__(self, out=None, err=None):
        self.out = out or sys.stdout.buffer
        self.err = err or sys.stderr

    def __enter__(self) -> NdjsonView:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, snap: LiveSnapshot) -> None:
        """Each alert raised or cleared at this refresh (``{"alert": {...}}``), then the snapshot: a line each."""
        lines = [orjson.dumps(a.record()) for a in snap.alert_events]
        self.out.write(b"".join(x + b"\n" for x in (*lines, orjson.dumps(snap.to_dict()))))
        self.out.flush()

    def say(self, lines: list[str]) -> None:
        for line in lines:
            print(line, file=self.err, flush=True)

    def warn(self, line: str) -> None:
        self.say([line])
