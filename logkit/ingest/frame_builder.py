"""Frames built chunk by chunk from arrow tables, straight into their final pandas form.

The fast JSONL path parses a stream a few MB at a time; each chunk's rows are added here and
the chunk is freed. Numbers go into growing numpy buffers whose spare capacity is allocated
but never written (so it costs address space, not memory), text stays in arrow chunks that
pandas' arrow-backed strings use as they are. Peak memory is the frames plus about one chunk,
where converting whole tables at the end would hold both the tables and the frames.

    >>> import pyarrow as pa
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

from logkit.ingest.session import _STR, FRAME_DTYPES, _conform, _to_int

__all__ = ["FrameBuilder", "arrow_frame"]


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
        if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
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
    """Text as arrow chunks (large_string, as pandas' arrow-backed strings hold it)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.chunks: list[pa.Array] = []

    def append(self, data, n: int) -> None:
        if data is None:
            self.chunks.append(pa.nulls(n, pa.large_string()))
            return
        arr = _array(data)
        self.chunks.append(arr if arr.type == pa.large_string() else pc.cast(arr, pa.large_string()))

    def truncate(self, rows: int) -> None:
        kept, total = [], 0
        for chunk in self.chunks:
            if total >= rows:
                break
            kept.append(chunk.slice(0, rows - total))
            total += len(kept[-1])
        self.chunks = kept

    def result(self):
        data = pa.chunked_array(self.chunks, pa.large_string())
        if self.dtype == "str":
            return pd.arrays.ArrowStringArray(data, dtype=_STR)
        return np.array(data.to_pylist(), dtype=object)  # "object": Python strings, None where missing


class _Codes:
    """A categorical column: codes into the values in the order first seen; at the end the
    categories are the values in use, sorted (whichever path built the frame)."""

    def __init__(self) -> None:
        self.codes = _Growing(np.int32)
        self.index: dict[str, int] = {}

    def append(self, data, n: int) -> None:
        if data is None:
            self.codes.append(np.full(n, -1, np.int32))
            return
        enc = pc.dictionary_encode(pc.cast(_array(data), pa.large_string()))
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


class FrameBuilder:
    """The frame ``name`` (columns and dtypes of ``FRAME_DTYPES``), from arrow tables added in
    order. A table may lack columns (they read as missing) and carry others (ignored)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows = 0
        self._cols = {col: _column(dtype) for col, dtype in FRAME_DTYPES[name].items()}

    def add(self, table: pa.Table) -> None:
        n = table.num_rows
        if not n:
            return
        names = set(table.column_names)
        for col, target in self._cols.items():
            target.append(table.column(col) if col in names else None, n)
        self.rows += n

    def truncate(self, rows: int) -> None:
        """Forget the rows added after the first ``rows`` (a stream that turned out unreadable)."""
        for target in self._cols.values():
            target.truncate(rows)
        self.rows = rows

    def frame(self) -> pd.DataFrame:
        """The frame; its columns are the builder's buffers (build one frame per builder)."""
        frame = pd.DataFrame({col: target.result() for col, target in self._cols.items()}, copy=False)
        return _conform(frame, self.name)


def arrow_frame(name: str, tables: list[pa.Table]) -> pd.DataFrame:
    """The frame ``name`` from whole arrow tables (a Parquet cache, tests)."""
    builder = FrameBuilder(name)
    for table in tables:
        builder.add(table)
    return builder.frame()
