"""A session's ``meta`` (``schema.meta.SessionMeta``: its keys are declared there): what its sources
say about it, merged by a declared precedence.

The sources, in order (``META_SOURCES``): our records (rank 0's session_start, session_end,
model/dataset/system info, read by their specs), rank 0's ``summary.json`` (read by
``schema.files.SUMMARY``), the companions of a run folder (results.json), then the files of
other formats. A later source fills what the earlier ones left unknown; it never overrides a
known value, except a guess (``GUESSES``: a duration taken from the last record, the status
"incomplete" of a stream without a session_end), which yields to summary.json's real one.

The facts of ``schema.meta.FACTS`` (world size, nodes, hosts, network, strategy, GPU count, total batch
size) carry their provenance (``<fact>_from``: "stated: ...", "derived: ..." or "inferred (lower bound):
...", ``schema.meta.provenance``) and ``facts_source[fact]`` ("file:line"); between sources they
follow their basis, not the order the files are read in: a stated value replaces a derived or inferred
one (``SessionMeta.offer``). Our records and summary.json state theirs; a reader that does not say
where its world size came from gets its format's ``world_size_from`` (as stated). Where nothing
states the world size, the highest rank the files show (a collective mismatch's two sides and a launcher's
local ranks included) gives a lower bound ("inferred (lower bound):
highest rank seen + 1"), and no world size is ever left below a rank the files show (a diagnostic
says so). A file that only assumes a rank (trainer_state.json, results.json, an earlier logger's
summary: rank 0 by convention, its format's declaration says ``assumed_rank``) does not count as a
rank seen. Where nothing says, the world size is None (unknown, never 1).

What no file says, the files' modification times do, at each read (``liveness``, applied by
``load`` after the cache, so never stored): a session of ours without session_end whose streams
or text logs were written recently is "in progress"; one whose files hold no record and are no
longer written "stopped before its first record".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.assemble import diagnostic
from logkit.ingest.discover import SessionSource
from logkit.ingest.jsonl_lines import Stream
from logkit.ingest.mapping import TYPE
from logkit.ingest.placement import placement_meta
from logkit.ingest.ranks_seen import ranks_seen
from logkit.ingest.readers.formats import Role, declared
from logkit.ingest.safe_io import READ_ERRORS, display, read_whole
from logkit.ingest.session import iso_seconds
from logkit.schema.files import SUMMARY
from logkit.schema.meta import FACTS, META_KEYS, SessionMeta, contract_form
from logkit.schema.records import (
    DATASET_INFO,
    MODEL_INFO,
    REQUIRED_KEYS,
    SESSION_END,
    SESSION_START,
    SYSTEM_INFO,
    RecordSpec,
)
from logkit.schema.values import INDEX, as_int, as_text, check, plain_json
from logkit.schema.vocab import Status

# --- our records ---------------------------------------------------------------------------
# meta key <- (the record of rank 0 it is read from, that record's field): in this order.
RECORD_META: tuple[tuple[str, RecordSpec, str], ...] = (
    *((name, SESSION_START, name) for name in (
        "mode", "world_size", "gpu_count", "model", "backend", "hostname", "mixed_precision", "total_batch_size",
        "max_steps")),
    ("start_time", SESSION_START, "timestamp"), ("end_time", SESSION_END, "timestamp"),
    *((name, SESSION_END, name) for name in (
        "duration_s", "status", "total_steps", "final_loss", "training_time_s", "samples_seen")),
    *((name, SESSION_START, name) for name in ("versions", "config", "gpus", "strategy", "strategy_facts",
                                                         "process_group", "launcher", "timing_source",
                                                         "timing_note")),
)
# Read from the stream's first record where session_start gives none (or 0, or "").
FROM_FIRST = ("world_size", "start_time")
# What a record that lacks them gives: an empty table, no GPUs.
DEFAULTS = {"versions": {}, "gpus": []}
# Records kept whole in meta (without the keys every record has): MFU needs the parameter counts.
WHOLE_META = (MODEL_INFO, DATASET_INFO, SYSTEM_INFO)


def _first(records: list[tuple[int, dict]], spec: RecordSpec, last: bool = False) -> dict | None:
    hits = [r for _, r in records if TYPE.get(r) == spec.type]
    return (hits[-1] if last else hits[0]) if hits else None


def records_meta(streams: dict[int, Stream]) -> SessionMeta:
    """Meta from the lowest rank's (rank 0's) records; empty without records."""
    ranks = sorted(r for r, s in streams.items() if s.records)
    if not ranks:
        return SessionMeta()
    main = streams[ranks[0]]
    first = main.records[0][1]
    found = {SESSION_START.type: _first(main.records, SESSION_START) or {},
             SESSION_END.type: _first(main.records, SESSION_END, last=True) or {}}
    meta = SessionMeta()
    start_line = next((n for n, r in main.records if TYPE.get(r) == SESSION_START.type), None)
    for name, spec, key in RECORD_META:
        value, line, said = spec[key].read(found[spec.type]), start_line, f"the session_start record's {key}"
        if name in FROM_FIRST and not value:
            value, line, said = spec[key].read(first), main.records[0][0], f"the first record's {key}"
        meta[name] = DEFAULTS.get(name) if value is None and name in DEFAULTS else value
        if name in FACTS and value is not None and (value or name != "world_size"):
            meta[f"{name}_from"] = f"stated: {said}"
            meta.facts_source = {**(meta.facts_source or {}), name: f":{line}"}  # the file is our_meta's to add
    for spec in WHOLE_META:
        rec = _first(main.records, spec)
        if rec is not None:
            meta[spec.type] = {k: v for k, v in rec.items() if k not in REQUIRED_KEYS}
    meta.duration_from = "session_end" if meta.duration_s is not None else None
    if meta.duration_s is None and main.last_time is not None:
        # A killed run has no session_end: its last record still bounds how long it ran.
        meta.duration_s, meta.duration_from = main.last_time, "last record"
    if meta.status is None:
        meta.status = Status.INCOMPLETE  # no session_end record: the run was cut off
    return meta


# --- summary.json -----------------------------------------------------------------------------
# The keys of summary.json that fill meta (the document itself is kept whole in meta.summary),
# in the order a session without records lists them.
SUMMARY_META = ("duration_s", "mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time",
                "status", "total_batch_size", "total_steps", "final_loss", "steps_per_second", "samples_per_second")


def read_summary(path: str | Path) -> tuple[dict | None, list[dict]]:
    """Rank 0's summary document (or None) and diagnostics; never raises on content."""
    path = Path(path)
    try:
        data = read_whole(path)
    except READ_ERRORS as exc:
        return None, [diagnostic(str(path), None, f"unreadable: {exc}")]
    try:
        doc = orjson.loads(data.decode("utf-8", errors="replace"))
    except orjson.JSONDecodeError as exc:
        text = data[:200].decode("utf-8", errors="replace")
        return None, [diagnostic(str(path), getattr(exc, "lineno", None), f"invalid JSON: {exc}", text)]
    if not isinstance(doc, dict):
        return None, [diagnostic(str(path), 1, f"not a JSON object ({type(doc).__name__})")]
    return _plain_summary(doc, path)


def _plain_summary(doc: dict, path: Path) -> tuple[dict, list[dict]]:
    """summary.json as every reader of ``meta.summary`` may take it: a key of another type or out of its
    domain (``gpus`` not a list, a total batch size of -5) left out, and noted; each GPU an object whose index is an index
    and whose name is text; integers beyond 64 bits and text that is not text made plain."""
    notes = []
    for f in SUMMARY:  # each key by its type and, for a meta key, its domain (what every reader of it may take)
        raw, key = f.get(doc), META_KEYS.get(f.name)
        if raw is not None and (why := check(raw, f.type, key.domain if key else None)) is not None:
            notes.append(diagnostic(str(path), None, f"{'.'.join(f.raw)}: {why}: left out"))
            doc.pop(f.raw[0], None)
    gpus = doc.get("gpus")
    if isinstance(gpus, list):
        doc["gpus"] = [{**g, "index": _index(g.get("index")), "name": as_text(g.get("name"))}
                       for g in gpus if isinstance(g, dict)]
    return plain_json(doc), notes


def _index(value) -> int | None:
    value = as_int(value)
    return value if check(value, int, INDEX) is None else None


# --- precedence -------------------------------------------------------------------------------
def _unknown(value) -> bool:
    return value is None or (isinstance(value, (list, dict)) and not value)


def _none(value) -> bool:
    return value is None


@dataclass(frozen=True)
class Guess:
    """A value that is only a guess while ``is_guess(meta)``; a later value replaces it when ``real``."""

    is_guess: Callable[[SessionMeta], bool]
    real: Callable[[object], bool]


GUESSES: dict[str, Guess] = {
    "duration_s": Guess(lambda meta: meta.duration_from == "last record", lambda v: v is not None),
    "status": Guess(lambda meta: meta.status == Status.INCOMPLETE, bool),
}


@dataclass(frozen=True)
class MetaSource:
    """One source of meta. ``keys``: what it fills where meta knows nothing yet (None, [] or {});
    ``new_keys``: it also adds any other key meta does not have; ``blank``: which of its
    values say nothing (they fill nothing); ``over_guesses``: its real values replace
    ``GUESSES``; ``none_stated``: keys whose None it gives is a value (the file says there is
    none); ``renames``: its names for meta's keys; ``stamps``: a key it fills, and the key and
    value that then say where the value came from."""

    name: str
    keys: tuple[str, ...] = ()
    new_keys: bool = False
    blank: Callable[[object], bool] = _unknown
    over_guesses: bool = False
    renames: dict = field(default_factory=dict)
    stamps: dict = field(default_factory=dict)
    none_stated: tuple[str, ...] = ()


# Meta keys a file of another format may fill (never overriding what an earlier source said).
OTHER_META = ("mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time", "duration_s",
              "total_batch_size", "max_steps", "total_steps", "final_loss", "status", "steps_per_second",
              "samples_per_second", "training_time_s", "duration_from")
# The first source sets every key it has, None included (meta's keys are the records' own).
RECORDS = MetaSource("records", new_keys=True, blank=lambda v: False)
SUMMARY_JSON = MetaSource("summary.json", SUMMARY_META, blank=_none, over_guesses=True,
                          stamps={"duration_s": ("duration_from", "summary.json"),
                                  "world_size": ("world_size_from", "summary.json")})
# results.json's "config" is a name ("small"), not our config dict
RUN_FOLDER = MetaSource("run folder", ("config_name", "session", "optimizations"), blank=_none,
                        renames={"config": "config_name"})
# a None a reader of another format states for one of these keys is kept: the file says there is none
# (nvidia-smi's "CUDA Version: N/A": a driver without CUDA), which is not a file that does not say
OTHER_FORMATS = MetaSource("other formats", OTHER_META, new_keys=True, none_stated=("cuda_driver_version",))
META_SOURCES = (RECORDS, SUMMARY_JSON, RUN_FOLDER, OTHER_FORMATS)


def _valid(key: str, value, notes: list | None, where: tuple):
    """``(True, value)`` when ``value`` can be meta ``key``'s (its declared type, 64 bits, its domain: a
    world size of 0 cannot), lists and objects made plain (``values.plain_json``); else ``(False, None)``
    and a diagnostic in ``notes`` naming the file (and line) it came from."""
    declared = META_KEYS.get(key)
    if declared is None:
        return True, value
    if isinstance(value, (dict, list)):
        value = plain_json(value)
    why = declared.why_not(value)
    if why is None:
        return True, value
    if notes is not None:
        notes.append(diagnostic(where[0] or "", where[1], f"{key}: {why}: left unknown"))
    return False, None


def merge(meta: SessionMeta, source: MetaSource, values: dict, notes: list | None = None,
          where: tuple = (None, None)) -> None:
    """Fill ``meta`` from ``values``, by ``source``'s place in the precedence; a value that cannot be its
    key's is left out, noted in ``notes`` with ``where`` it came from (file, line)."""
    for key, value in values.items():
        key = source.renames.get(key, key)
        if key in source.keys:
            guess = GUESSES.get(key) if source.over_guesses else None
            if guess is not None and guess.is_guess(meta):
                if not guess.real(value):
                    continue
            elif not _unknown(meta.get(key)):
                continue
        elif not (source.new_keys and key not in meta):
            continue
        if source.blank(value) and not (value is None and key in source.none_stated):
            continue
        ok, value = _valid(key, value, notes, where)
        if not ok:
            continue
        if key in source.stamps:
            stamp_key, stamp = source.stamps[key]
            meta[stamp_key] = stamp
        meta[key] = value


def our_meta(streams: dict[int, Stream], summary: dict | None, source: SessionSource,
             companions: list[dict], notes: list | None = None) -> SessionMeta:
    """Meta from our files: the records, summary.json, a run folder's results.json (``companions``);
    values that cannot be right noted in ``notes``."""
    meta = SessionMeta()
    main = min((r for r, s in streams.items() if s.records), default=None)
    ours = records_meta(streams)
    if ours.facts_source and main is not None:
        name = Path(source.rank_files.get(main) or "").name  # as a line is cited: the file's name
        ours.facts_source = {fact: f"{name}{where}" for fact, where in ours.facts_source.items()}
        for fact, where in ours.facts_source.items():
            ours[f"{fact}_from"] = f"{ours[f'{fact}_from']} ({where})"
    merge(meta, RECORDS, ours, notes, (source.rank_files.get(main), None))
    placed = placement_meta(streams, source.rank_files)  # every rank's host, local rank, GPUs and clock
    for fact in ("hosts", "nodes"):
        if placed.get(fact) is not None:
            meta.offer(fact, placed[fact], placed[f"{fact}_from"], (placed.facts_source or {}).get(fact))
    for key in ("ranks_by_host", "local_ranks_by_host", "gpus_by_host", "clock_offsets"):
        if placed.get(key):
            meta[key] = placed[key]
    if summary is not None:
        merge(meta, SUMMARY_JSON, {name: SUMMARY[name].get(summary) for name in SUMMARY_META}, notes,
              (source.summary, None))
        if meta.world_size_from == SUMMARY_JSON.stamps["world_size"][1]:
            meta.world_size_from = f"stated: summary.json's world_size ({Path(source.summary).name})"
            meta.facts_source = {**(meta.facts_source or {}), "world_size": Path(source.summary).name}
        meta.summary = summary
    if source.run is not None:
        meta.run = source.run
        meta.companion_files = [display(f.path) for f in source.companions]
        for found, f in zip(companions, [f for f in source.companions if declared(f.format).companion_meta],
                            strict=False):
            merge(meta, RUN_FOLDER, found, notes, (f.path, None))
    for fact in FACTS:  # a fact a record or summary.json gave without saying how: the file states it
        if meta.get(fact) is not None and meta.get(f"{fact}_from") is None:
            meta[f"{fact}_from"] = "stated: our records / summary.json"
    return meta


def _ints(reads, frame: str, col: str) -> list[int]:
    """The whole numbers the reads give in column ``col`` of ``frame``."""
    out = []
    for read in reads:
        table = read.tables.get(frame)
        if table is not None and col in table.column_names and pa.types.is_integer(table.column(col).type):
            out += pc.drop_null(table.column(col)).to_pylist()
    return out


def _merge_read(meta: SessionMeta, read, notes: list | None = None) -> None:
    """One file's meta; each fact with where it came from (never one without the other), by its basis."""
    values = read.meta.copy()
    facts = {fact: (values.pop(fact, None), values.pop(f"{fact}_from", None)) for fact in FACTS}
    sources = values.pop(SessionMeta.facts_source.name, None) or {}
    merge(meta, OTHER_FORMATS, values, notes, (read.path, None))
    for fact, (value, said) in facts.items():
        if value is None:
            continue
        ok, value = _valid(fact, value, notes, (read.path, None))
        if not ok:
            continue
        if said is None:  # a reader that does not say: its format's declaration, or the file, states it
            declared_from = declared(read.format).world_size_from if fact == "world_size" else None
            said = declared_from or f"the {read.format} file"
        where = sources.get(fact) or Path(read.path).name
        said = contract_form(said)
        meta.offer(fact, value, said if where in said else f"{said} ({where})", where)
    others = {k: v for k, v in sources.items() if k not in FACTS}
    if others:
        meta.facts_source = {**others, **(meta.facts_source or {})}


def add_reads(meta: SessionMeta, reads: list, streams: bool, notes: list | None = None) -> None:
    """What files of other formats add (``streams``: the session has our streams too); values that
    cannot be right noted in ``notes``."""
    if not reads:
        return
    for read in reads:
        _merge_read(meta, read, notes)
        if declared(read.format).role is Role.BENCHMARK and meta.nccl_tests is None:
            meta.nccl_tests = []  # a benchmark's tables, even none
    meta.formats = sorted({read.format for read in reads})
    seen = ranks_seen(reads)
    if seen is not None:
        _at_least(meta, seen[0] + 1, seen[1], streams, notes)
    if meta.total_steps is None:
        steps = _ints(reads, "steps", "step")
        meta.total_steps = max(steps) if steps else None


def _at_least(meta: SessionMeta, floor: int, where: str, streams: bool, notes: list | None) -> None:
    """The world size is at least the highest rank seen + 1: the lower bound where nothing states one
    (a session of ours knows its ranks from its streams: ``finish``), and never less than it."""
    said = f"inferred (lower bound): highest rank seen + 1 ({where})"
    if meta.world_size is None:
        if not streams:
            meta.offer("world_size", floor, said, where)
        return
    if meta.world_size < floor:
        if notes is not None:
            notes.append(diagnostic(where.rsplit(":", 1)[0], None,
                                    f"world_size {meta.world_size} ({meta.world_size_from}) is below rank {floor - 1}, "
                                    f"which the logs show: raised to {floor}, a lower bound"))
        meta.world_size, meta.world_size_from = floor, said
        meta.facts_source = {**(meta.facts_source or {}), "world_size": where}


# Keys every session's meta has (None where no source says).
ALWAYS = ("mode", "world_size", "gpu_count", "model", "backend", "start_time", "end_time", "duration_s",
          "total_batch_size", "max_steps")


def finish(meta: SessionMeta, source: SessionSource) -> SessionMeta:
    """The session's own facts: its id, kind, files, folder, ranks found."""
    meta.session_id = source.session_id
    meta.source_kind = source.kind
    if (meta.world_size is None or meta.world_size <= max(source.rank_files, default=-1)) and source.rank_files:
        top = max(source.rank_files)
        meta.world_size = top + 1
        meta.world_size_from = f"inferred (lower bound): rank streams found, the highest rank {top} + 1"
        meta.facts_source = {**(meta.facts_source or {}), "world_size": Path(source.rank_files[top]).name}
    if meta.world_size is None:
        meta.world_size_from = None  # unknown: no file says, and no rank was seen
    meta.status = meta.status  # always there (None where no source says)
    meta.ranks_found = sorted(source.rank_files)
    meta.files = [display(p) for p in source.files]
    meta.folder = display(source.folder)
    for key in ALWAYS:
        meta.setdefault(key, None)
    return meta


# --- is it still being written? ---------------------------------------------------------------
# The status of a session of ours without session_end, as of the read (``liveness``): Status.IN_PROGRESS
# (its files were written recently: the run is still going) or Status.NO_RECORD (its files hold no
# record, and nothing writes them).
# "Recently": within max(IN_PROGRESS_MIN_S, IN_PROGRESS_STEPS x the main rank's median step time)
# of the read. Two minutes cover the writer's 0.5 s flush interval, an evaluation or a checkpoint
# between two steps, and clocks of two hosts a little apart; ten steps, runs of slow steps.
IN_PROGRESS_MIN_S = 120.0
IN_PROGRESS_STEPS = 10
# Statuses that say no session_end was read (a reader's or summary.json's status is kept as it is).
NOT_ENDED = (None, Status.INCOMPLETE)
# The frames a record or a line of a run fills (a text log's header fills meta only).
DATA_FRAMES = ("steps", "comm", "perf", "phases", "gpu", "evals", "events")


def in_progress_window(session) -> float:
    """Seconds since the last write within which a session without session_end is in progress."""
    times = session.timed_steps(main_rank=True)["step_time_s"]
    median = float(times.median()) if len(times) else 0.0
    return max(IN_PROGRESS_MIN_S, IN_PROGRESS_STEPS * median)


def _our_files(source: SessionSource) -> list[Path]:
    """The files a run of ours writes while it runs: its rank streams and text logs (``echoes_streams``)."""
    return [source.rank_files[r] for r in sorted(source.rank_files)] + [
        f.path for f in source.extra if declared(f.format).echoes_streams]


def last_written(paths: list[Path]) -> float | None:
    """The latest modification time (POSIX seconds) of ``paths``, read from the files now."""
    times = []
    for path in paths:
        try:
            times.append(os.stat(path).st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def _last_record(meta: SessionMeta) -> float | None:
    """POSIX seconds of the last record, where the records say it in absolute time (a start time
    with its UTC offset, and the elapsed time of the last record)."""
    start, duration = meta.start_time, meta.duration_s
    if meta.duration_from != "last record" or not isinstance(start, str) or duration is None:
        return None
    stamp = iso_seconds(start)
    aware = stamp is not None and datetime.fromisoformat(start.replace("Z", "+00:00")).tzinfo is not None
    return stamp + float(duration) if aware else None


def liveness(session, source: SessionSource, now: float | None = None) -> None:
    """A session of ours that no session_end (nor summary.json) says ended: "in progress" while
    its files were written within ``in_progress_window`` of ``now`` (and its last record, where
    its time is known, is as recent: logs copied without their times are not running);
    ``Status.NO_RECORD`` when its files hold no record and are no longer written; else as it was read
    ("incomplete": killed, or stopped without an end). Adds ``last_written`` (ISO 8601, UTC),
    ``idle_s`` (seconds between it and ``now``) and ``status_detail``."""
    meta = session.meta
    paths = _our_files(source)
    if meta.status not in NOT_ENDED or not paths:
        return
    written = last_written(paths)
    if written is None:
        return
    now = time.time() if now is None else now
    idle, window = round(max(0.0, now - written), 1), in_progress_window(session)
    meta.last_written = datetime.fromtimestamp(written, tz=timezone.utc).isoformat()
    meta.idle_s = idle
    empty = all(getattr(session, name).empty for name in DATA_FRAMES)
    record = _last_record(meta)
    if idle <= window and (record is None or abs(now - record) <= window):
        meta.status = Status.IN_PROGRESS
        meta.status_detail = (f"still running (last written {idle:.0f} s ago"
                                 + ("; no record written yet)" if empty else ")"))
    elif empty:
        meta.status = Status.NO_RECORD
        meta.status_detail = "its files hold no record (killed or failed before the logger's first flush)"
