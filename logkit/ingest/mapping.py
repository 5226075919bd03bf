"""Our JSONL records to frame rows: one mapping, driven by the record specs, for both engines.

Both JSONL engines (``jsonl_arrow``: pyarrow over chunks of whole lines; ``jsonl_lines``: line
by line, repairing what it can) give the same intermediate: a table of the records' raw
columns (``RAW_SCHEMA``, with each record's line number), plus the few records read whole
(``WHOLE_TYPES``: evaluations, and those meta reads). ``map_records`` turns a raw table into
frame tables by ``schema.frames``: each column is read at its field's key path, so a key
renamed in ``schema.records`` is followed here without a change.

    >>> import pyarrow as pa
    >>> from logkit.schema.records import TRAINING_STEP
    >>> rec = TRAINING_STEP.build(type=TRAINING_STEP.type, step=3, step_time_s=0.5, loss=float("nan"))
    >>> frames = map_records(raw_records([rec], [7]), "s_rank0.jsonl", 0)
    >>> frames["steps"].column("step_time_s").to_pylist(), frames["events"].column("source").to_pylist()
    ([0.5], ['s_rank0.jsonl:7'])
"""

from __future__ import annotations

import functools
import math

import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.safe_io import display
from logkit.schema.frames import FRAMES
from logkit.schema.records import (
    EVALUATION,
    EVENT,
    FRAME_SPECS,
    RECORD_SPECS,
    SESSION_ID,
    EventType,
    RecordField,
    RecordSpec,
)
from logkit.schema.values import as_float, as_int, as_text

# The keys every record is routed and placed by, as the specs name them.
TYPE, TIME, RANK, STEP = EVENT["kind"], EVENT["time_s"], EVENT["rank"], EVENT["step"]
LINE = "_line"  # the raw table's column of line numbers (1-based, in the file)
# the raw table's column of each row's "file:line", where its rows come from several files (small streams
# parsed together, ``jsonl_batch``); without it every row is the one file's given to ``map_records``
CITED = "_source"
SOURCE = "source"  # the frames' "file:line" column
# A loss or gradient norm logged as NaN or Inf is a finding of its own (an event).
NONFINITE = ("loss", "grad_norm")

_ARROW = {float: pa.float64(), int: pa.int64(), str: pa.string()}
_ROUTED: tuple[RecordSpec, ...] = (*FRAME_SPECS.values(), EVENT)
# Records read whole: evaluations (their metrics are named freely) and the records meta reads.
WHOLE_TYPES: tuple[str, ...] = tuple(t for t, s in RECORD_SPECS.items() if s.frame in ("meta", "evals"))
_OWN_FRAME = frozenset([*(s.type for s in FRAME_SPECS.values()), EVALUATION.type])  # not the events frame's
_INT64 = (-(2**63), 2**63)


def _insert(tree: dict, f: RecordField) -> None:
    node = tree
    for key in f.raw[:-1]:
        node = node.setdefault(key, {})
    kind = _ARROW[f.type]
    if node.setdefault(f.raw[-1], kind) != kind:
        raise TypeError(f"record key {'.'.join(f.raw)} is declared with two types")


def _fields(tree: dict) -> list[pa.Field]:
    return [pa.field(k, pa.struct(_fields(v)) if isinstance(v, dict) else v) for k, v in tree.items()]


def raw_schema(fields: list[RecordField], items: dict[str, list[RecordField]] | None = None) -> pa.Schema:
    """The Arrow schema of records holding ``fields``, at their key paths (``timing{}`` and
    ``metrics{}`` as structs), and ``items``: a list key's objects' fields (``devices[]``)."""
    tree: dict = {}
    for f in fields:
        _insert(tree, f)
    for key, item_fields in (items or {}).items():
        tree[key] = pa.list_(pa.struct(list(raw_schema(item_fields))))
    return pa.schema(_fields(tree))


# The union of the routed specs' frame fields and the session id (the stream's records are
# checked against it): only the keys used (pyarrow skips the rest: config{}, versions{} ...).
RAW_SCHEMA = raw_schema([*(f for spec in _ROUTED for f in spec.frame_fields), SESSION_ID],
                        {s.items_key: list(s.items.frame_fields) for s in _ROUTED if s.items is not None})


def column(table, raw: tuple[str, ...]):
    """The values at key path ``raw`` of a raw table (or of a struct array: a list's objects)."""
    data = table.column(raw[0]) if isinstance(table, pa.Table) else pc.struct_field(table, raw[0])
    for key in raw[1:]:
        data = pc.struct_field(data, key)
    return data


# --- the per-line engine's half: records (dicts) to a raw table ---------------------------------
def _whole(value) -> int | None:
    out = as_int(value)
    return out if out is not None and _INT64[0] <= out < _INT64[1] else None


def _shown(value) -> str | None:
    """A message is for people: whatever was logged is shown as text."""
    return value if isinstance(value, str) or value is None else str(value)


_READ = {pa.float64(): as_float, pa.int64(): _whole, pa.string(): as_text}
# The Python types JSON gives that a column takes as they are (a bool is no number).
_AS_IS = {pa.float64(): {float, int, type(None)}, pa.int64(): {int, type(None)}, pa.string(): {str, type(None)}}
_MESSAGE = EVENT["message"].raw
_METRICS = EVALUATION["metrics"]


def _array(values: list, kind: pa.DataType, path: tuple[str, ...]) -> pa.Array:
    """``values`` (anything JSON gives) as ``kind``: a value of another type is missing, a list's
    item that is not an object is left out."""
    if pa.types.is_struct(kind):
        groups = [v if isinstance(v, dict) else None for v in values]
        keys = _by_key([g or {} for g in groups], kind)
        children = [_array(keys[f.name], f.type, (*path, f.name)) for f in kind]
        missing = pa.array([g is None for g in groups], pa.bool_())
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=missing)
    if pa.types.is_list(kind):
        lists = [[x for x in v if isinstance(x, dict)] if isinstance(v, list) else None for v in values]
        offsets, flat = [0], []
        for items in lists:
            flat += items or []
            offsets.append(len(flat))
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), _array(flat, kind.value_type, path),
                                        mask=pa.array([x is None for x in lists], pa.bool_()))
    if set(map(type, values)) <= _AS_IS[kind]:
        try:
            return pa.array(values, kind)  # already of the type (the common case: no value by value)
        except (pa.ArrowInvalid, OverflowError, UnicodeEncodeError):
            pass  # an integer beyond int64, text with a lone surrogate (a JSON escape): read value by value
    read = _shown if path == _MESSAGE else _READ[kind]
    return pa.array([read(v) for v in values], kind)


def _by_key(objects: list[dict], fields) -> dict[str, list]:
    """The values of each field's key in ``objects`` (None where one lacks it), walking each
    object's own keys once (fewer than the schema's)."""
    out = {f.name: [None] * len(objects) for f in fields}
    for i, obj in enumerate(objects):
        for key, value in obj.items():
            if (values := out.get(key)) is not None:
                values[i] = value
    return out


def raw_records(records: list[dict], lines: list[int]) -> pa.Table:
    """The raw table of ``records`` (each a dict with a string type), one row each."""
    keys = _by_key(records, RAW_SCHEMA)
    arrays = [_array(keys[f.name], f.type, (f.name,)) for f in RAW_SCHEMA]
    return pa.Table.from_arrays([*arrays, pa.array(lines, pa.int64())], names=[*RAW_SCHEMA.names, LINE])


# --- the mapping --------------------------------------------------------------------------------
def _explode(rows: pa.Table, key: str) -> tuple[pa.Table, pa.Array]:
    """One row per object of each row's list ``key``: (the owning rows, the objects)."""
    lists = rows.column(key).combine_chunks()
    if not len(lists):
        return rows.slice(0, 0), pc.list_flatten(lists)
    return rows.take(pc.list_parent_indices(lists)), pc.list_flatten(lists)


def _sources(rows: pa.Table, prefix: pa.Scalar | None) -> pa.Array:
    """Each row's "file:line": its ``CITED`` value (rows of several files), else ``prefix`` and its line."""
    if prefix is None:
        return rows.column(CITED)
    return pc.binary_join_element_wise(prefix, pc.cast(rows.column(LINE), pa.string()), "")


def _select(frame: str, table: pa.Table) -> pa.Table:
    """The raw columns ``frame`` reads of ``table`` (and ``CITED`` where it has it)."""
    return table.select(_NEEDS[frame] + ([CITED] if CITED in table.column_names else []))


def _project(frame: str, rows: pa.Table, prefix: pa.Scalar | None) -> pa.Table:
    """The columns of ``frame`` that our records give, read at their fields' key paths: a row per object
    of a spec's list (``items``); where the list is optional, a record without it is a row itself."""
    spec = FRAME_SPECS.get(frame, EVENT)
    if spec.items is None:
        return _columns(frame, rows, None, prefix)
    if spec.items_optional:
        listed = pc.is_valid(rows.column(spec.items_key))
        if not pc.all(listed).as_py():
            single = rows.filter(pc.invert(listed))
            alone = _columns(frame, single, None, prefix)
            if not pc.any(listed).as_py():
                return alone
            owners, objects = _explode(rows.filter(listed), spec.items_key)
            both = pa.concat_tables([alone, _columns(frame, owners, objects, prefix)])
            lines = pa.concat_arrays([single.column(LINE).combine_chunks(), owners.column(LINE).combine_chunks()])
            return both.take(pc.sort_indices(lines))  # in the stream's order, whichever layout a record has
    return _columns(frame, *_explode(rows, spec.items_key), prefix)


def _columns(frame: str, rows: pa.Table, objects, prefix: pa.Scalar | None) -> pa.Table:
    """``_project``'s columns of ``rows``, each field of the items' spec read from ``objects`` (one per
    row) where they are given."""
    items = FRAME_SPECS.get(frame, EVENT).items if objects is not None else None
    out = {}
    for col in FRAMES[frame]:
        f = col.source
        if f is not None:
            out[col.name] = column(objects, f.raw) if items is not None and f in items else column(rows, f.raw)
        elif col.name == SOURCE:
            out[SOURCE] = _sources(rows, prefix)
    if frame == "gpu":
        out["host"] = pc.fill_null(out["host"], "")  # a snapshot that names no host: the one host there is
    if frame == "events":
        out[LINE] = rows.column(LINE)
    return pa.table(out)


_EMPTY: dict[str, pa.Table] = {}


def _empty(frame: str, rows: pa.Table) -> pa.Table:
    """``_project`` of no rows (made once per frame: a small stream's frames are mostly empty)."""
    if frame not in _EMPTY:
        _EMPTY[frame] = _project(frame, rows, pa.scalar(""))
    return _EMPTY[frame]


def _needs(frame: str) -> list[str]:
    """The raw table's columns a frame reads (the rest are not carried through its filter)."""
    spec = FRAME_SPECS.get(frame, EVENT)
    items = spec.items if spec.items is not None and not spec.items_optional else ()  # optional: read at the top too
    keys = {col.source.raw[0] for col in FRAMES[frame] if col.source is not None and col.source not in items}
    return [name for name in RAW_SCHEMA.names if name in keys or name == spec.items_key] + [LINE]


_NEEDS = {frame: _needs(frame) for frame in (*FRAME_SPECS, "events")}
# The raw columns the record checks and the stream's latest time read of every row.
_EVERY_ROW = frozenset({TYPE.raw[0], TIME.raw[0], RANK.raw[0], STEP.raw[0], SESSION_ID.raw[0]})
_FRAME_OF = {spec.type: frame for frame, spec in FRAME_SPECS.items()}


def read_of(kind: str) -> frozenset[str]:
    """The raw columns a row of record type ``kind`` is read at: its frame's (an event's, for a type
    with no frame of its own; none for an evaluation, read whole) and every row's."""
    frame = _FRAME_OF.get(kind, None if kind == EVALUATION.type else "events")
    return _EVERY_ROW.union(_NEEDS[frame][:-1] if frame is not None else ())


@functools.lru_cache(maxsize=64)
def read_at(kinds: frozenset[str]) -> pa.Schema:
    """The part of ``RAW_SCHEMA`` rows of record types ``kinds`` are read at (by ``read_of``). The fast
    engine parses a chunk at the columns of the types most of its rows are (pyarrow's parse costs
    per column of the schema, in a line or not), and its other rows again at the rest."""
    names = _EVERY_ROW.union(*map(read_of, kinds))
    return pa.schema([f for f in RAW_SCHEMA if f.name in names])


def nonfinite_event(row: dict) -> dict | None:
    """The ``nan_detected`` event a steps row implies when its loss or grad norm was logged as
    NaN or Inf (in the frame NaN also means "not logged", so the event keeps what was seen)."""
    bad = [(k, row[k]) for k in NONFINITE if isinstance(row.get(k), float) and not math.isfinite(row[k])]
    if not bad:
        return None
    return {"time_s": row.get("time_s"), "rank": row.get("rank"), "level": "ERROR", "kind": EventType.NAN_DETECTED,
            "step": row.get("step"), "subkind": f"nan_{bad[0][0]}",
            "message": ", ".join(f"{k} logged as {v}" for k, v in bad)}


def _nonfinite(steps: pa.Table, rows: pa.Table, prefix: pa.Scalar | None) -> list[dict]:
    """The events of NaN/Inf losses and grad norms among ``steps`` (mapped from the raw ``rows``, cited
    as ``_sources`` cites them)."""
    bad = None
    for name in NONFINITE:
        is_bad = pc.fill_null(pc.invert(pc.is_finite(steps.column(name))), False)
        bad = is_bad if bad is None else pc.or_(bad, is_bad)
    if bad is None or not pc.any(bad).as_py():
        return []
    found = steps.append_column(LINE, rows.column(LINE)).append_column(CITED, _sources(rows, prefix))
    return [{**nonfinite_event(r), SOURCE: r[CITED], LINE: r[LINE]} for r in found.filter(bad).to_pylist()]


def _merged(events: list[pa.Table], found: list[dict]) -> pa.Table:
    """The event tables ``events`` (one schema) and the event rows ``found`` as one table, in file order."""
    parts = [t for t in events if t.num_rows]
    if not found and len(parts) < 2:
        return parts[0] if parts else events[0]
    parts.append(pa.Table.from_pylist(found, schema=events[0].schema))  # the checks' notes: not in line order
    both = pa.concat_tables(parts)
    return both.take(pc.sort_indices(both.column(LINE)))


def _ranked(raw: pa.Table, file_rank: int | pa.Array) -> pa.Table:
    """Records that name no rank are the stream's rank's (``file_rank``: one, or each row's)."""
    if not raw.column(RANK.raw[0]).null_count:
        return raw
    i = raw.schema.get_field_index(RANK.raw[0])
    return raw.set_column(i, RANK.raw[0], pc.fill_null(raw.column(i), file_rank))


def _events(raw: pa.Table, apart: frozenset[str], prefix: pa.Scalar | None) -> pa.Table:
    """The events frame's rows of ``raw``: its records of types with no frame of their own, but ``apart``."""
    routed = pc.is_in(raw.column(TYPE.raw[0]), pa.array(sorted(_OWN_FRAME | apart), pa.string()))
    return _project("events", _select("events", raw).filter(pc.invert(routed)), prefix)


def map_records(raw: pa.Table, source: str | None, file_rank: int | pa.Array, checks=None,
                rest=None) -> dict[str, pa.Table]:
    """The frame tables (steps, comm, perf, gpu, events) of a raw table of one stream's records
    (``source``: how its lines are cited, the file's name; ``file_rank``: the rank of records
    that name none). ``checks``: the stream's ``record_checks.StreamChecks`` (a rank's own
    stream); what they set aside or repair becomes events. ``rest``: (record types, raw table): the
    rows of those types parsed apart (the fast engine's rare rows, ``read_at``) are mapped from that
    table; in ``raw`` they are only checked.

    Rows of several streams one after the other (``jsonl_batch``): ``source`` None, each row's
    "file:line" in the raw table's ``CITED`` column, ``file_rank`` each row's; no ``checks`` (their
    streams are ones the checks find nothing in: ``record_checks.noted_streams``), no ``rest``."""
    source = None if source is None else display(source)  # a file name that is not UTF-8, as any output takes it
    raw = _ranked(raw, file_rank)
    apart, rest_raw = rest if rest is not None else (frozenset(), None)
    if checks is not None:
        kept = checks.rows(raw)
        if rest_raw is not None and kept.num_rows < raw.num_rows:  # what the checks left out, out of these too
            rest_raw = rest_raw.filter(pc.is_in(rest_raw.column(LINE), kept.column(LINE)))
        raw = kept
    rest_raw = _ranked(rest_raw, file_rank) if rest_raw is not None else None
    prefix = None if source is None else pa.scalar(f"{source}:")
    rows = {}
    for frame, spec in FRAME_SPECS.items():
        table = rest_raw if spec.type in apart else raw
        rows[frame] = _select(frame, table).filter(pc.equal(table.column(TYPE.raw[0]), spec.type))
    out = {frame: _project(frame, part, prefix) if part.num_rows else _empty(frame, part) for frame, part in rows.items()}
    step_lines = rows["steps"].column(LINE)
    if checks is not None:
        out["steps"] = checks.values(out["steps"], step_lines)
    events = [_events(raw, apart, prefix)] + ([_events(rest_raw, frozenset(), prefix)] if rest_raw is not None else [])
    found = _nonfinite(out["steps"], rows["steps"], prefix) + (checks.events(source) if checks is not None else [])
    out["events"] = _merged(events, found).drop_columns([LINE])
    return out


_EVALS = pa.schema([(c.name, {"float64": pa.float64(), "Int64": pa.int64()}.get(c.dtype, pa.string()))
                    for c in FRAMES["evals"]])


def evals_from(records: list[tuple[int, dict]], file_rank: int) -> pa.Table:
    """The evals rows of the evaluation records among ``records``: one per metric."""
    rows = []
    for _, rec in records:
        if TYPE.get(rec) != EVALUATION.type:
            continue
        step, rank, time_s = _whole(STEP.get(rec)), _whole(RANK.get(rec)), TIME.read(rec)
        rank = file_rank if rank is None else rank
        for name, value in (_METRICS.read(rec) or {}).items():
            rows.append({"step": step, "name": str(name), "value": as_float(value), "rank": rank, "time_s": time_s})
    return pa.Table.from_pylist(rows, schema=_EVALS)
