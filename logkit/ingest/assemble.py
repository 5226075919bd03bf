"""Frames from arrow tables: the one way a ``Session``'s frames are made.

Every reader hands over arrow tables (our JSONL engines a chunk at a time, the other readers
a table per frame, rows a reader collected as dicts through ``rows_table``); ``FrameBuilder``
turns the tables of one frame, added in order, into that frame: the columns of
``schema.frames`` with their dtypes, then (where another format gave them) the extra columns.
Numbers go into growing numpy buffers whose spare capacity is allocated but never written
(so it costs address space, not memory), text stays in arrow chunks that pandas' arrow-backed
strings use as they are: peak memory is the frames plus about one chunk.

Values convert as the contract reads them: a number that is not integral (or out of range)
in an integer column is missing, text in a number column is read where it is a number,
anything but text in a text column is missing (the "object" columns keep what they were
given). Extra columns keep the types their values have (integers with a gap become float64,
true/false with a gap object); a column of values of several types is kept as their text.

    >>> b = FrameBuilder("perf")
    >>> b.add(pa.table({"rank": [0, 1], "step": [10, None], "avg_step_time_s": [0.4, 0.5]}))
    >>> b.frame()[["rank", "step", "avg_step_time_s"]].to_dict("list")
    {'rank': [0, 1], 'step': [10, None], 'avg_step_time_s': [0.4, 0.5]}
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.safe_io import display
from logkit.schema.frames import FRAME_DTYPES, FRAME_NAMES
from logkit.schema.values import in_int64

STR = pd.StringDtype("pyarrow", na_value=np.nan)  # pandas' default "str"
_TEXT_CHARS = 200
_INT64_MAX = 2.0**63


def diagnostic(file: str, line: int | None, reason: str, text: str = "") -> dict:
    """One row of a session's ``diagnostics`` frame (the file as ``safe_io.display`` writes it)."""
    return {"file": display(file), "line": line, "reason": reason, "text": text[:_TEXT_CHARS]}


def _to_int(series: pd.Series) -> pd.Series:
    # Non-integral, non-numeric or out-of-range values (a malformed record) become <NA>, never an error.
    num = pd.to_numeric(series, errors="coerce").astype("float64")
    num = num.where(num.notna() & (num % 1 == 0) & (num.abs() < _INT64_MAX))
    return num.astype("Int64")


class _Growing:
    """A numpy buffer that doubles when full. The capacity beyond the rows written is never
    touched, so the operating system never backs it with memory."""

    __slots__ = ("data", "n")

    def __init__(self, dtype) -> None:
        self.data = np.empty(1 << 12, dtype)
        self.n = 0

    def append(self, values: np.ndarray) -> None:
        end = self.n + len(values)
        if end > len(self.data):
            bigger = np.empty(max(end, 2 * len(self.data)), self.data.dtype)
            bigger[: self.n] = self.data[: self.n]
            self.data = bigger
        self.data[self.n:end] = values
        self.n = end

    def values(self) -> np.ndarray:
        return self.data[: self.n]


def _array(data: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
    return arr.cast(arr.type.value_type) if pa.types.is_dictionary(arr.type) else arr


def _is_text(arr: pa.Array) -> bool:
    return pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_null(arr.type)


class _Floats:
    def __init__(self) -> None:
        self.buf = _Growing(np.float64)

    def append(self, data, n: int) -> None:
        if data is None:
            self.buf.append(np.full(n, np.nan))
            return
        arr = _array(data)
        if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
            self.buf.append(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False))
        else:  # text or anything else: what converts, the rest NaN
            self.buf.append(pd.to_numeric(pd.Series(arr.to_pylist(), dtype=object), errors="coerce")
                            .to_numpy(np.float64))

    def truncate(self, rows: int) -> None:
        self.buf.n = rows

    def result(self):
        return self.buf.values()


class _Ints:
    """pandas' nullable Int64: values and a mask of the missing; non-integral values are missing."""

    def __init__(self) -> None:
        self.values, self.mask = _Growing(np.int64), _Growing(bool)

    def append(self, data, n: int) -> None:
        if data is None:
            self.values.append(np.zeros(n, np.int64))
            self.mask.append(np.ones(n, bool))
            return
        arr = _array(data)
        if pa.types.is_signed_integer(arr.type) or pa.types.is_null(arr.type):
            arr = pc.cast(arr, pa.int64())
            self.mask.append(arr.is_null().to_numpy(zero_copy_only=False))
            self.values.append((pc.fill_null(arr, 0) if arr.null_count else arr).to_numpy(zero_copy_only=False))
        else:
            ints = _to_int(pd.Series(arr.to_pylist(), dtype=object))
            self.mask.append(ints.isna().to_numpy())
            self.values.append(ints.fillna(0).to_numpy(np.int64))

    def truncate(self, rows: int) -> None:
        self.values.n = self.mask.n = rows

    def result(self):
        return pd.arrays.IntegerArray(self.values.values(), self.mask.values())


class _Text:
    """Text as arrow chunks (large_string, as pandas' arrow-backed strings hold it); an "object"
    column keeps the values it was given, as Python objects."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.chunks: list[pa.Array] = []

    def append(self, data, n: int) -> None:
        if data is None:
            self.chunks.append(pa.nulls(n, pa.large_string()))
            return
        arr = _array(data)
        if not _is_text(arr) and self.dtype != "object":
            arr = pa.nulls(len(arr))  # only text is text
        self.chunks.append(pc.cast(arr, pa.large_string()) if _is_text(arr) else arr)

    def truncate(self, rows: int) -> None:
        kept, total = [], 0
        for chunk in self.chunks:
            if total >= rows:
                break
            kept.append(chunk.slice(0, rows - total))
            total += len(kept[-1])
        self.chunks = kept

    def result(self):
        if all(c.type == pa.large_string() for c in self.chunks):
            data = pa.chunked_array(self.chunks, pa.large_string())
            if self.dtype == "str":
                return pd.arrays.ArrowStringArray(data, dtype=STR)
            return _objects(data.to_pylist())  # "object": Python strings, None where missing
        return _objects([v for c in self.chunks for v in c.to_pylist()])


def _objects(values: list) -> pd.Series:
    """Values as an object column (pandas would read text into its "str" dtype)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, dtype=object, copy=False)


class _Codes:
    """A categorical column: codes into the values in the order first seen; at the end the
    categories are the values in use, sorted (whichever reader gave them)."""

    def __init__(self) -> None:
        self.codes = _Growing(np.int32)
        self.index: dict[str, int] = {}

    def append(self, data, n: int) -> None:
        arr = None if data is None else _array(data)
        if arr is None or not _is_text(arr):
            self.codes.append(np.full(n, -1, np.int32))
            return
        enc = pc.dictionary_encode(pc.cast(arr, pa.large_string()))
        lut = np.array([self.index.setdefault(v, len(self.index)) for v in enc.dictionary.to_pylist()] + [-1],
                       np.int32)
        self.codes.append(lut[pc.fill_null(enc.indices, len(lut) - 1).to_numpy(zero_copy_only=False)])

    def truncate(self, rows: int) -> None:
        self.codes.n = rows

    def result(self):
        codes = self.codes.values()
        values = list(self.index)
        used = np.bincount(codes[codes >= 0], minlength=len(values)) > 0
        order = sorted((i for i in range(len(values)) if used[i]), key=values.__getitem__)
        lut = np.full(len(values) + 1, -1, np.int32)  # the last entry: a missing value stays -1
        lut[order] = np.arange(len(order), dtype=np.int32)
        width = np.int8 if len(order) < 127 else np.int16 if len(order) < 32_000 else np.int32
        return pd.Categorical.from_codes(lut[codes].astype(width, copy=False),
                                         categories=pd.Index([values[i] for i in order], dtype="str"))


def _column(dtype: str):
    if dtype == "float64":
        return _Floats()
    if dtype == "Int64":
        return _Ints()
    if dtype == "category":
        return _Codes()
    return _Text(dtype)


def _values(values: list) -> pa.Array:
    """Python values as one arrow array (integers beyond 64 bits missing: no column holds them); values of
    several types as their text."""
    try:
        return pa.array(values)
    except OverflowError:
        values = [None if type(v) is int and not in_int64(v) else v for v in values]
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    try:  # NaN among text: missing text
        return pa.array([None if isinstance(v, float) and v != v else v for v in values])
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def rows_table(rows: list[dict]) -> pa.Table:
    """Row dicts as a table: a column per key, in the order the keys first appear."""
    names = dict.fromkeys(k for row in rows for k in row)
    if not names:
        return pa.table({"_rows": pa.nulls(len(rows))})  # rows that say nothing are still rows
    columns = {}
    for name in names:
        values = _values([row.get(name) for row in rows])
        if pa.types.is_null(values.type) and any(name not in row for row in rows):
            values = values.cast(pa.float64())  # as pandas reads a key some rows lack: NaN
        columns[name] = values
    return pa.table(columns)


def _extra(data: pa.ChunkedArray):
    """An extra column as pandas infers it from row dicts: int64 (float64 with a gap), float64,
    bool (object with a gap), else objects (text with None where missing)."""
    kind = data.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        out = data.to_numpy()
        return out.astype(np.float64) if data.null_count and pa.types.is_integer(kind) else out
    if pa.types.is_boolean(kind) and not data.null_count:
        return data.to_numpy()
    return _objects(data.to_pylist())


class _Extras:
    """Columns a frame's contract does not name, by first appearance, each a list of (first
    row, values); rows without them are missing."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[int, pa.Array]]] = {}

    def append(self, table: pa.Table, names: list[str], at: int) -> None:
        for name in names:
            self.parts.setdefault(name, []).append((at, _array(table.column(name))))

    def truncate(self, rows: int) -> None:
        for name, parts in list(self.parts.items()):
            parts[:] = [(at, arr.slice(0, rows - at)) for at, arr in parts if at < rows]
            if not parts:
                del self.parts[name]

    def columns(self, rows: int) -> dict:
        out = {}
        for name, parts in self.parts.items():
            pieces, pos = [], 0
            for at, arr in parts:
                pieces += [pa.nulls(at - pos)] if at > pos else []
                pieces.append(arr)
                pos = at + len(arr)
            pieces += [pa.nulls(rows - pos)] if rows > pos else []
            data = _chunked(pieces)
            if pa.types.is_null(data.type) and len(pieces) > len(parts):
                data = data.cast(pa.float64())  # as pandas reads a key some rows lack: NaN
            out[name] = _extra(data)
        return out


def _chunked(pieces: list[pa.Array]) -> pa.ChunkedArray:
    kinds = [p.type for p in pieces if not pa.types.is_null(p.type)]
    try:
        kind = pa.unify_schemas([pa.schema([("v", k)]) for k in kinds], promote_options="permissive")[0].type \
            if kinds else pa.null()
        return pa.chunked_array([p.cast(kind) for p in pieces], kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # values of several types as their text (a piece of nothing but missing values too: null -> string)
        return pa.chunked_array([pa.array([None if v is None else str(v) for v in p.to_pylist()], pa.string())
                                 for p in pieces], pa.string())


class FrameBuilder:
    """The frame ``name`` (columns and dtypes of ``FRAME_DTYPES``), from arrow tables added in
    order. A table may lack columns (they read as missing); its other columns are kept after
    them with ``extra_columns`` (names starting with "_" are a reader's own), else ignored."""

    def __init__(self, name: str, extra_columns: bool = False) -> None:
        self.name = name
        self.rows = 0
        self._cols = {col: _column(dtype) for col, dtype in FRAME_DTYPES[name].items()}
        self._extras = _Extras() if extra_columns else None

    def add(self, table: pa.Table) -> None:
        n = table.num_rows
        if not n:
            return
        names = set(table.column_names)
        for col, target in self._cols.items():
            target.append(table.column(col) if col in names else None, n)
        if self._extras is not None:
            extra = [c for c in table.column_names if c not in self._cols and not c.startswith("_")]
            self._extras.append(table, extra, self.rows)
        self.rows += n

    def truncate(self, rows: int) -> None:
        """Forget the rows added after the first ``rows`` (a stream that turned out unreadable)."""
        for target in self._cols.values():
            target.truncate(rows)
        if self._extras is not None:
            self._extras.truncate(rows)
        self.rows = rows

    def frame(self) -> pd.DataFrame:
        """The frame; its columns are the builder's buffers (build one frame per builder)."""
        columns = {col: target.result() for col, target in self._cols.items()}
        if self._extras is not None:
            columns.update(self._extras.columns(self.rows))
        return pd.DataFrame(columns, copy=False)


def frame_of(name: str, tables: list[pa.Table], extra_columns: bool = False) -> pd.DataFrame:
    """The frame ``name`` of ``tables``, one after the other."""
    builder = FrameBuilder(name, extra_columns)
    for table in tables:
        builder.add(table)
    return builder.frame()


def make_frame(name: str, rows: list[dict], extra_columns: bool = False) -> pd.DataFrame:
    """The frame ``name`` of row dicts; with ``extra_columns``, the rows' other keys follow as
    more columns (other formats)."""
    return frame_of(name, [rows_table(rows)], extra_columns)


class Frames:
    """The frames of one session, filled in file order: ``add(frame, table)``; a reader that
    gives up part way takes its rows back (``mark()``, then ``truncate(mark)``)."""

    def __init__(self) -> None:
        self.builders = {name: FrameBuilder(name, extra_columns=True) for name in FRAME_NAMES}

    def add(self, name: str, table: pa.Table) -> None:
        self.builders[name].add(table)

    def mark(self) -> dict[str, int]:
        return {name: b.rows for name, b in self.builders.items()}

    def truncate(self, mark: dict[str, int]) -> None:
        for name, b in self.builders.items():
            b.truncate(mark[name])

    def result(self, by_time: bool = False) -> dict[str, pd.DataFrame]:
        """The frames; ``by_time``: events and GPU samples sorted by time (stable), as lines of
        several files (and clocks of several hosts) are out of time order."""
        frames = {name: b.frame() for name, b in self.builders.items()}
        if by_time:
            for name in ("events", "gpu"):
                frames[name] = frames[name].sort_values("time_s", kind="stable", na_position="last",
                                                        ignore_index=True)
        return frames


def shift_times(reads: list, start: float | None) -> float | None:
    """Absolute times (a read's ``time_base == "epoch"``) become seconds since the session's
    start: ``start`` (the start time our records name), else the earliest time any file gives."""
    epoch_reads = [read for read in reads if read.time_base == "epoch"]
    stamps = [m for read in epoch_reads for table in read.tables.values() if "time_s" in table.column_names
              and (m := pc.min(table.column("time_s")).as_py()) is not None and m == m]
    if not stamps:
        return start
    t0 = start if start is not None else min(stamps)
    for read in epoch_reads:
        for name, table in read.tables.items():
            if "time_s" in table.column_names:
                i = table.schema.get_field_index("time_s")
                read.tables[name] = table.set_column(i, "time_s", pc.subtract(table.column(i), t0))
    return t0
