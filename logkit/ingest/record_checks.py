"""What a rank's stream must not hold, checked as it is read: nothing odd is silently counted.

Each record the checks set aside or repair becomes a ``record_check`` event of its session (level
WARNING, ``subkind`` saying which check, ``source`` the record's ``file:line``), and ``--diagnose``
lists them. The checks, per stream (one rank's ``<sid>_rank<N>.jsonl``):

- ``foreign_rank``: a record naming another rank than the stream's. Each rank writes its own
  stream, so it is another process's record (a shared or concatenated file): left out.
- ``foreign_session``: a record of another session id than the stream's first: left out (two runs
  appended to one file).
- ``duplicate_step``: a step record for a step the stream already logged: the first is kept (a
  callback registered twice writes every step twice; counting both doubles the steps).
- ``negative_step_time``: read as unknown (the step is kept, its time is not counted).
- ``absurd_batch``: a total batch size that is not positive or over ``MAX_BATCH`` samples per
  optimizer step: read as unknown (with its samples/s, made from it); the session's declared
  batch size stands in for it.
- ``numeric_text`` (the per-line engine): a number given as text (``"step": "17"``) is read as
  the number; ``not_a_number``: a value of a numeric field that is no number is read as unknown.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.mapping import LINE, NONFINITE, column
from logkit.schema.frames import FRAMES
from logkit.schema.records import EVENT, RECORD_SPECS, SESSION_ID, TRAINING_STEP
from logkit.schema.values import to_float
from logkit.schema.vocab import EventKind

# No optimizer step takes ten million samples (the largest published global batches are tens
# of thousands of sequences): a larger total batch size is a logging error, not a workload.
MAX_BATCH = 10_000_000

_TYPE, _RANK, _STEP = EVENT["kind"].raw[0], EVENT["rank"].raw[0], EVENT["step"].raw[0]
_SESSION = SESSION_ID.raw[0]
_NUMBER = (int, float)


def _note(line: int, subkind: str, message: str, step=None) -> dict:
    return {LINE: int(line), "subkind": subkind, "message": message, "step": step}


def _at(record: dict, path: tuple[str, ...]):
    node = record
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and path[-1] in node else None


class StreamChecks:
    """The checks of one rank's stream (``file_rank``), kept across its chunks: the stream's
    session id, the steps it logged. ``notes`` gathers what they found, in file order per chunk.
    ``own_stream``: False for records another reader gathered (other ranks' and sessions' may be
    among them): only their values are checked."""

    def __init__(self, file_rank: int, own_stream: bool = True) -> None:
        self.file_rank, self.own_stream = file_rank, own_stream
        self.session_id: str | None = None
        self._steps = np.zeros(0, np.int64)  # sorted steps of step records seen
        self._lines = np.zeros(0, np.int64)  # the line each of them was logged at
        self.notes: list[dict] = []

    # --- the per-line engine: values of the wrong type --------------------------------------
    def repair(self, records: list[tuple[int, dict]]) -> None:
        """Numbers given as text read as numbers (in place); other values of a numeric field noted."""
        for line, record in records:
            spec = RECORD_SPECS.get(record.get(_TYPE)) if isinstance(record.get(_TYPE), str) else None
            fields = spec.frame_fields if spec is not None else EVENT.frame_fields
            for f in fields:
                if f.type in _NUMBER:
                    self._repair_value(line, record, f)

    def _repair_value(self, line: int, record: dict, f) -> None:
        node = _at(record, f.raw)
        if node is None:
            return
        value = node[f.raw[-1]]
        if value is None or (isinstance(value, _NUMBER) and not isinstance(value, bool)):
            return
        number = to_float(value, finite=f.type is int) if isinstance(value, str) else None
        if number is not None and f.type is int and not number.is_integer():
            number = None
        shown = f"{value!r}" if isinstance(value, str) else str(value)[:40]
        if number is not None:
            node[f.raw[-1]] = int(number) if f.type is int else number
        step = record.get(_STEP)
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        self.notes.append(
            _note(line, "numeric_text", f"{f.name} given as text {shown}: read as {node[f.raw[-1]]}", step)
            if number is not None else
            _note(line, "not_a_number", f"{f.name} given as {shown}, not a number: read as unknown", step))

    # --- both engines: records that are not the stream's ----------------------------------------
    def rows(self, raw: pa.Table) -> pa.Table:
        """``raw`` without the records of another rank or session and the repeated step records."""
        if not raw.num_rows or not self.own_stream:
            return raw
        drop = self._foreign_rank(raw)
        drop = self._foreign_session(raw, drop)
        drop = self._repeated_steps(raw, drop)
        return raw if drop is None else raw.filter(pc.invert(drop))

    def _foreign_rank(self, raw: pa.Table):
        other = pc.fill_null(pc.not_equal(raw.column(_RANK), self.file_rank), False)
        if not pc.any(other).as_py():
            return None
        for r in raw.filter(other).select([_RANK, _STEP, _TYPE, LINE]).to_pylist():
            self.notes.append(_note(r[LINE], "foreign_rank",
                                    f"a {r[_TYPE]} record of rank {r[_RANK]} in rank {self.file_rank}'s stream: "
                                    "left out (each rank writes its own stream)", r[_STEP]))
        return other

    def _foreign_session(self, raw: pa.Table, drop):
        ids = raw.column(_SESSION)
        if self.session_id is None:
            known = pc.drop_null(ids)
            if not len(known):
                return drop
            self.session_id = known[0].as_py()
        other = pc.fill_null(pc.not_equal(ids, self.session_id), False)
        if drop is not None:
            other = pc.and_(other, pc.invert(drop))
        if not pc.any(other).as_py():
            return drop
        for r in raw.filter(other).select([_SESSION, _STEP, _TYPE, LINE]).to_pylist():
            self.notes.append(_note(r[LINE], "foreign_session",
                                    f"a {r[_TYPE]} record of session {r[_SESSION]!r} in a stream of session "
                                    f"{self.session_id!r}: left out (two runs wrote to one file)", r[_STEP]))
        return other if drop is None else pc.or_(drop, other)

    def _repeated_steps(self, raw: pa.Table, drop):
        is_step = pc.equal(raw.column(_TYPE), TRAINING_STEP.type)
        if drop is not None:
            is_step = pc.and_(is_step, pc.invert(drop))
        where = np.flatnonzero(pc.fill_null(is_step, False).to_numpy(zero_copy_only=False))
        steps = raw.column(_STEP).take(pa.array(where)).to_numpy(zero_copy_only=False)
        known = ~np.isnan(steps.astype("float64")) if steps.dtype.kind == "f" else np.ones(len(steps), bool)
        where, steps = where[known], steps[known].astype(np.int64)
        lines = raw.column(LINE).take(pa.array(where)).to_numpy()
        if not len(steps):
            return drop
        if (not len(self._steps) or steps[0] > self._steps[-1]) and (np.diff(steps) > 0).all():
            self._remember(steps, lines)  # the common case: steps rising, none seen before
            return drop
        repeated = self._find_repeats(steps, lines)
        if not repeated:
            return drop
        mask = np.zeros(raw.num_rows, bool)
        mask[where[repeated]] = True
        mask = pa.array(mask)
        return mask if drop is None else pc.or_(drop, mask)

    def _find_repeats(self, steps: np.ndarray, lines: np.ndarray) -> list[int]:
        """Indices of ``steps`` logged before (earlier in the chunk or in the stream); notes each."""
        repeated, first = [], {}
        pos = np.searchsorted(self._steps, steps)
        seen = (pos < len(self._steps)) & (self._steps[np.minimum(pos, len(self._steps) - 1)] == steps) \
            if len(self._steps) else np.zeros(len(steps), bool)
        for i, step in enumerate(steps.tolist()):
            earlier = int(self._lines[pos[i]]) if seen[i] else first.get(step)
            if earlier is None:
                first[step] = int(lines[i])
                continue
            repeated.append(i)
            self.notes.append(_note(lines[i], "duplicate_step", f"step {step} logged again (first at line "
                                                                f"{earlier}): left out, the first kept", step))
        new = [s for s in first]
        self._remember(np.array(new, np.int64), np.array([first[s] for s in new], np.int64))
        return repeated

    def _remember(self, steps: np.ndarray, lines: np.ndarray) -> None:
        if not len(steps):
            return
        steps, lines = np.concatenate([self._steps, steps]), np.concatenate([self._lines, lines])
        order = np.argsort(steps, kind="stable")
        self._steps, self._lines = steps[order], lines[order]

    # --- both engines: values no step can have -------------------------------------------------
    def values(self, steps: pa.Table, lines: pa.Array) -> pa.Table:
        """The steps table with negative step times and absurd batch sizes read as unknown."""
        if not steps.num_rows:
            return steps
        time, batch = steps.column("step_time_s"), steps.column("total_batch_size")
        negative = pc.fill_null(pc.less(time, 0), False)
        absurd = pc.fill_null(pc.or_(pc.less_equal(batch, 0), pc.greater(batch, MAX_BATCH)), False)
        if not (pc.any(negative).as_py() or pc.any(absurd).as_py()):
            return steps
        rows = steps.append_column(LINE, lines)
        for r in rows.filter(negative).to_pylist():
            self.notes.append(_note(r[LINE], "negative_step_time", f"step {r['step']}'s step time is negative "
                                    f"({r['step_time_s']} s): read as unknown", r["step"]))
        for r in rows.filter(absurd).to_pylist():
            self.notes.append(_note(r[LINE], "absurd_batch", f"step {r['step']}'s total batch size "
                                    f"{r['total_batch_size']} is not plausible (not positive, or over {MAX_BATCH:,} "
                                    "samples): read as unknown", r["step"]))
        steps = _unknown_where(steps, "step_time_s", negative)
        for name in ("total_batch_size", "samples_per_s"):
            steps = _unknown_where(steps, name, absurd)
        return steps

    def events(self, source: str) -> list[dict]:
        """The ``record_check`` event rows of the notes found since the last call (``source``: the
        file's name, as its lines are cited), with their line numbers (``LINE``)."""
        out = [{"time_s": None, "rank": self.file_rank, "level": "WARNING", "kind": EventKind.RECORD_CHECK,
                "step": n["step"], "subkind": n["subkind"], "message": n["message"],
                "source": f"{source}:{n[LINE]}", LINE: n[LINE]} for n in self.notes]
        self.notes = []
        return out


# --- many small streams at once -------------------------------------------------------------------
_STEP_FIELDS = {c.name: c.source.raw for c in FRAMES["steps"] if c.source is not None}


def _flag(noted: np.ndarray, stream: np.ndarray, rows) -> None:
    noted[stream[np.flatnonzero(np.asarray(rows))]] = True


def noted_streams(raw: pa.Table, stream: np.ndarray, file_rank: np.ndarray, streams: int) -> np.ndarray:
    """Which of several whole streams, parsed as one raw table (``stream``: each row's stream, rows in
    stream order; ``file_rank``: each row's stream's rank), a stream's own checks would note anything
    in, or a NaN/Inf loss or grad norm (an event of the mapping): a record of another rank or session
    than the stream's first, a step not above the one before it, a negative step time, an absurd batch
    size. The others are mapped together with no checks (``mapping.map_records``); these one by one,
    each with its ``StreamChecks``. Errs on the side of noting (a stream noted gives the same rows)."""
    noted = np.zeros(streams, bool)
    if not raw.num_rows:
        return noted
    rank = raw.column(_RANK).combine_chunks()
    _flag(noted, stream, pc.fill_null(pc.not_equal(rank, pa.array(file_rank)), False))
    # a session id other than the stream's first named one
    codes = pc.dictionary_encode(raw.column(_SESSION).combine_chunks()).indices
    named = np.asarray(codes.is_valid())
    codes = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]])
    first = np.minimum.reduceat(np.where(named, np.arange(len(codes)), len(codes)), starts)
    first_code = np.r_[codes, -1][first]  # per stream (-1: it names none)
    owner = np.repeat(first_code, np.diff(np.r_[starts, len(codes)]))
    _flag(noted, stream, named & (codes != owner))
    # steps: each stream's rising, with plausible values
    steps = raw.filter(pc.equal(raw.column(_TYPE), TRAINING_STEP.type))
    if steps.num_rows:
        at = stream[np.flatnonzero(pc.fill_null(pc.equal(raw.column(_TYPE), TRAINING_STEP.type), False)
                                   .to_numpy(zero_copy_only=False))]
        number = steps.column(_STEP).combine_chunks()
        known = np.asarray(number.is_valid())
        values, owners = pc.fill_null(number, 0).to_numpy(zero_copy_only=False)[known], at[known]
        same = owners[1:] == owners[:-1]
        noted[owners[1:][same & (np.diff(values) <= 0)]] = True
        time, batch = (column(steps, _STEP_FIELDS[n]) for n in ("step_time_s", "total_batch_size"))
        _flag(noted, at, pc.fill_null(pc.less(time, 0), False))
        _flag(noted, at, pc.fill_null(pc.or_(pc.less_equal(batch, 0), pc.greater(batch, MAX_BATCH)), False))
        for name in NONFINITE:
            _flag(noted, at, pc.fill_null(pc.invert(pc.is_finite(column(steps, _STEP_FIELDS[name]))), False))
    return noted


def _unknown_where(table: pa.Table, name: str, mask) -> pa.Table:
    i = table.schema.get_field_index(name)
    col = table.column(i)
    return table.set_column(i, name, pc.if_else(mask, pa.scalar(None, col.type), col))
