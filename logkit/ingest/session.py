"""``Session``: one training session as typed pandas frames plus a ``meta`` dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from logkit.schema import FRAME_DTYPES

__all__ = ["Session", "FRAME_DTYPES", "make_frame", "concat_frames", "categorical"]

_STR = pd.StringDtype("pyarrow", na_value=np.nan)  # pandas' default "str"


def _to_int(series: pd.Series) -> pd.Series:
    # Non-integral or non-numeric values (a malformed record) become <NA>, never an error.
    num = pd.to_numeric(series, errors="coerce").astype("float64")
    num = num.where(num.notna() & (num % 1 == 0))
    return num.astype("Int64")


def categorical(values) -> pd.Categorical:
    """Text as a categorical whose categories are its distinct values, sorted (any path, same dtype)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        uniques = pc.array_sort_indices(pc.unique(values).drop_null())
        cats = pc.take(pc.unique(values).drop_null(), uniques)
        codes = pc.fill_null(pc.index_in(values, value_set=cats), -1)
        width = np.int8 if len(cats) < 127 else np.int16 if len(cats) < 32_000 else np.int32
        return pd.Categorical.from_codes(codes.to_numpy(zero_copy_only=False).astype(width, copy=False),
                                         categories=pd.Index(cats.to_pylist(), dtype="str"))
    series = pd.Series(values, dtype="object")
    series = series.where(series.map(lambda v: isinstance(v, str)), None)
    cats = sorted(set(series.dropna()))
    return pd.Categorical(series, categories=pd.Index(cats, dtype="str"))


def _conform(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The frame's columns coerced to their ``FRAME_DTYPES`` (after rows or a concat)."""
    for col, dtype in FRAME_DTYPES[name].items():
        data = frame[col]
        if str(data.dtype) == dtype and dtype != "category":
            continue
        if dtype == "Int64":
            frame[col] = _to_int(data)
        elif dtype == "float64":
            frame[col] = pd.to_numeric(data, errors="coerce").astype("float64")
        elif dtype == "category":
            if (isinstance(data.dtype, pd.CategoricalDtype) and data.cat.categories.dtype == "str"
                    and data.cat.categories.is_monotonic_increasing):
                continue
            frame[col] = pd.Series(categorical(data.astype("object").to_numpy()), index=frame.index)
        elif dtype == "str":
            col_data = data.astype("object")
            col_data = col_data.where(col_data.map(lambda v: isinstance(v, str)), None)
            frame[col] = col_data.astype("str")
        else:
            col_data = data.astype("object")
            # absent text is None (not NaN), whichever path built the frame
            frame[col] = col_data.where(col_data.notna(), None) if col_data.isna().any() else col_data
    return frame


def make_frame(name: str, rows: list[dict[str, Any]], extra_columns: bool = False) -> pd.DataFrame:
    """A frame named ``name`` from row dicts, with the columns and dtypes of ``FRAME_DTYPES``;
    with ``extra_columns``, the rows' other keys follow as more columns (foreign formats)."""
    dtypes = FRAME_DTYPES[name]
    columns = list(dtypes)
    if extra_columns and rows:
        known = set(columns)
        extras = dict.fromkeys(k for row in rows for k in row if k not in known)
        columns += [k for k in extras if not k.startswith("_")]
    frame = pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(
        {c: pd.Series([], dtype="object") for c in dtypes})
    frame = _conform(frame, name)
    for col in frame.columns[len(dtypes):]:
        is_text = frame[col].dtype != object and pd.api.types.is_string_dtype(frame[col].dtype)
        if is_text or (frame[col].dtype == object and frame[col].isna().any()):
            col_data = frame[col].astype("object")  # text is object with None, as in the contract's columns
            frame[col] = col_data.where(col_data.notna(), None)
    return frame


def concat_frames(name: str, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames of one kind, one after the other, with that frame's dtypes."""
    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0]
    return _conform(pd.concat(frames, ignore_index=True), name)


def start_key(meta: dict) -> tuple:
    """Sort key of a session's ``meta``: start time (sessions without one last), then session id and
    folder. A naive timestamp is read as local time of the machine that wrote it."""
    start = meta.get("start_time")
    stamp = None
    if isinstance(start, str):
        try:
            stamp = datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp()
        except ValueError:
            stamp = None
    return (stamp is None, stamp or 0.0, meta.get("session_id") or "", meta.get("folder") or "")


@dataclass
class Session:
    """One training session.

    ``meta`` holds session_id, mode, world_size, gpu_count, model, backend, start_time,
    end_time, duration_s, status, total_batch_size, max_steps, ranks_found, files, folder.
    Frames have at least the columns of ``logkit.schema.FRAME_COLUMNS``; ``time_s`` is the
    record's ``elapsed_s`` (seconds since that rank's first record).
    """

    meta: dict = field(default_factory=dict)
    steps: pd.DataFrame = field(default_factory=lambda: make_frame("steps", []))
    comm: pd.DataFrame = field(default_factory=lambda: make_frame("comm", []))
    perf: pd.DataFrame = field(default_factory=lambda: make_frame("perf", []))
    gpu: pd.DataFrame = field(default_factory=lambda: make_frame("gpu", []))
    evals: pd.DataFrame = field(default_factory=lambda: make_frame("evals", []))
    events: pd.DataFrame = field(default_factory=lambda: make_frame("events", []))
    diagnostics: pd.DataFrame = field(default_factory=lambda: make_frame("diagnostics", []))

    @classmethod
    def empty(cls, meta: dict | None = None) -> Session:
        """A session with empty frames (and the given ``meta``)."""
        return cls(meta=dict(meta or {}))

    @property
    def session_id(self) -> str | None:
        return self.meta.get("session_id")

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
        return (f"Session({self.session_id!r}, world_size={self.meta.get('world_size')}, "
                f"steps={len(self.steps)}, comm={len(self.comm)}, events={len(self.events)}, "
                f"diagnostics={len(self.diagnostics)})")
