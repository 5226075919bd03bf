"""Assemble a ``Session`` from the files of one session, and load every session under a folder."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from logkit.ingest.discover import SessionSource, discover, sources_in_folder
from logkit.ingest.jsonl import diagnostic, read_jsonl
from logkit.ingest.records import FrameRows, integer, num, text
from logkit.ingest.session import Session, make_frame
from logkit.ingest.summary import read_summary, summary_meta
from logkit.schema import RANK_JSONL_RE, SUMMARY_JSON_RE, EventType

__all__ = ["load_session", "load_sessions", "build_session", "start_sort_key"]


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
        "gpus": start.get("gpus") if isinstance(start.get("gpus"), list) else [],
    })
    meta["duration_from"] = "session_end" if meta["duration_s"] is not None else None
    if meta["duration_s"] is None:
        # A killed run has no session_end: its last record still bounds how long it ran.
        last = max((num(r.get("elapsed_s")) for _, r in main if num(r.get("elapsed_s")) is not None), default=None)
        if last is not None:
            meta["duration_s"], meta["duration_from"] = last, "last record"
    if meta["status"] is None:
        meta["status"] = "incomplete"  # no session_end record: the run was cut off
    return meta


def build_session(source: SessionSource) -> Session:
    """Read the files of ``source`` into a ``Session`` (never raises on content)."""
    rows = FrameRows()
    diagnostics: list[dict] = []
    by_rank: dict[int, list[tuple[int, dict]]] = {}
    for rank in sorted(source.rank_files):
        path = source.rank_files[rank]
        read = read_jsonl(path)
        diagnostics.extend(read.diagnostics)
        by_rank[rank] = read.records
        for line, record in read.records:
            rows.add(record, path, line, rank)

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
    meta["session_id"] = source.session_id
    if meta.get("world_size") is None and source.rank_files:
        meta["world_size"] = max(source.rank_files) + 1
    meta.setdefault("status", None)
    meta["ranks_found"] = sorted(source.rank_files)
    meta["files"] = [str(p) for p in source.files]
    meta["folder"] = str(source.folder)
    for key in ("mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time",
                "duration_s", "total_batch_size", "max_steps"):
        meta.setdefault(key, None)

    frames = {name: make_frame(name, r) for name, r in rows.rows.items()}
    frames["diagnostics"] = make_frame("diagnostics", diagnostics)
    return Session(meta=meta, **frames)


def start_sort_key(meta: dict) -> tuple:
    """Sort key: start time (sessions without one last), then session id."""
    start = meta.get("start_time")
    stamp = None
    if isinstance(start, str):
        try:
            # A naive timestamp is read as local time (LOG_FORMATS.md, Units).
            stamp = datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp()
        except ValueError:
            stamp = None
    return (stamp is None, stamp or 0.0, meta.get("session_id") or "", meta.get("folder") or "")


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
        m = RANK_JSONL_RE.match(path.name) or SUMMARY_JSON_RE.match(path.name)
        if m is None:
            return _empty(path, "not a logkit session file (expected <sid>_rank<N>.jsonl or <sid>_summary.json)")
        for src in sources_in_folder(path.parent):
            if src.session_id == m["session_id"]:
                return build_session(src)
        return _empty(path, "file could not be listed with its folder")
    sources = sources_in_folder(path) or discover(path)
    if not sources:
        return _empty(path, "no logkit session files (<sid>_rank<N>.jsonl, <sid>_summary.json) found")
    named = [s for s in sources if s.session_id == path.name]
    if named or len(sources) == 1:
        return build_session((named or sources)[0])
    sessions = sorted((build_session(s) for s in sources), key=lambda s: start_sort_key(s.meta))
    chosen = sessions[0]
    others = ", ".join(s.session_id for s in sessions[1:])
    note = diagnostic(str(path), None, f"folder holds {len(sessions)} sessions; loaded the earliest, "
                                       f"not: {others} (use load_sessions)")
    chosen.diagnostics = make_frame("diagnostics", [*chosen.diagnostics.to_dict("records"), note])
    return chosen


def load_sessions(root: str | Path) -> list[Session]:
    """Every session under ``root`` (recursively), sorted by start time, ties by session id.

    Raises ``FileNotFoundError`` only when ``root`` does not exist; a folder without
    sessions gives an empty list.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    if root.is_file():
        session = load_session(root)
        return [session] if session.meta.get("ranks_found") or session.meta.get("summary") else []
    sessions = [build_session(s) for s in discover(root)]
    return sorted(sessions, key=lambda s: start_sort_key(s.meta))
