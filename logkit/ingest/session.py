"""``Session``: one training session as typed pandas frames plus its ``meta`` (``schema.meta.SessionMeta``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from logkit.ingest.assemble import make_frame
from logkit.schema.meta import SessionMeta


def iso_seconds(value) -> float | None:
    """POSIX seconds of an ISO 8601 timestamp ("Z" for UTC allowed), else None. A naive one is
    local time of the machine that wrote it."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def start_key(meta: SessionMeta) -> tuple:
    """Sort key of a session's ``meta``: start time (sessions without one last), then session id and
    folder."""
    stamp = iso_seconds(meta.start_time)
    return (stamp is None, stamp or 0.0, meta.session_id or "", meta.folder or "")


@dataclass
class Session:
    """One training session.

    ``meta``: what the files say about it (``SessionMeta``: declared keys only, read as attributes,
    ``meta.world_size``; a dict given here becomes one, and an undeclared key raises).
    Frames have at least the columns of ``logkit.schema.FRAME_COLUMNS``; ``time_s`` is the
    record's ``elapsed_s`` (seconds since that rank's first record).
    """

    meta: SessionMeta = field(default_factory=SessionMeta)
    steps: pd.DataFrame = field(default_factory=lambda: make_frame("steps", []))
    comm: pd.DataFrame = field(default_factory=lambda: make_frame("comm", []))
    perf: pd.DataFrame = field(default_factory=lambda: make_frame("perf", []))
    phases: pd.DataFrame = field(default_factory=lambda: make_frame("phases", []))
    gpu: pd.DataFrame = field(default_factory=lambda: make_frame("gpu", []))
    evals: pd.DataFrame = field(default_factory=lambda: make_frame("evals", []))
    events: pd.DataFrame = field(default_factory=lambda: make_frame("events", []))
    diagnostics: pd.DataFrame = field(default_factory=lambda: make_frame("diagnostics", []))

    def __post_init__(self) -> None:
        if not isinstance(self.meta, SessionMeta):
            self.meta = SessionMeta(self.meta)

    @classmethod
    def empty(cls, meta: dict | None = None) -> Session:
        """A session with empty frames (and the given ``meta``)."""
        return cls(meta=SessionMeta(meta or {}))

    @property
    def session_id(self) -> str | None:
        return self.meta.session_id

    def main_rank_steps(self) -> pd.DataFrame:
        """The step rows of the lowest rank that logged steps (rank 0's, as a rule): the rank whose
        steps stand for the job's (every rank takes part in each optimizer step)."""
        steps = self.steps
        ranks = steps["rank"].dropna()
        return steps if ranks.empty else steps[steps["rank"] == ranks.min()]

    def timed_steps(self, main_rank: bool = False) -> pd.DataFrame:
        """Step rows with a positive ``step_time_s``: every rank's, or (``main_rank``) the lowest
        rank's, ordered by step. The rows every time-based figure is computed over."""
        steps = self.main_rank_steps() if main_rank else self.steps
        rows = steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0)]
        if main_rank and rows["step"].notna().all() and not rows["step"].is_monotonic_increasing:
            rows = rows.sort_values("step", kind="stable")
        return rows

    def start_key(self) -> tuple:
        """Sort key: start time (sessions without one last), then session id and folder."""
        return start_key(self.meta)

    def __repr__(self) -> str:
        return (f"Session({self.session_id!r}, world_size={self.meta.world_size}, "
                f"steps={len(self.steps)}, comm={len(self.comm)}, events={len(self.events)}, "
                f"diagnostics={len(self.diagnostics)})")
