"""Our text logs read by columns: the bulk of a long log at once, the rest line by line.

Most lines of a long log are of five kinds: communication, multi-GPU step and performance
lines (multigpu.log, performance.log) and step and metrics lines (main.log). Each kind is
found by a literal substring and matched, on all lines of that kind at once, by the pattern
``logkit.schema`` defines for it (the process-line prefix in front where the file has one),
with polars' regex engine on all cores; values convert by columns. The other lines (headers,
blocks, warnings, evaluations, anything malformed) are few: ``LineReader`` reads them one at
a time, in file order, with the state the bulk lines leave. The result is what reading every
line with ``LineReader`` gives (a test compares both on every fixture); where it could differ
(the rest would yield rows of the bulk kinds, fractional timestamps, characters that Python's
``\\s`` and Rust's differ on) ``read_bulk`` returns None and the caller reads line by line.

polars is used for its regex engine: Python's ``re`` reads ~25 MB/s of these lines, pyarrow's
RE2 ~35 MB/s when it must capture groups; polars ~100 MB/s here (2 cores).
"""

from __future__ import annotations

import bisect
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from logkit.ingest.mapping import nonfinite_event
from logkit.ingest.readers.base import Read, epoch, text_lines
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.logkit_lines import LineReader
from logkit.schema import COMMUNICATION, MB, METRICS_LINE, MULTIGPU_STEP, PERFORMANCE, PROCESS_LINE, STEP_LINE

# The process-line prefix (multigpu.log, performance.log), without its message group.
_PREFIX = PROCESS_LINE.pattern.pattern.split("(?P<message>")[0]
# kind, the substring every line of the kind holds, whether it carries the process prefix
_KINDS = (
    (COMMUNICATION, "| Communication | ", True),
    (MULTIGPU_STEP, "| Multi-GPU Step ", True),
    (PERFORMANCE, "| Performance | ", True),
    (STEP_LINE, "Step", False),
    (METRICS_LINE, "└─ Metrics", False),
)
# Python's \s matches these and Rust's does not: such a file is read line by line.
_SPACE_DIFF = b"\x1c\x1d\x1e\x1f"


def _lines(data: bytes, read: Read):
    """The file's lines as a polars Series: split by arrow when the bytes are clean UTF-8
    without CR or ANSI codes, else as ``text_lines`` gives them (with its notes)."""
    import polars as pl
    import pyarrow.compute as pc

    clean = b"\r" not in data and b"\x1b" not in data and not data.startswith(b"\xef\xbb\xbf")
    if clean:
        whole = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], np.int64)),
                                                 pa.py_buffer(data))
        try:
            whole.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            clean = False
    if not clean:
        return pl.Series("line", text_lines(data, read), dtype=pl.String)
    lines = pc.split_pattern(whole, "\n").flatten()
    if data.endswith(b"\n"):
        lines = lines.slice(0, len(lines) - 1)
    return pl.Series("line", pl.from_arrow(lines), dtype=pl.String)


def _hour_offsets(naive_s: np.ndarray) -> np.ndarray:
    """Seconds to add to naive local wall-clock seconds to get POSIX seconds, as
    ``datetime.timestamp()`` gives them (local time zone), computed once per hour seen."""
    if not len(naive_s):
        return np.zeros(0)
    hours = np.floor_divide(naive_s, 3600).astype(np.int64)
    low, high = int(hours.min()), int(hours.max())
    base = datetime(1970, 1, 1)
    if high - low > 100_000:  # over eleven years of hours: only those seen
        uniq, inverse = np.unique(hours, return_inverse=True)
        return np.array([epoch(base + timedelta(hours=h)) - h * 3600 for h in uniq.tolist()])[inverse]
    table = np.array([epoch(base + timedelta(hours=h)) - h * 3600 for h in range(low, high + 1)])
    return table[hours - low]


def _split_plans() -> dict[str, tuple[str, int, dict[str, tuple[int, str, str]]]]:
    """How to take a kind's fields apart without capture groups (which are slow) once its
    pattern has matched: split at the separator, then strip each field's label and unit, as
    the kind's template writes them (``LineKind.split_plan``). Valid where the line holds
    exactly ``count`` separators: then every optional part is there and the parts are the
    pattern's groups. A line is stripped of its indent before it is split."""
    plans = {}
    for kind, _, prefixed in _KINDS:
        sep = ", " if kind is METRICS_LINE else " | "
        count, fields = kind.split_plan(sep, offset=3 if prefixed else 0)
        plans[kind.name] = (sep, count, {name: (pos, label.lstrip() if pos == 0 else label, unit)
                                         for name, (pos, label, unit) in fields.items()})
    return plans


_SPLIT = _split_plans()


def _matches(lines, kind, literal: str, prefixed: bool):
    """The lines of ``kind``: a frame of their index ``i``, the kind's fields converted, and
    ``datetime`` for prefixed kinds."""
    import polars as pl

    pattern = (_PREFIX + kind.pattern.pattern[1:]) if prefixed else kind.pattern.pattern
    frame = pl.DataFrame({"line": lines}).with_row_index("i")
    frame = frame.filter(pl.col("line").str.contains(literal, literal=True))
    frame = frame.filter(pl.col("line").str.contains(pattern))  # a match, no groups: fast
    sep, count, fields = _SPLIT[kind.name]
    plain = pl.col("line").str.count_matches(sep, literal=True) == count
    quick, slow = frame.filter(plain), frame.filter(~plain)

    quick = quick.with_columns(pl.col("line").str.strip_chars_start().str.split_exact(sep, count).alias("parts"))
    quick = quick.unnest("parts")  # field_0, field_1, ...: split once, not once per field
    exprs = []
    for name, (pos, label, unit) in fields.items():
        value = pl.col(f"field_{pos}").str.strip_chars_end()
        exprs.append(value.str.strip_prefix(label).str.strip_suffix(unit).alias(name))
    if prefixed:
        exprs.append(pl.col("line").str.slice(0, pl.col("line").str.find(" | ", literal=True)).alias("datetime"))
    if kind is STEP_LINE:  # "Step   50/1000 ( 5.0%)": the step and max_steps
        head = pl.col("field_0").str.extract_groups(r"^Step\s+(?P<step>\d+)/(?P<max_steps>\d+)")
        exprs += [head.struct.field("step"), head.struct.field("max_steps")]
    quick = quick.select("i", *exprs)
    slow = slow.with_columns(pl.col("line").str.extract_groups(pattern).alias("g")).unnest("g")
    slow = slow.select("i", *quick.columns[1:])
    frame = pl.concat([quick, slow]).sort("i") if len(slow) else quick
    casts = []
    for name, f in kind.fields.items():
        if name not in frame.columns:
            continue
        if f.convert is float:
            casts.append(pl.col(name).cast(pl.Float64, strict=False))
        elif f.convert is int:
            casts.append(pl.col(name).cast(pl.Int64, strict=False))
    return frame.with_columns(casts)


def _stamps(frame, read: Read, lines_at: np.ndarray, line_text) -> np.ndarray | None:
    """POSIX seconds of the process-line timestamps (NaN and a note where one does not
    convert, as the line reader says); None for fractional seconds (read line by line)."""
    import polars as pl

    text = frame["datetime"]
    if len(text) and text.str.len_chars().max() > 19:
        return None
    parsed = text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S", strict=False)
    # what chrono takes and datetime.fromisoformat does not: a leap second, the year 0
    valid = (parsed.is_not_null() & (text.str.slice(17, 2) != "60") & (text.str.slice(0, 4) != "0000")).to_numpy()
    naive = (parsed.dt.epoch("s").fill_null(0).to_numpy().astype(np.float64))
    out = np.where(valid, naive + _hour_offsets(naive), np.nan)
    for k in np.flatnonzero(~valid).tolist():
        i = int(lines_at[k])
        read.note(i + 1, f"value does not convert: timestamp {text[k]!r}", line_text(i))
    return out


def _bytes(size_mb: np.ndarray) -> pa.Array:
    """Bytes of a size in MB (SI), rounded as Python's round() does; missing where not finite."""
    finite = np.isfinite(size_mb)
    return pa.array(np.rint(np.where(finite, size_mb * MB, 0)).astype(np.int64), mask=~finite)


def read_bulk(path: Path, data: bytes, day: date) -> Read | None:
    """The ``Read`` of one of our text logs, or None where reading line by line is needed."""
    import polars as pl
    import pyarrow.compute as pc

    if any(c in data for c in _SPACE_DIFF):
        return None
    read = Read(Path(path), FileFormat.LOGKIT_TEXT)
    lines = _lines(data, read)
    line_text = lines.__getitem__
    name = read.label
    n = len(lines)
    taken = np.zeros(n, bool)
    found: dict[str, tuple[np.ndarray, object]] = {}
    for kind, literal, prefixed in _KINDS:
        frame = _matches(lines, kind, literal, prefixed)
        at = frame["i"].to_numpy().astype(np.int64)
        keep = ~taken[at]  # a line is of one kind only (the first that reads it)
        if not keep.all():
            frame, at = frame.filter(pl.Series(keep)), at[keep]
        taken[at] = True
        found[kind.name] = (at, frame)
    blank = (lines.str.strip_chars() == "").fill_null(True).to_numpy()

    step_at, steps = found[STEP_LINE.name]
    comm_at, comm = found[COMMUNICATION.name]
    mg_at, mg = found[MULTIGPU_STEP.name]
    perf_at, perf = found[PERFORMANCE.name]
    met_at, met = found[METRICS_LINE.name]
    comm_t = _stamps(comm, read, comm_at, line_text)
    perf_t = _stamps(perf, read, perf_at, line_text)
    mg_t = _stamps(mg, read, mg_at, line_text)
    if comm_t is None or perf_t is None or mg_t is None:
        return None

    # The rest, one line at a time in file order, with the state the bulk lines leave.
    rest = np.flatnonzero(~taken & ~blank).tolist()
    reader = LineReader(read, day)
    step_list = step_at.tolist()
    step_values = steps["step"].to_list()
    first_step, first_mg = (step_list[0] if step_list else None), (int(mg_at[0]) if len(mg_at) else None)
    section_at = -1
    for i in rest:
        if first_step is not None and first_step < i:
            read.meta.fill(max_steps=steps["max_steps"][0])
        if first_mg is not None and first_mg < i:
            read.meta.fill(world_size=mg["processes"][0])
        k = bisect.bisect_left(step_list, i) - 1
        reader.state["last_step"] = {"step": step_values[k]} if k >= 0 else None
        if k >= 0 and step_list[k] > section_at:
            reader.state["section"] = None  # a step line closes the block before it
        before = reader.state.get("section")
        reader.line(i + 1, line_text(i))
        if reader.state.get("section") != before:
            section_at = i
        if reader.state["last_step"] is not None and len(reader.state["last_step"]) > 1:
            return None  # a metrics line of its own form among the rest: it belongs to a bulk row
    if any(read.rows[frame] for frame in ("steps", "comm", "perf")):
        return None  # rows of the bulk kinds among the rest: their order is the line reader's to keep
    if first_step is not None:
        read.meta.fill(max_steps=steps["max_steps"][0])
    if first_mg is not None:
        read.meta.fill(world_size=mg["processes"][0])
    read.lines += int(taken.sum())
    read.used += int(taken.sum())

    # steps: a metrics line gives its values to the step line before it (the last one wins)
    step_time = np.full(len(step_at), np.nan)
    samples = np.full(len(step_at), np.nan)
    owner = np.searchsorted(step_at, met_at) - 1
    has = owner >= 0
    step_time[owner[has]] = met["step_duration"].to_numpy()[has]
    samples[owner[has]] = met["samples_per_second"].to_numpy()[has]
    loss = steps["loss"].to_numpy()
    read.tables["steps"] = pa.table({
        "rank": np.zeros(len(step_at), np.int64), "step": steps["step"].to_arrow(),
        "time_s": pa.nulls(len(step_at), pa.float64()), "loss": loss,
        "learning_rate": steps["learning_rate"].to_numpy(), "step_time_s": step_time, "samples_per_s": samples,
    })
    for k in np.flatnonzero(~np.isfinite(loss)).tolist():
        event = nonfinite_event({"rank": 0, "step": step_values[k], "time_s": None, "loss": float(loss[k])})
        read.event(event.pop("kind"), int(step_at[k]) + 1, **event)

    owner = np.searchsorted(mg_at, comm_at) - 1  # the multi-GPU step line before each
    mg_steps = mg["step"].to_numpy()
    comm_step = pa.array(np.where(owner >= 0, mg_steps[np.maximum(owner, 0)] if len(mg_steps) else 0, 0),
                         mask=owner < 0)
    read.tables["comm"] = pa.table({
        "rank": comm["rank"].fill_null(0).to_arrow(), "step": comm_step, "op": comm["op"].to_arrow(),
        "size_bytes": _bytes(comm["size_mb"].to_numpy()),
        "duration_ms": comm["duration_ms"].to_arrow(), "algbw_mb_s": comm["bandwidth_mb_s"].to_arrow(),
        "source": pc.binary_join_element_wise(f"{name}:", pc.cast(pa.array(comm_at + 1), pa.string()), ""),
        "time_s": comm_t,
    })
    read.tables["perf"] = pa.table({
        "rank": np.zeros(len(perf_at), np.int64), "time_s": perf_t, "step": perf["step"].to_arrow(),
        "avg_step_time_s": perf["avg_step_time_s"].to_arrow(),
        "throughput_samples_s": perf["throughput_samples_s"].to_arrow(),
        "total_batch_size": perf["total_batch_size"].to_arrow(),
    })
    # events and notes in file order, as the line reader leaves them
    read.rows["events"].sort(key=lambda r: int(r["source"].rsplit(":", 1)[1]))
    read.diagnostics.sort(key=lambda d: d["line"] if d["line"] is not None else -1)
    return read
