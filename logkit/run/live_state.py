"""The state of the sessions being written, kept up to date record by record, and the live view's
snapshot made of it at each refresh (``analyze_logs --follow``).

State is bounded: per rank the records of its last ``WINDOW_STEPS`` steps (the step records and the
communication and step-phase records of those steps), its start and end records and its last
``MAX_EVENTS`` finding records (checks, NaN/Inf, stalls, errors); per session the latest GPU reading
per device. So memory and the cost of a refresh stay flat however long the run.

Every figure and finding is the batch analysis' (``analysis.window.analyze_window``) of a session
made of those records (``ingest.load.session_of_records``), judged as of now as ``analyze_logs`` would
judge it (``ingest.meta.liveness``): the same kernels, over the window. Recomputed when the session's
records changed, as often as its cost allows: the analysis of a session takes at most
``ANALYSIS_SHARE`` of the follower's time (a refresh in between shows the last figures: every refresh
for a few ranks, every 2-3 s for eight), and at once when every rank has ended.
What the live view adds: each rank's latest step and loss, how each rank ended (a session has ended
when every rank 0 .. world_size - 1 wrote its ``session_end``, or when one did and every other one
has written nothing for ``SILENT_END_S``: those are ``lost``), the ETA ((max steps - the lowest step
any rank reached) x the slowest rank's mean step time over the window), the latest GPU readings, and
the alerts (``run.live_alerts``: each rank's progress, when its step last advanced on the follower's
clock, handed to the rules of ``analysis.alerts`` at each snapshot).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from logkit.analysis.alerts import AlertBook, recovered
from logkit.analysis.results.live import LiveGpu, LiveRank, LiveSession, LiveSnapshot, RankSummary, Spread
from logkit.analysis.window import WindowFigures, analyze_window
from logkit.ingest.discover import SessionSource
from logkit.ingest.load import session_of_records
from logkit.ingest.meta import liveness
from logkit.run.live_alerts import session_alerts
from logkit.run.live_end import LOST, RUNNING, end_of, statuses
from logkit.schema.findings import NONFINITE_KINDS
from logkit.schema.records import (
    ANOMALY,
    COMMON,
    COMMUNICATION,
    ERROR,
    GPU_DEVICE,
    GPU_SNAPSHOT,
    NAN_DETECTED,
    RESOURCE_WARNING,
    SESSION_END,
    SESSION_START,
    STALL,
    STEP_PHASES,
    TRAINING_STEP,
)
from logkit.schema.vocab import Status

WINDOW_STEPS = 50  # the recent window every live figure is computed over
SUMMARY_RANKS = 64  # from this many ranks on, a session is summarised (no row per rank)
SLOWEST_NAMED = 3  # slowest ranks (and ranks furthest behind) a summary names
MAX_EVENTS = 200  # finding records a rank keeps (the findings of a long run's last ones)
ANALYSIS_SHARE = 0.04  # analysing a session's window takes at most this share of the follower's time
STALE_START_S = 600.0  # at the start, a session not ended whose streams are all older is not followed
__all__ = ["LiveState", "over_before_start", "WINDOW_STEPS", "SUMMARY_RANKS", "LOST", "RUNNING"]

_COMMON = {f.name: f for f in COMMON}
TYPE, MESSAGE, STEP, WORLD_SIZE = _COMMON["type"], _COMMON["message"], _COMMON["step"], _COMMON["world_size"]
TIMESTAMP = _COMMON["timestamp"]
NONFINITE_WORDS = frozenset(k.value for k in NONFINITE_KINDS)
_BY_STEP = (COMMUNICATION.type, STEP_PHASES.type)  # records kept while their step is in the window
_EVENTS = (ANOMALY.type, RESOURCE_WARNING.type, NAN_DETECTED.type, STALL.type, ERROR.type)


@dataclass
class _Rank:
    """One rank's rolling state (internal): its latest step, how it ended, and its window's records."""

    rank: int
    path: Path
    last_seen: float
    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    advanced_at: float | None = None  # when its step last advanced, on the follower's clock (first seen: none yet)
    finite_step: int | None = None  # its last step that logged a finite loss
    nonfinite: tuple | None = None  # (step, kind, timestamp, file:line) of its first NaN/Inf record since then
    position: tuple | None = None  # ((step, phase), file:line) of its last stall record
    step_times: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))  # of the step records
    status: str = RUNNING
    reason: str | None = None
    error: str | None = None
    start: list = field(default_factory=list)  # (line, record) of session_start, and the stream's first record
    end: list = field(default_factory=list)  # (line, record) of session_end
    steps: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))  # (line, record) of step records
    by_step: dict = field(default_factory=dict)  # step -> [(line, record)] of its comm and phase records
    events: deque = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))

    def __post_init__(self) -> None:
        if self.advanced_at is None:  # no step yet: still since it was first seen
            self.advanced_at = self.last_seen

    def add(self, number: int, record: dict) -> None:
        kind = TYPE.read(record)
        if not self.start:
            self.start.append((number, record))  # the stream's first record says what the session is
        if kind == TRAINING_STEP.type:
            self._step(number, record)
        elif kind in _BY_STEP:
            step = STEP.read(record)
            if step is not None and (self.step is None or step > self.step - WINDOW_STEPS):
                self.by_step.setdefault(step, []).append((number, record))
        elif kind == SESSION_START.type:
            self.start.append((number, record))
            self.max_steps = SESSION_START["max_steps"].read(record) or self.max_steps
        elif kind == SESSION_END.type:
            self.end = [(number, record)]
            self.status = SESSION_END["status"].read(record) or Status.FAILED
            self.reason = SESSION_END["reason"].read(record) or self.error
        if kind in _EVENTS:
            self.events.append((number, record))
            if kind == ERROR.type:
                self.error = MESSAGE.read(record) or ERROR["exception_type"].read(record)
            elif kind in (ANOMALY.type, NAN_DETECTED.type):
                self._nonfinite(number, record)
            elif kind == STALL.type:
                self.position = ((STEP.read(record), STALL["phase"].read(record)), f"{self.path.name}:{number}")

    def _nonfinite(self, number: int, record: dict) -> None:
        subkind = (ANOMALY if TYPE.read(record) == ANOMALY.type else NAN_DETECTED)["subkind"].read(record)
        if subkind in NONFINITE_WORDS and recovered(self.nonfinite, self.finite_step):
            self.nonfinite = (STEP.read(record), subkind, TIMESTAMP.read(record), f"{self.path.name}:{number}")

    def _step(self, number: int, record: dict) -> None:
        step = TRAINING_STEP["step"].read(record)
        if step is None or (self.step is not None and step <= self.step):
            return  # a step logged again (a callback registered twice) counts once
        self.step = step
        self.max_steps = TRAINING_STEP["max_steps"].read(record) or self.max_steps
        loss = TRAINING_STEP["loss"].read(record)
        self.loss = loss if loss is not None else self.loss
        if loss is not None and math.isfinite(loss):
            self.finite_step = step
        self.steps.append((number, record))
        self.step_times.append(TRAINING_STEP["step_time_s"].read(record) or float("nan"))
        oldest = TRAINING_STEP["step"].read(self.steps[0][1])
        for old in [s for s in self.by_step if s < oldest]:
            del self.by_step[old]

    def records(self) -> list[tuple[int, dict]]:
        """The window's records in line order (the first record once)."""
        kept = {n: r for n, r in [*self.start, *self.steps, *self.events, *self.end]}
        for rows in self.by_step.values():
            kept.update(rows)
        return sorted(kept.items(), key=lambda nr: nr[0])


@dataclass
class _Session:
    """One followed session's state (internal)."""

    session_id: str
    folder: str
    first_seen: float
    ranks: dict = field(default_factory=dict)  # rank -> _Rank
    world_size: int | None = None
    mode: str | None = None
    model: str | None = None
    gpus: dict = field(default_factory=dict)  # (host, gpu) -> LiveGpu
    unreadable: int = 0
    changed: bool = True
    analysed_at: float | None = None
    cost_s: float = 0.0  # what the last analysis of the window took
    window: WindowFigures = field(default_factory=WindowFigures)
    analyses: int = 0  # how many times the window was analysed
    alerts: AlertBook | None = None

    def analyse(self, now: float) -> None:
        """The window's batch analysis, when records came since the last one and the last analysis'
        cost is at most ``ANALYSIS_SHARE`` of the time since; at once when every rank has ended."""
        ended = bool(self.ranks) and all(state.end for state in self.ranks.values())
        recent = self.analysed_at is not None and now - self.analysed_at < self.cost_s / ANALYSIS_SHARE
        if not self.changed or (recent and not ended):
            return
        records = {r: state.records() for r, state in self.ranks.items() if state.start}
        if not records:
            return
        source = SessionSource(self.session_id, Path(self.folder),
                               rank_files={r: self.ranks[r].path for r in records})
        began = time.perf_counter()
        session = session_of_records(source, records)
        liveness(session, source)
        self.window, self.changed, self.analysed_at = analyze_window(session), False, now
        self.cost_s = time.perf_counter() - began
        self.analyses += 1


class LiveState:
    """The followed sessions, fed the tail's chunks (``feed``), read as a ``LiveSnapshot``."""

    def __init__(self, start: float):
        self.start = start
        self.sessions: dict[tuple[str, str], _Session] = {}
        self.not_followed: list[str] = []
        self.bytes_read = 0

    def add_stream(self, stream, now: float, age_s: float = 0.0) -> None:
        """A stream to follow (a ``tail.FollowedStream``), last written ``age_s`` ago: its session shows from now on."""
        session = self._session(stream, now)
        session.ranks.setdefault(stream.rank, _Rank(stream.rank, stream.path, now - max(age_s, 0.0)))

    def _session(self, stream, now: float) -> _Session:
        key = (stream.folder, stream.session_id)
        if key not in self.sessions:
            self.sessions[key] = _Session(stream.session_id, stream.folder, now)
        return self.sessions[key]

    def feed(self, chunk, now: float) -> None:
        """A ``tail.Chunk``: its records go to their rank (a reset stream starts its rank over)."""
        session = self._session(chunk.stream, now)
        rank = chunk.stream.rank
        if chunk.reset or rank not in session.ranks:
            session.ranks[rank] = _Rank(rank, chunk.stream.path, now)
        state = session.ranks[rank]
        state.last_seen = now - chunk.age_s  # when the stream was last written, on the follower's clock
        self.bytes_read += chunk.nbytes
        session.unreadable += len(chunk.notes)
        session.changed = session.changed or bool(chunk.records)
        step = state.step
        for number, record in chunk.records:
            state.add(number, record)
            kind = TYPE.read(record)
            if kind == GPU_SNAPSHOT.type:
                _gpus(session, record)
            elif kind == SESSION_START.type:
                start = SESSION_START.read(record)
                session.mode, session.model = start["mode"] or session.mode, start["model"] or session.model
            ws = WORLD_SIZE.read(record)
            if ws is not None and ws > 0:
                session.world_size = ws
        if state.step != step:
            state.advanced_at = state.last_seen

    def snapshot(self, now: float, wall: datetime | None = None, folder_missing: bool = False) -> LiveSnapshot:
        """The snapshot at ``now`` (the follower's clock; ``wall``: the wall time then), with the alerts
        raised and cleared since the last one."""
        wall = wall or datetime.now(timezone.utc)
        for s in self.sessions.values():
            s.analyse(now)
        events: list = []
        sessions = tuple(_live_session(s, now, wall, events) for _, s in sorted(self.sessions.items()))
        return LiveSnapshot(time=wall.isoformat(timespec="milliseconds"), elapsed_s=round(now - self.start, 3),
                            sessions=sessions, all_ended=bool(sessions) and all(s.ended for s in sessions),
                            not_followed=tuple(self.not_followed), bytes_read=self.bytes_read,
                            folder_missing=folder_missing, alert_events=tuple(events))


def _gpus(session: _Session, record: dict) -> None:
    host = GPU_SNAPSHOT["host"].read(record)
    for device in GPU_SNAPSHOT["devices"].read(record) or ():
        if not isinstance(device, dict):
            continue
        d = GPU_DEVICE.read(device)
        if d["gpu"] is None:
            continue
        used, total = d["memory_used_mb"], d["memory_total_mb"]
        pct = d["memory_usage_pct"]
        if pct is None and used is not None and total:
            pct = used / total * 100
        session.gpus[(host or "", d["gpu"])] = LiveGpu(host, d["gpu"], d["utilization_pct"], used, total, pct)


def _live_rank(session: _Session, rank: int, now: float, status: str) -> LiveRank:
    state = session.ranks.get(rank)
    if state is None:
        return LiveRank(rank, idle_s=round(now - session.first_seen, 3), status=status)
    row = next((r for r in session.window.performance if r.rank == rank), None)
    return LiveRank(rank=rank, step=state.step, max_steps=state.max_steps, loss=state.loss,
                    samples_per_s=row.samples_per_s if row else None, step_p50_s=row.step_p50_s if row else None,
                    step_p95_s=row.step_p95_s if row else None, data_share=row.data_share if row else None,
                    sync_share=session.window.sync_shares.get(rank), window_steps=row.steps if row else 0,
                    idle_s=round(now - state.last_seen, 3), status=status,
                    reason=state.reason if status not in (RUNNING, Status.COMPLETED) else None)


def _spread(values: list) -> Spread:
    known = [v for v in values if v is not None]
    if not known:
        return Spread()
    return Spread(float(min(known)), float(np.median(known)), float(max(known)))


def _summary(ranks: list[LiveRank]) -> RankSummary:
    timed = sorted(((r.step_p50_s, r.rank) for r in ranks if r.step_p50_s is not None), reverse=True)
    stepped = sorted((r.step, r.rank) for r in ranks if r.step is not None)
    counts: dict[str, int] = {}
    for r in ranks:
        counts[r.status] = counts.get(r.status, 0) + 1
    return RankSummary(len(ranks), _spread([r.step for r in ranks]), _spread([r.samples_per_s for r in ranks]),
                       _spread([r.step_p50_s for r in ranks]), _spread([r.step_p95_s for r in ranks]),
                       tuple((rank, t) for t, rank in timed[:SLOWEST_NAMED]),
                       tuple((rank, s) for s, rank in stepped[:SLOWEST_NAMED]), tuple(sorted(counts.items())))


def _eta(session: _Session, ranks: list[LiveRank]) -> tuple[int | None, int | None, float | None]:
    """(the lowest step any rank reached, max steps, ETA at the slowest rank's mean step time)."""
    steps = [r.step for r in ranks if r.step is not None]
    step = min(steps) if steps else None
    max_steps = max((r.max_steps for r in ranks if r.max_steps), default=None)
    slowest = max((r.step_mean_s for r in session.window.performance if r.step_mean_s is not None), default=None)
    eta = (max_steps - step) * slowest if None not in (max_steps, step, slowest) else None
    return step, max_steps, max(eta, 0.0) if eta is not None else None


def _live_session(session: _Session, now: float, wall: datetime, events: list) -> LiveSession:
    """The session's part of the snapshot; the alerts it raised and cleared are added to ``events``."""
    ranked = statuses(session.world_size, {r: (s.status, s.last_seen) for r, s in session.ranks.items()},
                      session.first_seen, now)
    ranks = [_live_rank(session, r, now, s) for r, s in ranked.items()]
    main = next((r for r in ranks if r.window_steps), ranks[0] if ranks else LiveRank(0))
    step, max_steps, eta = _eta(session, ranks)
    end = end_of(ranked, {r: (s.step, s.reason) for r, s in session.ranks.items()})
    alerts = session_alerts(session, ranked, now, wall, end is not None, events)
    idle = min((r.idle_s for r in ranks if r.idle_s is not None), default=None)
    w = session.window
    return LiveSession(
        session_id=session.session_id, folder=session.folder, state="ended" if end else RUNNING, end=end,
        world_size=session.world_size, mode=session.mode, model=session.model, step=step, max_steps=max_steps,
        eta_s=eta if end is None else None, samples_per_s=main.samples_per_s,
        step_p50_s=main.step_p50_s, step_p95_s=main.step_p95_s, data_share=main.data_share,
        sync_share=w.sync_share, idle_s=idle, ranks=tuple(ranks),
        summary=_summary(ranks) if len(ranks) >= SUMMARY_RANKS else None, straggler=w.straggler,
        gpus=tuple(v for _, v in sorted(session.gpus.items())), findings=w.findings,
        findings_total=len(w.findings), unreadable_lines=session.unreadable, alerts=alerts)


def over_before_start(last_records: dict[int, dict | None], newest_age_s: float) -> bool:
    """Whether a session found when following begins is already over: each of its ranks' last
    record is its ``session_end`` (all ``world_size`` ranks there), or it has not been written
    for ``STALE_START_S`` (a run killed long ago never ends)."""
    if newest_age_s >= STALE_START_S:
        return True
    if not last_records:
        return False
    sizes = [WORLD_SIZE.read(r) for r in last_records.values() if r is not None]
    world = max((s for s in sizes if s), default=len(last_records))
    ended = [r for r, rec in last_records.items() if rec is not None and TYPE.read(rec) == SESSION_END.type]
    return len(ended) == len(last_records) and len(last_records) >= world
