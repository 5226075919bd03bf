"""What the live view shows (``analyze_logs --follow``): one frozen ``LiveSnapshot`` per refresh.

``run.live_state.LiveState`` fills these from the records the tail reads and the batch analysis of
each session's recent window (``WindowFigures``, from ``analysis.window.analyze_window``); the
renderers of ``report/live_view.py`` read them (a terminal view, or one JSON object per refresh).
``to_dict()`` is their serializer: the fields below, by name, ``None`` where a figure is not known.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from logkit.analysis.results.findings import Finding
from logkit.analysis.results.frames import ArrivalRow, StepRow
from logkit.analysis.results.values import plain
from logkit.schema.vocab import AlertState, Status


def _to_dict(obj) -> dict:
    return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


@dataclass(frozen=True)
class LiveRank:
    """One rank of a session, over its recent window of steps (``live.WINDOW_STEPS``).

    ``status``: running, completed, failed, interrupted, or ``lost`` (the rank wrote no
    ``session_end`` and stayed silent after the others ended); ``reason``: how a rank that did not
    complete ended (its session_end's reason, else its last error record's message); ``idle_s``:
    seconds since its stream last grew."""

    rank: int
    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    samples_per_s: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    data_share: float | None = None
    sync_share: float | None = None
    window_steps: int = 0
    idle_s: float | None = None
    status: str = Status.RUNNING
    reason: str | None = None

    def to_dict(self) -> dict:
        return _to_dict(self)


@dataclass(frozen=True)
class Spread:
    """A figure across the ranks that have it: its minimum, median and maximum."""

    min: float | None = None
    median: float | None = None
    max: float | None = None

    def to_dict(self) -> dict:
        return _to_dict(self)


@dataclass(frozen=True)
class RankSummary:
    """A session of many ranks (``live.SUMMARY_RANKS`` and more) in a few lines: spreads across ranks,
    the slowest ranks by their window's median step time (slowest first), the ranks furthest behind
    by step, and how many ranks are in each status."""

    ranks: int
    step: Spread
    samples_per_s: Spread
    step_p50_s: Spread
    step_p95_s: Spread
    slowest: tuple[tuple[int, float], ...]
    behind: tuple[tuple[int, int], ...]
    statuses: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict:
        out = _to_dict(self)
        out["slowest"] = [{"rank": r, "step_p50_s": t} for r, t in self.slowest]
        out["behind"] = [{"rank": r, "step": s} for r, s in self.behind]
        out["statuses"] = dict(self.statuses)
        return out


@dataclass(frozen=True)
class WindowFigures:
    """The batch analysis of a session's recent window: each rank's row of the performance table, the
    stragglers table, ``straggler`` (the rank named, else the rank nearest to one: a row of the
    stragglers table), each rank's largest gradient-sync share of step time (``sync_shares``), the
    session's (``sync_share``: the exposed share where the phases were timed, as the scaling flags
    take it) and the findings ``--diagnose`` gives over the window (most severe first)."""

    performance: tuple[StepRow, ...] = ()
    stragglers: tuple[ArrivalRow, ...] = ()
    straggler: ArrivalRow | None = None
    sync_shares: dict = dataclasses.field(default_factory=dict)
    sync_share: float | None = None
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class LiveGpu:
    """A GPU's latest ``gpu_snapshot`` (interval means): utilization and memory."""

    host: str | None
    gpu: int
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    memory_pct: float | None = None

    def to_dict(self) -> dict:
        return _to_dict(self)


@dataclass(frozen=True)
class LiveEnd:
    """How a session ended: ``status`` completed, failed (a rank failed, or was lost) or
    interrupted; ``detail`` the sentence that says so (with the error where one was logged);
    ``ranks`` each rank's (rank, status, reason)."""

    status: str
    detail: str
    ranks: tuple[tuple[int, str, str | None], ...] = ()

    def to_dict(self) -> dict:
        return {"status": self.status, "detail": self.detail,
                "ranks": [{"rank": r, "status": s, "reason": why} for r, s, why in self.ranks]}


@dataclass(frozen=True)
class LiveAlert:
    """Something that should interrupt a person while the run trains (``analysis.alerts``): raised once
    when it starts, cleared once when it ends. ``kind``: an ``AlertKind``; ``rank``: the rank it is about
    (the stalled rank the others wait for, the straggler), null when it is the session's (or the rank is not
    known); ``since``: when it started (ISO 8601, UTC); ``evidence``: ``file:line`` of the records that
    say so; ``raised_at`` / ``cleared_at``: when the view raised and cleared it; ``cleared``: why it cleared."""

    kind: str
    session_id: str
    detail: str
    since: str
    raised_at: str
    rank: int | None = None
    evidence: tuple[str, ...] = ()
    state: str = AlertState.RAISED
    cleared_at: str | None = None
    cleared: str | None = None
    folder: str = "."

    def to_dict(self) -> dict:
        return _to_dict(self)

    def record(self) -> dict:
        """The alert as its NDJSON line says it, and as ``--alert-cmd`` reads it: ``{"alert": {...}}``."""
        return {"alert": self.to_dict()}


@dataclass(frozen=True)
class LiveSession:
    """A followed session. Session figures are its main (lowest) rank's window, as throughput is
    defined over rank 0's steps; ``sync_share`` the session's (``WindowFigures.sync_share``);
    ``step`` is the lowest step any rank reached (the job's progress) and ``eta_s`` the remaining
    steps at the slowest rank's mean step time. ``ranks``: every rank; ``summary``: set when the
    session has many ranks, for a view that cannot show a row per rank. ``straggler``: a row of the
    window's stragglers table (the rank named, else the nearest to one); ``findings``: the batch
    findings over the window, most severe first (``findings_total`` of them); ``alerts``: those
    raised, then those cleared in the last minute (``run.live_alerts.CLEARED_SHOWN_S``)."""

    session_id: str
    folder: str
    state: str = Status.RUNNING
    end: LiveEnd | None = None
    world_size: int | None = None
    mode: str | None = None
    model: str | None = None
    step: int | None = None
    max_steps: int | None = None
    eta_s: float | None = None
    samples_per_s: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    data_share: float | None = None
    sync_share: float | None = None
    idle_s: float | None = None
    ranks: tuple[LiveRank, ...] = ()
    summary: RankSummary | None = None
    straggler: ArrivalRow | None = None
    gpus: tuple[LiveGpu, ...] = ()
    findings: tuple[Finding, ...] = ()
    findings_total: int = 0
    unreadable_lines: int = 0
    alerts: tuple[LiveAlert, ...] = ()

    @property
    def ended(self) -> bool:
        return self.end is not None

    def to_dict(self) -> dict:
        return _to_dict(self)


@dataclass(frozen=True)
class LiveSnapshot:
    """Every followed session at one refresh. ``time``: the wall clock (ISO 8601); ``elapsed_s``:
    seconds since following began; ``all_ended``: every followed session has ended (and there is
    one); ``not_followed``: sessions found at the start that had already ended or fell silent
    long before; ``bytes_read``: bytes read from the streams so far; ``folder_missing``: the followed
    folder does not exist (yet). ``alert_events``: the alerts raised or cleared at this refresh (each
    said once: its own NDJSON line, not a key of the snapshot's); a session's ``alerts`` are those
    active, and those cleared in the last ``live_alerts.CLEARED_SHOWN_S``."""

    time: str
    elapsed_s: float
    sessions: tuple[LiveSession, ...] = ()
    all_ended: bool = False
    not_followed: tuple[str, ...] = ()
    bytes_read: int = 0
    folder_missing: bool = False
    alert_events: tuple[LiveAlert, ...] = ()

    def to_dict(self) -> dict:
        out = _to_dict(self)
        del out["alert_events"]
        return out
