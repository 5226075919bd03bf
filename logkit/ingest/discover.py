"""Decide what a folder holds: which files form which session, in which format.

Sessions found under a root, in path order:

- our session folders: ``<sid>_rank<N>.jsonl[.gz]``, ``<sid>_summary.json`` and the text logs
  ``<sid>_{main,multigpu,performance}.log`` (some folders have only the latter);
- run folders: a folder holding ``results.json`` and/or ``trainer_state.json`` (session id
  ``<parent>/<folder>``, e.g. ``v1/multi_gpu``); ``checkpoint-N`` copies skipped.
  When the run folder also holds exactly one of our session folders (the pipeline's
  ``sessions/v1/multi_gpu/logs/<id>/``), or its results.json names one of ours
  (``"logkit_session"``), they are one run: our session, with the run folder's files as
  companions (their meta only: the streams already say what they say);
- rank folders: a folder whose sub-folders are ``rank_0``, ``rank_1``, ...: one session, each
  file read as its folder's rank;
- loose files (console captures, nccl-tests, GPU captures, verbose JSONL, ...): they join the
  one session of their folder when there is exactly one, else each is a session of its own.

What a format's files do here is its declaration's (``readers.formats``): a name holding the session id
(``session_file``), a run folder's documents (``run_document``, ``session_key``), dumps gathered into one
session (``gathers``), a file joining only a session found otherwise (``joins_found``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from logkit.ingest.readers.formats import (
    FORMATS,
    FileFormat,
    Format,
    Role,
    declared,
    last_resort,
    session_named,
)
from logkit.ingest.safe_io import ANYWHERE, READ_ERRORS, Refused, Scope, check, display, read_whole

_RANK_DIR = re.compile(r"^rank[_-]?(\d+)$")
_CHECKPOINT_DIR = re.compile(r"^checkpoint-\d+$")
# Loose files of one format in one folder past which they are read as one session (``_loose_sessions``).
MANY_LOOSE = 64


@dataclass(frozen=True)
class SourceFile:
    """One file of a session in a foreign (or our text) format, with the rank its place gives it."""

    format: str
    path: Path
    rank: int | None = None


@dataclass
class SessionSource:
    """The files of one session: its id, folder, our rank streams and summary, and other files."""

    session_id: str
    folder: Path
    rank_files: dict[int, Path] = field(default_factory=dict)
    summary: Path | None = None
    extra: list[SourceFile] = field(default_factory=list)
    kind: str = "logkit"
    companions: list[SourceFile] = field(default_factory=list)  # read for meta only
    run: str | None = None  # the run folder this session belongs to ("v1/multi_gpu")
    notes: list[dict] = field(default_factory=list)  # files of its folder not read, and why (diagnostic rows)

    def __post_init__(self) -> None:
        self.session_id = display(self.session_id)  # a name that is not UTF-8 gives an id any output takes

    @property
    def files(self) -> list[Path]:
        out = [self.rank_files[r] for r in sorted(self.rank_files)]
        out += [self.summary] if self.summary is not None else []
        return out + [f.path for f in self.extra] + [f.path for f in self.companions]


def _sniff(path: Path, loose: bool = False) -> str | None:
    from logkit.ingest.readers.sniff import sniff

    return sniff(path, loose=loose)


def _by_name(folder: Path, name: str) -> tuple[Format, str] | None:
    """(the declaration of the format, the session id) of a file whose name says its session; None for
    any other. Where two formats share a name (our summary.json, an earlier logger's), sniffing says
    which: ours unless the other is recognised."""
    from logkit.ingest.readers.sniff import named_as

    # a name alone is no proof where the format says so (another tool's "..._errors.log"): its lines are asked
    hits = [(f, m["session_id"]) for f, pattern in session_named()
            if (m := pattern.match(name)) is not None and named_as(f, folder / name)]
    if len(hits) < 2:
        return hits[0] if hits else None
    sniffed = _sniff(folder / name)
    return next((h for h in hits if h[0].name == sniffed), None) or next(
        (h for h in hits if h[0].role is Role.OURS), hits[0])


def _add_named(found: dict, folder: Path, path: Path, fmt: Format, sid: str) -> None:
    """A file whose name says its session, added to it (our streams and summary in their places)."""
    src = found.setdefault(sid, SessionSource(sid, folder))
    if fmt.name == FileFormat.LOGKIT_JSONL:
        # A plain stream wins over a gzipped copy of the same rank (sorted: ".jsonl" < ".jsonl.gz").
        src.rank_files.setdefault(int(fmt.session_file.match(path.name)["rank"]), path)
    elif fmt.name == FileFormat.LOGKIT_SUMMARY:
        src.summary = path
    else:
        src.extra.append(SourceFile(fmt.name, path))
        src.kind = fmt.source_kind or src.kind


def _run_folder(folder: Path, run_docs: list[SourceFile]) -> tuple[str, list[SourceFile]]:
    """A run folder's session id (sessions/NAME/{single_gpu,multi_gpu}/ -> "NAME/single_gpu") and its
    documents, in the order of their declarations."""
    sid = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    order = [name for name, f in FORMATS.items() if f.run_document is not None]
    return sid, sorted(run_docs, key=lambda f: order.index(f.format))


def _note(path: Path, why: str) -> dict:
    return {"file": display(path), "line": None, "reason": why, "text": ""}


def regular_files(folder: Path, names, scope: Scope = ANYWHERE, notes: list | None = None) -> list[str]:
    """Of ``names`` in ``folder``, those of regular files (``safe_io.check``: one ``stat`` each); the others
    (a FIFO, a socket, a device, a dangling link, a link out of the folder read) noted in ``notes``."""
    out = []
    for name in names:
        try:
            check(folder / name, scope)
        except Refused as exc:
            if notes is not None:
                notes.append(_note(folder / name, str(exc)))
            continue
        except OSError:
            continue  # gone since it was listed
        out.append(name)
    return out


def sources_in_folder(folder: Path, names: list[str] | None = None, scope: Scope = ANYWHERE,
                      notes: list | None = None) -> list[SessionSource]:
    """Sessions whose files lie directly in ``folder`` (one folder may hold several ids); of ``names``
    (default: the folder's), only regular files are read (the others noted in ``notes``)."""
    if names is None:
        try:
            names = os.listdir(folder)
        except OSError:
            return []
    names = regular_files(folder, names, scope, notes)
    run_names = {f.run_document for f in FORMATS.values() if f.run_document is not None}
    found: dict[str, SessionSource] = {}
    loose: list[SourceFile] = []
    run_docs: list[SourceFile] = []
    joining: list[tuple[str, SourceFile]] = []
    for name in sorted(names):
        path = folder / name
        if (hit := _by_name(folder, name)) is not None:
            fmt, sid = hit
            if fmt.joins_found:
                joining.append((sid, SourceFile(fmt.name, path)))
            else:
                _add_named(found, folder, path, fmt, sid)
            continue
        fmt = FORMATS.get(_sniff(path))
        if fmt is not None and fmt.run_document is not None and name in run_names:
            run_docs.append(SourceFile(fmt.name, path))
        elif fmt is not None and fmt.reader is not None:
            loose.append(SourceFile(fmt.name, path))
    for sid, f in joining:  # the logger's own failures belong to a session found by its other files
        if sid in found:
            found[sid].extra.append(f)
    if run_docs:
        sid, docs = _run_folder(folder, run_docs)
        found.setdefault(sid, SessionSource(sid, folder, kind="run_folder")).extra.extend(docs)
    sources = [found[k] for k in sorted(found)]
    if len(sources) == 1:
        sources[0].extra.extend(loose)
        return sources
    return sources + _loose_sessions(folder, loose)


def _loose_sessions(folder: Path, loose: list[SourceFile]) -> list[SessionSource]:
    """A session per loose file; the files of a format that gathers (the ranks' Flight Recorder dumps
    of one job), several in a folder of their own, make one session; so do more than ``MANY_LOOSE``
    files of one format (a cluster's output folder of thousands of captures: one session, each line
    citing its file, costs what their bytes cost, never thousands of sessions)."""
    out, rest = [], list(loose)
    for name, fmt in FORMATS.items():
        group = [f for f in loose if f.format == name]
        if (fmt.gathers and len(group) > 1) or len(group) > MANY_LOOSE:
            src = SessionSource(folder.name or name, folder, extra=group, kind="file")
            if not fmt.gathers:
                src.notes.append(_note(folder, f"{len(group)} files of format {name} read as one session (more "
                                               f"than {MANY_LOOSE} in one folder; each line cites its file)"))
            out.append(src)
            rest = [f for f in rest if f.format != name]
    return out + [SessionSource(_file_id(f.path), folder, extra=[f], kind="file") for f in rest]


def _file_id(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).stem


def _rank_dirs(folder: Path, dirnames: list[str]) -> dict[int, Path]:
    return {int(m[1]): folder / d for d in dirnames if (m := _RANK_DIR.match(d))}


def _rank_dir_source(folder: Path, ranks: dict[int, Path], scope: Scope = ANYWHERE) -> SessionSource | None:
    """``logs/rank_N/``: every log file in every rank folder, read as that rank."""
    fallback = last_resort()
    sid = display(f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name)
    src = SessionSource(sid, folder, kind="rank_dirs")
    for rank in sorted(ranks):
        for dirpath, dirnames, filenames in os.walk(ranks[rank]):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(regular_files(Path(dirpath), filenames, scope, src.notes)):
                path = Path(dirpath) / name
                fmt = FORMATS.get(_sniff(path, loose=False))
                if fmt is None and Path(name).suffix.lower() in fallback.suffixes:
                    fmt = fallback  # a rank's own log: read it even without a telltale line
                if fmt is not None and fmt.reader is not None:  # our own sessions inside are found as such
                    src.extra.append(SourceFile(fmt.name, path, rank))
    return src if src.extra else None


def source_for_file(path: Path) -> SessionSource | None:
    """The session a single file makes (a file of ours: its whole session folder)."""
    fmt = FORMATS[_sniff(path, loose=True) or last_resort().name]
    if fmt.role is Role.OURS and fmt.session_file is not None:
        m = fmt.session_file.match(path.name)
        sid = m["session_id"] if m is not None else None
        for src in sources_in_folder(path.parent):
            if src.session_id == sid:
                return src
        return None
    return SessionSource(_file_id(path), path.parent, extra=[SourceFile(fmt.name, path)], kind="file")


def _session_folder(folder: str, name: str) -> bool:
    """A folder named as the session of ours it holds (``<id>/<id>_rank0.jsonl``): read even when its name
    begins with a dot (an id such as ``.._x`` from an id asked for with a path in it)."""
    return any(os.path.isfile(os.path.join(folder, name, f"{name}_{suffix}"))
               for suffix in ("rank0.jsonl", "summary.json", "main.log"))


def _subfolders(dirpath: str, dirnames: list[str], scope: Scope, notes: list) -> list[str]:
    """The folders to go down into, in order: not hidden (unless a session of ours), not a checkpoint's
    copy, not a link out of the folder read (unless links are followed)."""
    keep = []
    for d in sorted(dirnames):
        if (d.startswith(".") and not _session_folder(dirpath, d)) or _CHECKPOINT_DIR.match(d):
            continue
        path = os.path.join(dirpath, d)
        if not scope.follow_links and os.path.islink(path) and not scope.inside(os.path.realpath(path)):
            notes.append(_note(Path(path), f"not read: a link out of the folder read (to "
                                           f"{display(os.path.realpath(path))}; --follow-links reads it)"))
            continue
        keep.append(d)
    return keep


def discover(root: str | Path, follow_links: bool = False, notes: list | None = None,
             listed=None) -> list[SessionSource]:
    """Every session under ``root``, recursively (hidden folders skipped, but for sessions of ours), in
    path order. Only regular files are read (``safe_io.check``): a FIFO, a socket, a device, a dangling
    link is skipped, with a diagnostic in the session of its folder, else in ``notes``.

    Links are followed inside ``root``; a link (to a folder or a file) that leads out of it only with
    ``follow_links`` (people gather runs under one folder with links). A folder already visited through
    another path is not read twice. ``listed(n)``: called with the number of files of each folder
    as it is looked at (a progress count).
    """
    root = Path(root)
    scope = Scope.of(root, follow_links)
    out: list[SessionSource] = []
    seen: set[str] = set()
    left = [] if notes is None else notes
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link cycle, or a second link to the same folder
            dirnames[:] = []
            continue
        seen.add(real)
        here: list[dict] = []
        dirnames[:] = _subfolders(dirpath, dirnames, scope, here)
        folder = Path(dirpath)
        found = []
        ranks = _rank_dirs(folder, dirnames)
        if ranks:
            src = _rank_dir_source(folder, ranks, scope)
            if src is not None:
                found.append(src)
            dirnames[:] = [d for d in dirnames if not _RANK_DIR.match(d)]
        found.extend(sources_in_folder(folder, filenames, scope, here))
        if listed is not None:
            listed(len(filenames))
        if found:
            found[0].notes.extend(here)
        else:
            left.extend(here)
        out.extend(found)
    return _unique_ids(_join_runs(out), root)


def _unique_ids(sources: list[SessionSource], root: Path) -> list[SessionSource]:
    """Two sessions of one id (``nvidia_smi_query.csv`` in two folders, a run copied twice) would
    be merged in reports and plots: each of them gets its folder, relative to ``root``, in front
    (``gpu/captures/nvidia_smi_query``); loose files of one stem in one folder keep their suffix."""
    counts = Counter(s.session_id for s in sources)
    for s in sources:
        if counts[s.session_id] > 1:
            rel = display(Path(os.path.relpath(s.folder, root)).as_posix())
            s.session_id = s.session_id if rel == "." else f"{rel}/{s.session_id}"
    counts = Counter(s.session_id for s in sources)
    for s in sources:
        if counts[s.session_id] > 1 and s.kind == "file" and s.extra:
            head, _, _ = s.session_id.rpartition("/")
            name = display(s.extra[0].path.name)
            s.session_id = f"{head}/{name}" if head else name
    return sources


def _named_session(run: SessionSource) -> str | None:
    """The session id a run folder's document names (results.json's ``"logkit_session": ".../<id>"``)."""
    for f in run.extra:
        key = declared(f.format).session_key
        if key is not None:
            try:
                doc = orjson.loads(read_whole(f.path))
            except (*READ_ERRORS, orjson.JSONDecodeError):
                return None
            named = doc.get(key) if isinstance(doc, dict) else None
            return Path(named).name if isinstance(named, str) and named.strip() else None
    return None


def _join_runs(sources: list[SessionSource]) -> list[SessionSource]:
    """A run folder and its session of ours are one session: the one session inside the run
    folder, else the session its results.json names."""
    ours = [s for s in sources if s.rank_files]
    joined: set[int] = set()
    for run in (s for s in sources if s.kind == "run_folder"):
        inside = [s for s in ours if run.folder in s.folder.parents and s.run is None]
        if not inside and (named := _named_session(run)) is not None:
            inside = [s for s in ours if s.session_id == named and s.run is None]
        if len(inside) != 1:
            continue  # none, or several: nothing says which is which
        inside[0].companions.extend(run.extra)
        inside[0].run = run.session_id
        joined.add(id(run))
    return [s for s in sources if id(s) not in joined]


def session_folder(name: str, base: str | Path | None = None) -> Path:
    """The folder of run ``name`` (``sessions/NAME``, as a pipeline of runs lays them out): under
    ``base`` (``base/sessions/NAME`` or ``base/NAME``), else under the current folder
    (``sessions/NAME``, ``logs/sessions/NAME``). Raises ``FileNotFoundError`` saying where it
    looked and which sessions there are."""
    bases = [Path(base)] if base is not None else [Path("."), Path("logs")]
    tried = []
    for folder in bases:
        for candidate in (folder / "sessions" / name, folder / name):
            tried.append(candidate)
            if candidate.is_dir():
                return candidate
    found = sorted({p.name for folder in bases for p in (folder / "sessions").glob("*") if p.is_dir()})
    raise FileNotFoundError(f"no session folder {name!r} (looked for {', '.join(str(t) for t in tried)})"
                            + (f"; sessions found: {', '.join(found)}" if found else ""))


MAX_LISTED = 20  # files the no-sessions message lists (the rest counted)


def _why_not_read(path: Path) -> str:
    """Why a regular file under a folder without sessions was not read: its format, or its first bytes."""
    from logkit.ingest.readers.sniff import Probe, read_with_its_session

    fmt = FORMATS.get(_sniff(path))
    if fmt is not None:
        return f"a {fmt.name} file ({fmt.name.meaning}): read only with a session its other files make, none here" \
            if fmt.joins_found else f"a {fmt.name} file, not enough for a session on its own"
    if read_with_its_session(path):
        return "logkit's summary text or errors log: read with its session, none here"
    probe = Probe(path, False)
    head = probe.head[:60]
    if not head:
        return "empty (or unreadable)"
    first = repr(probe.raw[:24]) if probe.binary else repr(head.splitlines()[0][:60] if head.strip() else head)
    if probe.suffix not in {s for f in FORMATS.values() for s in f.suffixes}:
        return f"its name ({probe.suffix or 'no suffix'}) is no log's and its first bytes ({first}) none of the formats"
    return f"its first bytes ({first}) are none of the formats looked for"


def nothing_found(root: str | Path, follow_links: bool = False) -> str:
    """The message for a folder where no session was found: what was looked for (the formats), and each
    file looked at with why it was not read."""
    root = Path(root)
    formats = "; ".join(f"{f.name} ({f.name.meaning.replace('``', '')})" if isinstance(f.name, FileFormat)
                        else f.name for f in FORMATS.values())
    lines = [f"no logkit sessions found under {display(root)}", f"  formats looked for: {formats}"]
    scope = Scope.of(root, follow_links)
    looked: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow_links):
        dirnames[:] = _subfolders(dirpath, dirnames, scope, [])
        looked += [Path(dirpath) / n for n in regular_files(Path(dirpath), sorted(filenames), scope)]
    if not looked:
        lines.append("  no files in it")
    for path in looked[:MAX_LISTED]:
        lines.append(f"  {display(path)}: not read: {_why_not_read(path)}")
    if len(looked) > MAX_LISTED:
        lines.append(f"  ... and {len(looked) - MAX_LISTED} more files, none of a format looked for")
    return "\n".join(lines)
