"""Our text logs (``*_main.log``, ``*_multigpu.log``, ``*_performance.log``), read with the
LineKinds of ``logkit.schema``. Used when a session has no JSONL streams (seed 000 folders).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from pathlib import Path

from logkit.ingest.readers.base import Read, epoch, read_bytes, text_lines
from logkit.schema import (
    BULLET_LINE,
    COMMUNICATION,
    GPU_UTIL_LOW,
    HEADER_FIELD,
    MAIN_LINE,
    MB,
    METRICS_LINE,
    MULTIGPU_STEP,
    PERFORMANCE,
    PROCESS_LINE,
    SLOW_STEP,
    STEP_LINE,
)

__all__ = ["read_logkit_text", "HEADER_META"]

# Header fields ("Key: value") that become meta, and how their value converts.
HEADER_META: dict[str, tuple[str, type]] = {
    "session id": ("session_id", str), "mode": ("mode", str), "gpu count": ("gpu_count", int),
    "world size": ("world_size", int), "model": ("model", str), "distributed backend": ("backend", str),
    "accelerator processes": ("world_size", int), "mixed precision": ("mixed_precision", str),
    "total batch size": ("total_batch_size", int), "per-device batch size": ("per_device_batch_size", int),
    "gradient accumulation steps": ("gradient_accumulation_steps", int),
}
_SECTION = re.compile(r"^\S.*:\s*$")  # "📊 EVALUATION RESULTS:" and friends
_DATE_IN_NAME = re.compile(r"(\d{8})_\d{6}")


def _date_hint(path: Path) -> date:
    m = _DATE_IN_NAME.search(path.name)
    if m:
        try:
            return datetime.strptime(m[1], "%Y%m%d").date()
        except ValueError:
            pass
    return date(1970, 1, 1)


def _header(read: Read, key: str, value: str, line: int) -> None:
    target = HEADER_META.get(key.strip().lower())
    if target is None:
        return
    name, convert = target
    try:
        read.meta.setdefault(name, convert(value.split()[0] if convert is int else value))
    except (ValueError, IndexError):
        read.note(line, f"value does not convert: {key}: {value!r}", value)


def _level_event(read: Read, line: int, level: str, message: str, t: float | None) -> None:
    if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
        kind = "error" if level in ("ERROR", "CRITICAL") else "warning"
        read.event(kind, line, time_s=t, rank=0, level=level, message=message)


def _message(read: Read, number: int, message: str, level: str, t: float | None, state: dict) -> bool:
    """Route one message of our grammar; False when no message kind reads it."""
    if (v := STEP_LINE.parse(message)) is not None:
        row = {"rank": 0, "step": v["step"], "time_s": t, "loss": v["loss"], "learning_rate": v["learning_rate"],
               "max_steps": v["max_steps"]}
        read.step(number, row)
        read.meta.setdefault("max_steps", v["max_steps"])
        state["last_step"], state["section"] = row, None
    elif (v := METRICS_LINE.parse(message)) is not None:
        if state.get("last_step") is not None:
            state["last_step"].update(step_time_s=v["step_duration"], samples_per_s=v["samples_per_second"])
    elif (v := COMMUNICATION.parse(message)) is not None:
        read.rows["comm"].append({
            "rank": v["rank"] if v["rank"] is not None else 0, "op": v["op"], "size_bytes": round(v["size_mb"] * MB),
            "duration_ms": v["duration_ms"], "algbw_mb_s": v["bandwidth_mb_s"],
            "source": f"{read.path.name}:{number}", "time_s": t, "step": state.get("multigpu_step"),
        })
    elif (v := MULTIGPU_STEP.parse(message)) is not None:
        state["multigpu_step"] = v["step"]
        read.meta.setdefault("world_size", v["processes"])
    elif (v := PERFORMANCE.parse(message)) is not None:
        read.rows["perf"].append({"rank": 0, "time_s": t, **v})
    elif (v := GPU_UTIL_LOW.parse(message)) is not None:
        read.event("resource_warning", number, time_s=t, rank=0, level=level, message=message,
                   subkind="gpu_util_low", value=v["utilization_pct"], gpu=v["gpu"])
    elif (v := SLOW_STEP.parse(message)) is not None:
        read.event("anomaly", number, time_s=t, rank=0, level=level, message=message, subkind="slow_step",
                   value=v["step_time_s"])
    elif (v := BULLET_LINE.parse(message)) is not None:
        if state.get("section") == "eval":
            try:
                value = float(v["value"])
            except ValueError:
                read.note(number, f"value does not convert: {v['key']}: {v['value']!r}", message)
                return True
            step = state["last_step"]["step"] if state.get("last_step") else None
            read.rows["evals"].append({"step": step, "name": v["key"], "value": value, "rank": 0, "time_s": t})
        else:
            _header(read, v["key"], v["value"], number)
    elif (v := HEADER_FIELD.parse(message)) is not None:
        _header(read, v["key"], v["value"], number)
        _level_event(read, number, level, message, t)
    else:
        return False
    return True


def read_logkit_text(path: Path, rank: int | None = None) -> Read:
    """Steps, comm, perf, evals, warnings and header meta from one of our text logs."""
    read = Read(Path(path), "logkit_text")
    day = _date_hint(read.path)
    lines = text_lines(read_bytes(read.path, read), read)
    if len(lines) >= VECTOR_MIN_LINES and _read_vectorised(read, lines, day):
        return read
    state: dict = {}
    last_clock: datetime | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        read.lines += 1
        t = None
        if (m := MAIN_LINE.pattern.match(line)) is not None:
            level, message = m["level"], m["message"]
            try:
                clock = datetime.combine(day, datetime.strptime(m["time"], "%H:%M:%S").time())
            except ValueError:
                clock = None
            if clock is not None:
                # main.log has no date: a clock that goes back by more than 12 h crossed midnight
                if last_clock is not None and clock < last_clock - timedelta(hours=12):
                    day += timedelta(days=1)
                    clock += timedelta(days=1)
                last_clock = clock
                t = epoch(clock)
        elif (m := PROCESS_LINE.pattern.match(line)) is not None:
            level, message = m["level"], m["message"]
            try:
                t = epoch(datetime.fromisoformat(m["datetime"].replace(",", ".")))
            except ValueError:
                read.note(number, f"value does not convert: timestamp {m['datetime']!r}", line)
        else:
            level, message = "INFO", line  # unprefixed main.log lines (step lines, blocks)
            if _SECTION.match(line) and not HEADER_FIELD.parse(line.strip()):
                state["section"] = "eval" if "EVAL" in line.upper() else "other"
                read.used += 1
                continue
        if _message(read, number, message, level, t, state):
            read.used += 1
        elif m is not None:
            # A prefixed line is always ours: free text is used; a warning or an error is an event.
            _level_event(read, number, level, message, t)
            read.used += 1
        else:
            read.unmatched(number, line)
    return read


# ---------------------------------------------------------------------------------------
# The same reading, vectorised: every line's prefix, and the kinds that make up the bulk of a
# log (step, metrics, communication, multi-GPU step and performance lines), are matched over
# the whole file at once with pyarrow's RE2 (the patterns of logkit.schema are RE2 syntax).
# The few other lines (headers, blocks, warnings, anything unknown) go through ``_message``
# one by one, in file order, with the state the bulk lines left. Lines where RE2 and Python's
# re could differ (Unicode whitespace) are read one by one too.
# ---------------------------------------------------------------------------------------

VECTOR_MIN_LINES = 2000  # below this, the per-line loop is as fast
# Characters Python's \s and \d match and RE2's do not (RE2: ASCII only): a file with any is
# read by the per-line loop.
_UNICODE_CLASSES = "[\x0b\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]|[^\\P{Nd}0-9]"
_BULK = (STEP_LINE, METRICS_LINE, COMMUNICATION, MULTIGPU_STEP, PERFORMANCE)
_BULK_START = {STEP_LINE.name: "Step", COMMUNICATION.name: "Communication | ",
               MULTIGPU_STEP.name: "Multi-GPU Step ", PERFORMANCE.name: "Performance | "}


def _clock_times(hms, day: date):
    """Seconds since the epoch of main.log's HH:MM:SS clocks (None where invalid), a day added
    each time the clock goes back by more than 12 h, as the per-line loop does."""
    import numpy as np
    import pyarrow.compute as pc

    parts = [pc.cast(pc.utf8_slice_codeunits(hms, a, a + 2), "int64").to_numpy(zero_copy_only=False)
             for a in (0, 3, 6)]
    h, m, s = parts
    valid = (h < 24) & (m < 60) & (s < 60)
    secs = h * 3600 + m * 60 + s
    vsecs = secs[valid]
    days = np.zeros(len(vsecs), np.int64)
    if len(vsecs) > 1:
        days[1:] = np.cumsum(np.diff(vsecs) < -43200)
    out = [None] * len(hms)
    cache: dict[tuple[int, int], float] = {}
    for i, d, sec in zip(np.flatnonzero(valid).tolist(), days.tolist(), vsecs.tolist(), strict=True):
        key = (d, sec)
        t = cache.get(key)
        if t is None:
            t = cache[key] = epoch(datetime.combine(day + timedelta(days=d), datetime.min.time())
                                   + timedelta(seconds=sec))
        out[i] = t
    return out


def _stamp_times(stamps) -> tuple[list, dict]:
    """Seconds since the epoch of the process lines' datetimes; (times, {index: bad text})."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(stamps)
    values = []
    for text in enc.dictionary.to_pylist():
        try:
            values.append(epoch(datetime.fromisoformat(text.replace(",", "."))))
        except ValueError:
            values.append(None)
    idx = enc.indices.to_pylist()
    times = [values[i] for i in idx]
    bad = {i: enc.dictionary[k].as_py() for i, k in enumerate(idx) if values[k] is None}
    return times, bad


def _extract(message, kind, rows):
    """``kind``'s fields on the rows (indices) whose message matches it: (matched indices, fields)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(rows):
        return rows, {}
    found = pc.extract_regex(pc.take(message, pa.array(rows)), kind.pattern.pattern)
    hit = pc.is_valid(found).to_numpy(zero_copy_only=False)
    found = found.filter(pa.array(hit))
    fields = {}
    for key in kind.fields:
        col = pc.struct_field(found, key)
        convert = kind.fields[key].convert
        if convert is str:
            fields[key] = col.to_pylist()
        else:
            fields[key] = pc.cast(col, "float64" if convert is float else "int64").to_pylist()
    return rows[hit], fields


def _read_vectorised(read: Read, lines: list[str], day: date) -> bool:
    """Read ``lines`` as the per-line loop would; False (nothing changed) where it cannot."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        arr = pa.array(lines, pa.string())
        n = len(arr)
        blank = pc.equal(pc.utf8_trim_whitespace(arr), "").to_numpy(zero_copy_only=False)
        if pc.any(pc.match_substring_regex(arr, _UNICODE_CLASSES)).as_py():
            return False
        # A DFA match says which lines have a prefix; splitting at "| " then gives its fields
        # (a matching line holds no other "| " before its message).
        is_main = pc.match_substring_regex(arr, MAIN_LINE.pattern.pattern).to_numpy(zero_copy_only=False)
        is_proc = pc.match_substring_regex(arr, PROCESS_LINE.pattern.pattern).to_numpy(zero_copy_only=False) & ~is_main
        message = arr
        level = pa.array(["INFO"] * n, pa.string())
        times: list = [None] * n
        bad_stamp: dict[int, str] = {}
        for idx_mask, splits in ((is_main, 2), (is_proc, 3)):
            idx = np.flatnonzero(idx_mask)
            if not len(idx):
                continue
            take = pa.array(idx)
            parts = pc.split_pattern(arr.take(take), "| ", max_splits=splits)
            stamp = pc.utf8_rtrim_whitespace(pc.list_element(parts, 0))
            mask = pa.array(idx_mask)
            message = pc.replace_with_mask(message, mask, pc.list_element(parts, splits))
            level = pc.replace_with_mask(level, mask, pc.utf8_rtrim_whitespace(pc.list_element(parts, 1)))
            if splits == 2:
                stamp_t = _clock_times(stamp, day)
            else:
                stamp_t, bad = _stamp_times(stamp)
                bad_stamp = {int(idx[k]): text for k, text in bad.items()}
            for i, t in zip(idx.tolist(), stamp_t, strict=True):
                times[i] = t
        open_ = ~blank
        bulk: dict[str, tuple[np.ndarray, dict]] = {}
        taken = np.zeros(n, bool)
        for kind in _BULK:
            start = _BULK_START.get(kind.name)
            cand = pc.starts_with(message, start) if start else pc.match_substring(message, "└─ Metrics")
            rows = np.flatnonzero(cand.to_numpy(zero_copy_only=False) & open_ & ~taken)
            rows, fields = _extract(message, kind, rows)
            taken[rows] = True
            bulk[kind.name] = (rows, fields)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, ValueError):
        return False

    step_rows_at, step_f = bulk[STEP_LINE.name]
    step_rows = [{"rank": 0, "step": s, "time_s": times[i], "loss": lo, "learning_rate": lr, "max_steps": ms}
                 for i, s, lo, lr, ms in zip(step_rows_at.tolist(), step_f.get("step", []), step_f.get("loss", []),
                                             step_f.get("learning_rate", []), step_f.get("max_steps", []),
                                             strict=True)]
    met_at, met_f = bulk[METRICS_LINE.name]
    owner = (np.searchsorted(step_rows_at, met_at) - 1).tolist()  # each metrics line's step line
    for k, dur, sps in zip(owner, met_f.get("step_duration", []), met_f.get("samples_per_second", []),
                           strict=True):
        if k >= 0:
            step_rows[k].update(step_time_s=dur, samples_per_s=sps)
    mg_at, mg_f = bulk[MULTIGPU_STEP.name]
    mg_steps = mg_f.get("step", [])
    com_at, com_f = bulk[COMMUNICATION.name]
    name = read.path.name
    comm_rows = []
    at_step = (np.searchsorted(mg_at, com_at) - 1).tolist()  # the multi-GPU step line before each
    for i, k, op, r, size, dur, bw in zip(com_at.tolist(), at_step, com_f.get("op", []), com_f.get("rank", []),
                                          com_f.get("size_mb", []), com_f.get("duration_ms", []),
                                          com_f.get("bandwidth_mb_s", []), strict=True):
        comm_rows.append({"rank": r if r is not None else 0, "op": op, "size_bytes": round(size * MB),
                          "duration_ms": dur, "algbw_mb_s": bw, "source": f"{name}:{i + 1}", "time_s": times[i],
                          "step": mg_steps[k] if k >= 0 else None})
    perf_at, perf_f = bulk[PERFORMANCE.name]
    perf_rows = [{"rank": 0, "time_s": times[i], "step": s, "avg_step_time_s": a, "throughput_samples_s": tp,
                  "total_batch_size": b}
                 for i, s, a, tp, b in zip(perf_at.tolist(), perf_f.get("step", []), perf_f.get("avg_step_time_s", []),
                                           perf_f.get("throughput_samples_s", []),
                                           perf_f.get("total_batch_size", []), strict=True)]

    # The other lines, one by one in file order, with the state the bulk lines leave.
    first_mg = int(mg_at[0]) if len(mg_at) else None
    first_step = int(step_rows_at[0]) if len(step_rows_at) else None
    rest = np.flatnonzero(~taken & ~blank)
    todo = sorted(set(rest.tolist()) | set(bad_stamp))
    level_l = level.take(pa.array(todo, pa.int64())).to_pylist() if todo else []
    message_l = message.take(pa.array(todo, pa.int64())).to_pylist() if todo else []
    state: dict = {}
    section_at = -1
    for j, i in enumerate(todo):
        if first_step is not None and first_step < i:
            read.meta.setdefault("max_steps", step_f["max_steps"][0])
        if first_mg is not None and first_mg < i:
            read.meta.setdefault("world_size", mg_f["processes"][0])
        if i in bad_stamp:
            read.note(i + 1, f"value does not convert: timestamp {bad_stamp[i]!r}", lines[i])
        if taken[i]:
            continue
        k = int(np.searchsorted(step_rows_at, i)) - 1
        state["last_step"] = step_rows[k] if k >= 0 else None
        if k >= 0 and step_rows_at[k] > section_at:
            state["section"] = None
        read.lines += 1
        line, t, lvl, msg = lines[i], times[i], level_l[j], message_l[j]
        prefixed = bool(is_main[i] or is_proc[i])
        if not prefixed and _SECTION.match(line) and not HEADER_FIELD.parse(line.strip()):
            state["section"] = "eval" if "EVAL" in line.upper() else "other"
            section_at = i
            read.used += 1
            continue
        before = state.get("section")
        if _message(read, i + 1, msg, lvl, t, state):
            read.used += 1
        elif prefixed:
            _level_event(read, i + 1, lvl, msg, t)
            read.used += 1
        else:
            read.unmatched(i + 1, line)
        if state.get("section") != before:
            section_at = i
    if first_step is not None:
        read.meta.setdefault("max_steps", step_f["max_steps"][0])
    if first_mg is not None:
        read.meta.setdefault("world_size", mg_f["processes"][0])
    nbulk = int(taken.sum())
    read.lines += nbulk
    read.used += nbulk
    read.rows["steps"].extend(step_rows)
    read.rows["comm"].extend(comm_rows)
    read.rows["perf"].extend(perf_rows)
    return True
