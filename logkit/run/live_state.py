"""The state of the sessions being written, kept up to date record by record, and the figures of
the live view (``analyze_logs --follow``) computed from it at each refresh.

State is bounded: per rank its latest step and a window of its last ``WINDOW_STEPS`` steps, per
session its latest GPU reading per device and its last ``MAX_FINDINGS`` findings. So memory and
the cost of a refresh stay flat however long the run.

Definitions (every figure over a rank's window: its last ``WINDOW_STEPS`` timed steps):

- samples/s: sum of the window's batches / sum of its step times (``schema.values.per_second``,
  as ``throughput.throughput``); a step without a batch counts its logged samples/s x step time.
- step time p50 / p95: linear-interpolated percentiles of the window's step times (as pandas').
- data share: sum(data_time_s) / sum(step_time_s) over the window's steps that logged both
  (``performance.data_share``); sync share: the summed durations of the gradient-sync ops
  (``communication.SYNC_OPS``) of the window's steps / the summed step times of those steps.
- straggler: the rank whose window median step time is the highest, against the fastest rank's
  (a straggler when that ratio - 1 > ``STRAGGLER_SCORE``: only the score of
  ``kernels.straggler.detect``, which ``performance.stragglers`` applies in full, since the live
  state keeps no per-step samples of each rank yet).
- ETA: (max steps - the lowest step any rank reached) x the slowest rank's mean step time.
- a session has ended when every rank (0 .. world_size - 1) wrote its ``session_end``, or when
  one did and every other one has written nothing for ``SILENT_END_S`` (those are ``lost``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.results import Finding
from logkit.analysis.results.live import (
    LiveEnd,
    LiveGpu,
    LiveRank,
    LiveSession,
    LiveSnapshot,
    LiveStraggler,
    RankSummary,
    Spread,
)
from logkit.analysis.thresholds import STRAGGLER_SCORE
from logkit.schema.findings import EMITTER_KINDS, NONFINITE_KINDS, FindingKind
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
    TRAINING_STEP,
)
from logkit.schema.values import as_float, per_second
from logkit.schema.vocab import Status

WINDOW_STEPS = 50  # the recent window every live figure is computed over
SUMMARY_RANKS = 64  # from this many ranks on, a session is summarised (no row per rank)
SLOWEST_NAMED = 3  # slowest ranks (and ranks furthest behind) a summary names
MAX_FINDINGS = 20  # findings a session keeps (all are counted)
SILENT_END_S = 30.0  # one rank ended, the others silent this long: the session has ended
STALE_START_S = 600.0  # at the start, a session not ended whose streams are all older is not followed
LOST = Status.LOST
RUNNING = Status.RUNNING

_COMMON = {f.name: f for f in COMMON}
TYPE, MESSAGE, STEP, WORLD_SIZE = _COMMON["type"], _COMMON["message"], _COMMON["step"], _COMMON["world_size"]
_FINDING_SPECS = {ANOMALY.type: ANOMALY, RESOURCE_WARNING.type: RESOURCE_WARNING}


def quantile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted values, linearly interpolated (numpy's and pandas' default)."""
    if not ordered:
        return None
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _median(values: list[float]) -> float | None:
    return quantile(sorted(values), 0.5)


def _positive(value) -> float | None:
    x = as_float(value, finite=True)
    return x if x is not None and x > 0 else None


@dataclass
class _Rank:
    """One rank's rolling state (internal)."""

    rank: int
    last_seen: float
    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    world_size: int | None = None
    window: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))  # (step, time, data, batch)
    sync: OrderedDict = field(default_factory=OrderedDict)  # step -> summed sync seconds
    status: str = RUNNING
    reason: str | None = None
    error: str | None = None
    figures: tuple | None = None  # cached window figures, None when the window changed

    def add_step(self, record: dict) -> None:
        step = TRAINING_STEP["step"].read(record)
        if step is None or (self.step is not None and step <= self.step):
            return  # a step logged again (a callback registered twice) counts once
        self.step = step
        self.max_steps = TRAINING_STEP["max_steps"].read(record) or self.max_steps
        loss = TRAINING_STEP["loss"].read(record)
        self.loss = loss if loss is not None else self.loss
        t = _positive(TRAINING_STEP["step_time_s"].read(record))
        if t is None:
            return
        batch = _positive(TRAINING_STEP["total_batch_size"].read(record))
        if batch is None:
            rate = _positive(TRAINING_STEP["samples_per_s"].read(record))
            batch = rate * t if rate is not None else None
        data = as_float(TRAINING_STEP["data_time_s"].read(record), finite=True)
        self.window.append((step, t, data if data is not None and data >= 0 else None, batch))
        self.figures = None

    def add_sync(self, record: dict) -> None:
        if COMMUNICATION["op"].read(record) not in SYNC_OPS:
            return
        step = COMMUNICATION["step"].read(record)
        ms = as_float(COMMUNICATION["duration_ms"].read(record), finite=True)
        if step is None or ms is None or ms < 0:
            return
        self.sync[step] = self.sync.get(step, 0.0) + ms / 1000.0
        while len(self.sync) > 2 * WINDOW_STEPS:
            self.sync.popitem(last=False)
        self.figures = None

    def window_figures(self) -> tuple:
        """(samples/s, p50, p95, data share, sync share, mean step time, window steps)."""
        if self.figures is None:
            self.figures = _figures(list(self.window), self.sync)
        return self.figures


def _figures(window: list[tuple], sync: dict) -> tuple:
    if not window:
        return None, None, None, None, None, None, 0
    times = [t for _, t, _, _ in window]
    batches = [b for _, _, _, b in window]
    rate = per_second(sum(batches), sum(times)) if all(b is not None for b in batches) else None
    ordered = sorted(times)
    both = [(d, t) for _, t, d, _ in window if d is not None]
    data = per_second(sum(d for d, _ in both), sum(t for _, t in both)) if both else None
    synced = [(sync[s], t) for s, t, _, _ in window if s in sync]
    share = per_second(sum(d for d, _ in synced), sum(t for _, t in synced)) if synced else None
    return (rate, quantile(ordered, 0.5), quantile(ordered, 0.95), data, share,
            sum(times) / len(times), len(window))


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
    findings: deque = field(default_factory=lambda: deque(maxlen=MAX_FINDINGS))
    findings_total: int = 0
    unreadable: int = 0


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
        session.ranks.setdefault(stream.rank, _Rank(stream.rank, now - max(age_s, 0.0)))

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
            session.ranks[rank] = _Rank(rank, now)
        state = session.ranks[rank]
        state.last_seen = now - chunk.age_s  # when the stream was last written, on the follower's clock
        self.bytes_read += chunk.nbytes
        session.unreadable += len(chunk.notes)
        where = chunk.stream.path.name
        for number, record in chunk.records:
            self._record(session, state, record, f"{where}:{number}")

    def _record(self, session: _Session, state: _Rank, record: dict, where: str) -> None:
        kind = TYPE.read(record)
        if kind == TRAINING_STEP.type:
            state.add_step(record)
        elif kind == COMMUNICATION.type:
            state.add_sync(record)
        elif kind == GPU_SNAPSHOT.type:
            _gpus(session, record)
        elif kind == SESSION_START.type:
            _start(session, state, record)
        elif kind == SESSION_END.type:
            state.status = SESSION_END["status"].read(record) or Status.FAILED
            state.reason = SESSION_END["reason"].read(record) or state.error
        elif kind == ERROR.type:
            state.error = MESSAGE.read(record) or ERROR["exception_type"].read(record)
        finding = _finding(session, state.rank, kind, record, where)
        if finding is not None:
            session.findings.appendleft(finding)
            session.findings_total += 1
        ws = WORLD_SIZE.read(record)
        if ws is not None and ws > 0:
            state.world_size = session.world_size = ws

    def snapshot(self, now: float, wall: datetime | None = None) -> LiveSnapshot:
        sessions = tuple(_live_session(s, now) for _, s in sorted(self.sessions.items()))
        wall = wall or datetime.now(timezone.utc)
        return LiveSnapshot(time=wall.isoformat(timespec="milliseconds"), elapsed_s=round(now - self.start, 3),
                            sessions=sessions, all_ended=bool(sessions) and all(s.ended for s in sessions),
                            not_followed=tuple(self.not_followed), bytes_read=self.bytes_read)


def _start(session: _Session, state: _Rank, record: dict) -> None:
    start = SESSION_START.read(record)
    session.mode = start["mode"] or session.mode
    session.model = start["model"] or session.model
    state.max_steps = start["max_steps"] or state.max_steps


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


def _finding(session: _Session, rank: int, kind: str | None, record: dict, where: str) -> Finding | None:
    """A finding of the run's own checks, a non-finite value, a stall (no step ended for long: where
    the rank is), or an error; None for anything else (and for the emitter's notes about itself)."""
    step = STEP.read(record)
    message = MESSAGE.read(record) or ""
    if kind in _FINDING_SPECS:
        sub = _FINDING_SPECS[kind]["subkind"].read(record)
        if sub in EMITTER_KINDS:
            k = EMITTER_KINDS[sub]
            return Finding.make(k.severity, k, session.session_id, k.title, message, (where,), (rank,), step=step)
        if sub in NONFINITE_KINDS:
            k = FindingKind(sub)
            return Finding.make(k.severity, k, session.session_id, k.title, message, (where,), (rank,), step=step)
        return None
    if kind == NAN_DETECTED.type:  # the record's own kind where it names one (as written)
        k = FindingKind.NAN_DETECTED
        sub = NAN_DETECTED["subkind"].read(record) or k
        return Finding.make(k.severity, sub, session.session_id, k.title, message, (where,), (rank,), step=step)
    if kind == STALL.type:
        k = FindingKind.STALL
        phase = STALL["phase"].read(record)
        detail = message + (f" (in {phase})" if phase and phase not in message else "")
        return Finding.make(k.severity, k, session.session_id, k.title, detail, (where,), (rank,),
                            step=step, seconds=as_float(STALL["value"].read(record), finite=True))
    if kind == ERROR.type:
        sub = ERROR["subkind"].read(record)
        k = FindingKind.EXIT_BEFORE_END if sub == FindingKind.EXIT_BEFORE_END else FindingKind.ERROR
        return Finding.make(k.severity, sub or k, session.session_id, k.title, message, (where,), (rank,),
                            step=step)
    return None


def _live_rank(state: _Rank, now: float, status: str) -> LiveRank:
    rate, p50, p95, data, sync, _, n = state.window_figures()
    return LiveRank(rank=state.rank, step=state.step, max_steps=state.max_steps, loss=state.loss, samples_per_s=rate,
                    step_p50_s=p50, step_p95_s=p95, data_share=data, sync_share=sync, window_steps=n,
                    idle_s=round(now - state.last_seen, 3), status=status,
                    reason=state.reason if status not in (RUNNING, Status.COMPLETED) else None)


def _statuses(session: _Session, now: float) -> dict[int, str]:
    """Each expected rank's status; ``lost`` for the silent ones once the others have ended."""
    expected = set(range(session.world_size)) if session.world_size else set()
    ranks = sorted(expected | set(session.ranks))
    out = {r: session.ranks[r].status if r in session.ranks else RUNNING for r in ranks}
    if any(s != RUNNING for s in out.values()):
        for r, s in out.items():
            last = session.ranks[r].last_seen if r in session.ranks else session.first_seen
            if s == RUNNING and now - last >= SILENT_END_S:
                out[r] = LOST
    return out


def _end(session: _Session, statuses: dict[int, str]) -> LiveEnd | None:
    if not statuses or RUNNING in statuses.values():
        return None
    values = set(statuses.values())
    status = (Status.FAILED if values & {Status.FAILED, LOST} else
              Status.INTERRUPTED if Status.INTERRUPTED in values else Status.COMPLETED)
    ranks = tuple((r, s, session.ranks[r].reason if r in session.ranks else None) for r, s in statuses.items())
    return LiveEnd(status, _end_detail(session, status, ranks), ranks)


def _end_detail(session: _Session, status: str, ranks: tuple) -> str:
    steps = [session.ranks[r].step for r, _, _ in ranks if r in session.ranks and session.ranks[r].step is not None]
    at = f" at step {max(steps)}" if steps else ""
    if status == Status.COMPLETED:
        return f"completed{at}"
    groups: dict[str, list[int]] = {}
    for r, s, _ in ranks:
        groups.setdefault(s, []).append(r)
    why = next((reason for _, s, reason in ranks if s == status and reason), None)
    if why is None and status == Status.FAILED:
        why = next((reason for _, s, reason in ranks if reason), None)
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {', '.join(map(str, rs))} {s}"
             for s, rs in sorted(groups.items(), key=lambda kv: kv[1][0])]
    head = f"{status}{at}" + (f": {why}" if why else "")
    return head + " (" + "; ".join(parts) + ")"


def _straggler(ranks: list[LiveRank]) -> LiveStraggler | None:
    timed = [(r.step_p50_s, r.rank) for r in ranks if r.step_p50_s is not None]
    if len(timed) < 2:
        return None
    fastest, fastest_rank = min(timed)
    slowest, slowest_rank = max(timed)
    ratio = slowest / fastest
    return LiveStraggler(slowest_rank, slowest, fastest_rank, ratio, ratio - 1, ratio - 1 > STRAGGLER_SCORE)


def _spread(values: list) -> Spread:
    known = sorted(v for v in values if v is not None)
    if not known:
        return Spread()
    return Spread(known[0], quantile(known, 0.5), known[-1])


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


def _live_session(session: _Session, now: float) -> LiveSession:
    statuses = _statuses(session, now)
    ranks = [_live_rank(session.ranks[r], now, s) if r in session.ranks else
             LiveRank(r, idle_s=round(now - session.first_seen, 3), status=s) for r, s in statuses.items()]
    main = next((r for r in ranks if r.window_steps), ranks[0] if ranks else LiveRank(0))
    steps = [r.step for r in ranks if r.step is not None]
    step = min(steps) if steps else None
    max_steps = max((r.max_steps for r in ranks if r.max_steps), default=None)
    means = [session.ranks[r.rank].window_figures()[5] for r in ranks if r.rank in session.ranks]
    slowest_mean = max((m for m in means if m is not None), default=None)
    eta = (max_steps - step) * slowest_mean if None not in (max_steps, step, slowest_mean) else None
    end = _end(session, statuses)
    idle = min((r.idle_s for r in ranks if r.idle_s is not None), default=None)
    return LiveSession(
        session_id=session.session_id, folder=session.folder, state="ended" if end else RUNNING, end=end,
        world_size=session.world_size, mode=session.mode, model=session.model, step=step, max_steps=max_steps,
        eta_s=max(eta, 0.0) if eta is not None and end is None else None, samples_per_s=main.samples_per_s,
        step_p50_s=main.step_p50_s, step_p95_s=main.step_p95_s, data_share=main.data_share,
        sync_share=main.sync_share, idle_s=idle, ranks=tuple(ranks),
        summary=_summary(ranks) if len(ranks) >= SUMMARY_RANKS else None, straggler=_straggler(ranks),
        gpus=tuple(v for _, v in sorted(session.gpus.items())), findings=tuple(session.findings),
        findings_total=session.findings_total, unreadable_lines=session.unreadable)


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
