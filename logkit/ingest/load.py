"""Assemble a ``Session`` from the files of one session, and load every session under a folder."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd

from logkit.ingest.arrow_jsonl import FRAMES, read_fast
from logkit.ingest.discover import SessionSource, discover, source_for_file, sources_in_folder
from logkit.ingest.frame_builder import FrameBuilder, arrow_frame
from logkit.ingest.jsonl import diagnostic, read_jsonl
from logkit.ingest.readers.base import Read
from logkit.ingest.records import FrameRows, integer, num, text
from logkit.ingest.session import Session, concat_frames, make_frame
from logkit.ingest.summary import read_summary, summary_meta
from logkit.schema import REQUIRED_KEYS, EventType

__all__ = ["load_session", "load_sessions", "build_session", "FAST_JSONL"]

PROGRESS_MIN_BYTES = 64_000_000
# The pyarrow path for our JSONL streams (arrow_jsonl); False forces the per-line reader everywhere.
FAST_JSONL = True


def _first(records: list[tuple[int, dict]], kind: str, last: bool = False) -> dict | None:
    hits = [r for _, r in records if r.get("type") == kind]
    if not hits:
        return None
    return hits[-1] if last else hits[0]


def _meta_from_records(by_rank: dict[int, list[tuple[int, dict]]]) -> dict:
    """Meta from the lowest rank's (rank 0's) session_start and session_end records."""
    meta: dict = {}
    ranks = sorted(r for r, recs in by_rank.items() if recs)
    if not ranks:
        return meta
    main = by_rank[ranks[0]]
    start = _first(main, EventType.SESSION_START) or {}
    end = _first(main, EventType.SESSION_END, last=True) or {}
    first = main[0][1]
    meta.update({
        "mode": text(start.get("mode")),
        "world_size": integer(start.get("world_size")) or integer(first.get("world_size")),
        "gpu_count": integer(start.get("gpu_count")),
        "model": text(start.get("model_name")),
        "backend": text(start.get("backend")),
        "hostname": text(start.get("hostname")),
        "mixed_precision": text(start.get("mixed_precision")),
        "total_batch_size": integer(start.get("total_batch_size")),
        "max_steps": integer(start.get("max_steps")),
        "start_time": text(start.get("timestamp")) or text(first.get("timestamp")),
        "end_time": text(end.get("timestamp")),
        "duration_s": num(end.get("duration_s")),
        "status": text(end.get("status")),
        "total_steps": integer(end.get("total_steps")),
        "final_loss": num(end.get("final_loss")),
        "training_time_s": num(end.get("training_time_s")),
        "samples_seen": integer(end.get("samples_seen")),
        "versions": start.get("versions") if isinstance(start.get("versions"), dict) else {},
        "config": start.get("config") if isinstance(start.get("config"), dict) else None,
        "gpus": start.get("gpus") if isinstance(start.get("gpus"), list) else [],
    })
    # model, data and host facts, as logged (MFU needs the parameter counts)
    for kind in (EventType.MODEL_INFO, EventType.DATASET_INFO, EventType.SYSTEM_INFO):
        rec = _first(main, kind)
        if rec is not None:
            meta[kind] = {k: v for k, v in rec.items() if k not in REQUIRED_KEYS}
    meta["duration_from"] = "session_end" if meta["duration_s"] is not None else None
    if meta["duration_s"] is None:
        # A killed run has no session_end: its last record still bounds how long it ran.
        last = max((num(r.get("elapsed_s")) for _, r in main if num(r.get("elapsed_s")) is not None), default=None)
        if last is not None:
            meta["duration_s"], meta["duration_from"] = last, "last record"
    if meta["status"] is None:
        meta["status"] = "incomplete"  # no session_end record: the run was cut off
    return meta


# Meta keys a foreign file may fill (never overriding what our own records said).
_META_KEYS = ("mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time", "duration_s",
              "total_batch_size", "max_steps", "total_steps", "final_loss", "status", "steps_per_second",
              "samples_per_second", "training_time_s", "duration_from")
_TEXT_ORDER = ("main", "multigpu", "performance")


def _read_extras(source: SessionSource, skip_text: bool) -> list[Read]:
    from logkit.ingest.readers import READERS

    reads = []
    for f in source.extra:
        if f.format == "logkit_text" and skip_text:
            continue  # the JSONL streams say all the text logs say, and more
        reads.append(READERS[f.format](f.path, rank=f.rank))
    return reads


def _companion_meta(source: SessionSource, meta: dict) -> None:
    """What a run folder's files add to our session (seed 002: its name, config, options)."""
    if source.run is None:
        return
    from logkit.ingest.readers import READERS

    meta["run"] = source.run
    meta["companion_files"] = [str(f.path) for f in source.companions]
    for f in source.companions:
        if f.format != "results_json":
            continue  # trainer_state.json, the console capture: the streams hold the same, exactly
        found = READERS[f.format](f.path).meta
        for key, name in (("config", "config_name"), ("session", "session"), ("optimizations", "optimizations")):
            if found.get(key) is not None and meta.get(name) is None:
                meta[name] = found[key]  # results.json's "config" is a name ("small"), not our config dict


def _stamp(value) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _shift_times(reads: list[Read], start: float | None) -> float | None:
    """Absolute times (``time_base == "epoch"``) become seconds since the session's start: the
    start time our records name, else the earliest time any file gives."""
    import pyarrow.compute as pc

    epoch_reads = [read for read in reads if read.time_base == "epoch"]
    stamps = [r.get("time_s") for read in epoch_reads for rows in read.rows.values() for r in rows]
    stamps = [t for t in stamps if isinstance(t, (int, float)) and t == t]
    stamps += [m for read in epoch_reads for table in read.tables.values()
               if (m := pc.min(table["time_s"], skip_nulls=True).as_py()) is not None and m == m]
    if not stamps:
        return start
    t0 = start if start is not None else min(stamps)
    for read in epoch_reads:
        for rows in read.rows.values():
            for r in rows:
                t = r.get("time_s")
                r["time_s"] = t - t0 if isinstance(t, (int, float)) else None
        for name, table in read.tables.items():
            i = table.schema.get_field_index("time_s")
            read.tables[name] = table.set_column(i, "time_s", pc.subtract(table["time_s"], t0))
    return t0


def _assemble(name: str, parts: list, extra_columns: bool) -> pd.DataFrame:
    """One frame from pieces in file order: frames (the fast path's) and row lists (the rest)."""
    frames: list[pd.DataFrame] = []
    rows: list[dict] = []
    for part in parts:
        if isinstance(part, pd.DataFrame):
            if rows:
                frames.append(make_frame(name, rows, extra_columns))
                rows = []
            frames.append(part)
        else:
            rows.extend(part)
    if rows or not frames:
        frames.append(make_frame(name, rows, extra_columns))
    return concat_frames(name, frames)


def _ranks_seen(rows: dict[str, list[dict]]) -> int | None:
    """World size of a session without our records: NCCL's nranks, else the ranks its lines name."""
    nranks = [r["nranks"] for r in rows["events"] if isinstance(r.get("nranks"), int)]
    if nranks:
        return max(nranks)
    ranks = {r.get("rank") for name in ("steps", "events", "comm") for r in rows[name]}
    ranks = {r for r in ranks if isinstance(r, int) and r >= 0}
    return max(ranks) + 1 if ranks else None


def build_session(source: SessionSource) -> Session:
    """Read the files of ``source`` into a ``Session`` (never raises on content)."""
    rows = FrameRows()
    diagnostics: list[dict] = []
    by_rank: dict[int, list[tuple[int, dict]]] = {}
    pieces: dict[str, list] = {name: [] for name in rows.rows}  # per frame, in file order
    builders: dict[str, FrameBuilder] = {}  # the fast path's rows since the last per-line read

    def close_builders() -> None:
        for name, builder in builders.items():
            if builder.rows:
                pieces[name].append(builder.frame())
        builders.clear()

    for rank in sorted(source.rank_files):
        path = source.rank_files[rank]
        if FAST_JSONL:
            if not builders:
                builders.update({name: FrameBuilder(name) for name in FRAMES})
            fast = read_fast(path, rank, builders)
            if fast is not None:
                by_rank[rank] = fast.meta_records
                pieces["evals"].append(fast.evals)
                continue
            close_builders()  # the per-line reader's rows come after them, in file order
        read = read_jsonl(path)
        diagnostics.extend(read.diagnostics)
        by_rank[rank] = read.records
        file_rows = FrameRows()
        for line, record in read.records:
            file_rows.add(record, path, line, rank)
        for name, frame_rows in file_rows.rows.items():
            pieces[name].append(frame_rows)
    close_builders()

    meta = _meta_from_records(by_rank)
    doc = None
    if source.summary is not None:
        doc, notes = read_summary(source.summary)
        diagnostics.extend(notes)
    if doc is not None:
        from_summary = summary_meta(doc)
        if meta.get("duration_from") in (None, "last record") and from_summary.get("duration_s") is not None:
            meta["duration_from"] = "summary.json"
            meta["duration_s"] = None
        if meta.get("status") == "incomplete" and from_summary.get("status"):
            meta["status"] = None
        for key, value in from_summary.items():
            if key != "session_id" and meta.get(key) in (None, [], {}) and value is not None:
                meta[key] = value
        meta["summary"] = doc

    _companion_meta(source, meta)
    reads = _read_extras(source, skip_text=bool(source.rank_files))
    tables: dict[str, list] = {name: [] for name in rows.rows}  # the column readers' rows
    if reads:
        if not by_rank and meta.get("status") == "incomplete":
            meta["status"] = None  # no streams: "incomplete" would only say that none were found
        _shift_times(reads, _stamp(meta.get("start_time")) if by_rank else None)
        formats = []
        for read in reads:
            diagnostics.extend(read.diagnostics)
            formats.append(read.format)
            for name, frame_rows in read.rows.items():
                rows.rows[name].extend(frame_rows)
            for name, table in read.tables.items():
                tables[name].append(table)
            for key, value in read.meta.items():
                if key in _META_KEYS or key not in meta:
                    if meta.get(key) in (None, [], {}) and value not in (None, [], {}):
                        meta[key] = value
            if read.format == "nccl_tests":
                meta.setdefault("nccl_tests", [])
        meta["formats"] = sorted(set(formats))
        if not by_rank and meta.get("world_size") is None:
            meta["world_size"] = _ranks_seen(rows.rows)
        if meta.get("total_steps") is None:
            steps = [r["step"] for r in rows.rows["steps"] if isinstance(r.get("step"), int)]
            meta["total_steps"] = max(steps) if steps else None
    meta["session_id"] = source.session_id
    meta["source_kind"] = source.kind
    if meta.get("world_size") is None and source.rank_files:
        meta["world_size"] = max(source.rank_files) + 1
    meta.setdefault("status", None)
    meta["ranks_found"] = sorted(source.rank_files)
    meta["files"] = [str(p) for p in source.files]
    meta["folder"] = str(source.folder)
    for key in ("mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time",
                "duration_s", "total_batch_size", "max_steps"):
        meta.setdefault(key, None)

    for name, frame_rows in rows.rows.items():
        if frame_rows:
            pieces[name].append(frame_rows)
        if tables[name]:
            pieces[name].append(arrow_frame(name, tables[name]))
    frames = {name: _assemble(name, parts, extra_columns=bool(reads)) for name, parts in pieces.items()}
    if reads:
        # Lines out of time order (several captures, clocks of several hosts): sort by time, stable.
        for name in ("events", "gpu"):
            frames[name] = frames[name].sort_values("time_s", kind="stable", na_position="last",
                                                    ignore_index=True)
    frames["diagnostics"] = make_frame("diagnostics", diagnostics)
    return Session(meta=meta, **frames)


def _check_readable(path: Path) -> None:
    """A path that exists but cannot be read is the user's to fix: say so plainly."""
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise PermissionError(f"cannot read {path}: {exc.strerror or exc}") from None


def _empty(path: Path, reason: str) -> Session:
    session = Session.empty({"session_id": path.name, "folder": str(path), "files": [], "ranks_found": []})
    session.diagnostics = make_frame("diagnostics", [diagnostic(str(path), None, reason)])
    return session


def load_session(path: str | Path) -> Session:
    """One session from a session folder, or from one of its files (its whole session is read).

    A folder that holds no session directly is searched below; when that finds several, the
    earliest is returned and a diagnostic names the others. Raises ``FileNotFoundError``
    only when ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_file():
        _check_readable(path)
        src = source_for_file(path)
        if src is None:
            return _empty(path, "file could not be listed with its folder")
        return build_session(src)
    sources = sources_in_folder(path) or discover(path)
    if not sources:
        return _empty(path, "no training logs found (none of the formats of LOG_FORMATS.md)")
    named = [s for s in sources if s.session_id == path.name]
    if named or len(sources) == 1:
        return build_session((named or sources)[0])
    sessions = sorted((build_session(s) for s in sources), key=Session.start_key)
    chosen = sessions[0]
    others = ", ".join(s.session_id for s in sessions[1:])
    note = diagnostic(str(path), None, f"folder holds {len(sessions)} sessions; loaded the earliest, "
                                       f"not: {others} (use load_sessions)")
    chosen.diagnostics = make_frame("diagnostics", [*chosen.diagnostics.to_dict("records"), note])
    return chosen


def _progress_bar(sources: list[SessionSource], progress: bool | None):
    """tqdm over the bytes to read, on stderr: when asked, or on a terminal for a long ingest."""
    import os
    import sys

    total = 0
    for src in sources:
        for p in src.files:
            try:
                total += os.stat(p).st_size
            except OSError:
                pass
    show = progress if progress is not None else (sys.stderr.isatty() and total > PROGRESS_MIN_BYTES)
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc="reading logs", file=sys.stderr, leave=False)


def _source_bytes(src: SessionSource) -> int:
    import os

    total = 0
    for p in src.files:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


def build_sessions(sources: list[SessionSource], cache: bool = False, progress: bool | None = None) -> list[Session]:
    """Sessions of ``sources`` (from the cache where it is valid), sorted by start time."""
    bar = _progress_bar(sources, progress)
    sessions = []
    for src in sources:
        session = None
        if cache:
            from logkit.ingest.cache import load_cached, store

            session = load_cached(src)
            if session is None:
                session = build_session(src)
                store(src, session)
        else:
            session = build_session(src)
        sessions.append(session)
        if bar is not None:
            bar.update(_source_bytes(src))
    if bar is not None:
        bar.close()
    return sorted(sessions, key=Session.start_key)


def load_sessions(root: str | Path, cache: bool = False, progress: bool | None = None) -> list[Session]:
    """Every session under ``root`` (recursively), sorted by start time, ties by session id.

    ``cache``: reuse parsed sessions from the Parquet cache (``logkit.ingest.cache``) while
    their files are unchanged. ``progress``: a progress bar on stderr (None: on a terminal,
    for ingests over 64 MB). Raises ``FileNotFoundError`` only when ``root`` does not exist
    (``PermissionError`` when a file given cannot be read); a folder without sessions gives
    an empty list.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    if root.is_file():
        return [load_session(root)]
    return build_sessions(discover(root), cache=cache, progress=progress)
