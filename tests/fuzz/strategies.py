"""Hypothesis strategies for every format logkit reads, made from the contract, not by hand per file:

- our JSONL records: one strategy per ``RecordSpec`` of ``schema.records`` (each field's value by its
  declared type, or any JSON value in its place), laid out by the spec (``spec.build``), with the keys
  every record carries; a stream is records of any type in any order, written as our emitter writes
  them or torn, mutated, mixed with stray lines;
- ``summary.json`` and a run folder's ``results.json``: their specs (``schema.files.SUMMARY``,
  ``RESULTS_JSON``) the same way;
- our text logs: the line kinds of ``schema.lines`` (each template filled with values of its fields'
  types, or any text);
- every other declared format (``readers.formats.FORMATS``): its real examples under ``sample_logs/``
  (found by sniffing them) under structure-aware mutations (``tests.unit.ingest.test_fuzz_readers``'s).

``session(...)`` draws a whole folder's files: ``{relative path: bytes}``.
"""

from __future__ import annotations

import json
import random
import re
from functools import cache, lru_cache

import orjson
from hypothesis import strategies as st

from logkit.ingest.readers.formats import FORMATS, FileFormat
from logkit.schema.files import RESULTS_JSON, SUMMARY, SessionFiles
from logkit.schema.lines import LINE_KINDS, MAIN_LINE, MESSAGE_KINDS, PROCESS_LINE
from logkit.schema.records import COMMON, RECORD_SPECS, RecordSpec

# numbers at and past every range a reader may keep them in
EDGE_INTS = (0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**23, 10**400)
EDGE_FLOATS = (0.0, -0.0, -1.0, 1e-320, 1e308, float("nan"), float("inf"), float("-inf"))
ODD_TEXT = ("", " ", "\x00", "\ud800", "\udcff", "\u202e", "\ufeff", "../../x", ".hidden", "a" * 5000, "NaN", "1e400",
            "0x10", "[rank12345678901234567890123]:", "\x1b[31m", "</script><script>alert(1)</script>", "{{x}}")

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(EDGE_INTS),
                         st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EDGE_FLOATS),
                         st.text(max_size=40), st.sampled_from(ODD_TEXT))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4)), max_leaves=12)


def _typed(kind: type) -> st.SearchStrategy:
    """A value of a declared type, edges included."""
    if kind is float:
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EDGE_FLOATS),
                         st.integers(-1000, 10**6), st.sampled_from(EDGE_INTS))
    if kind is int:
        return st.one_of(st.integers(-5, 64), st.integers(), st.sampled_from(EDGE_INTS))
    if kind is str:
        return st.one_of(st.text(max_size=30), st.sampled_from(ODD_TEXT))
    if kind in (dict, list, object):
        return json_values
    return json_scalars


def field_value(f) -> st.SearchStrategy:
    """A field's value: mostly of its declared type, sometimes any JSON value (a wrong type)."""
    return st.one_of(_typed(f.type), _typed(f.type), _typed(f.type), json_values)


def _spec_values(spec: RecordSpec, fields) -> st.SearchStrategy:
    """Some of ``fields`` of ``spec`` with values, laid out at the spec's key paths."""
    return st.lists(st.sampled_from(fields), max_size=len(fields), unique_by=lambda f: f.name).flatmap(
        lambda chosen: st.fixed_dictionaries({f.name: field_value(f) for f in chosen})).map(
        lambda values: _layout(spec, values))


def _layout(spec: RecordSpec, values: dict) -> dict:
    """``spec.build`` where a group's key may already hold a value of another type (drawn as any JSON)."""
    out: dict = {}
    for name, value in values.items():
        path, target = spec[name].raw, out
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value
    return out


@cache
def record_of(kind: str) -> st.SearchStrategy:
    """A record of type ``kind`` (``RECORD_SPECS``), with the keys every record has."""
    spec = RECORD_SPECS[kind]
    body = _spec_values(spec, [f for f in spec.fields]) if spec.fields else st.just({})
    items = (st.lists(st.one_of(_spec_values(spec.items, list(spec.items.fields)), json_values), max_size=3)
             if spec.items is not None else st.none())
    return st.tuples(body, items, st.floats(0, 1e5), st.integers(0, 3)).map(
        lambda t: {**t[0], **({spec.items_key: t[1]} if t[1] is not None else {}), "type": kind,
                   "timestamp": "2026-01-01T00:00:00.000000+00:00", "elapsed_s": t[2], "level": "INFO",
                   "message": "m", "rank": t[3], "session_id": "s", "world_size": 2, "step": 1})


records = st.sampled_from(sorted(RECORD_SPECS)).flatmap(record_of)
_COMMON_NAMES = {f.raw[0] for f in COMMON}


def _line(record: dict, how: int) -> bytes:
    """A record as a line: as the emitter writes it, with NaN literals (Python's json), torn, or not JSON."""
    if how == 0:
        try:
            return orjson.dumps(record)
        except TypeError:
            how = 1
    if how == 1:
        return json.dumps(record, default=str).encode("utf-8", "surrogatepass")
    if how == 2:
        return json.dumps(record, default=str).encode("utf-8", "surrogatepass")[:-3]  # torn
    return random.Random(how).choice([b"", b"   ", b"null", b"[1,2]", b"\xff\xfe", b"{\"type\": 3}", b"not json"])


stream_lines = st.lists(st.tuples(records, st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5])), max_size=12).map(
    lambda pairs: b"\n".join(_line(r, how) for r, how in pairs))


def _doc(spec: RecordSpec) -> st.SearchStrategy:
    return st.tuples(_spec_values(spec, list(spec.fields)), st.dictionaries(st.text(max_size=8), json_values,
                                                                            max_size=3)).map(
        lambda t: {**t[1], **t[0]})


def _json_bytes(doc) -> bytes:
    try:
        return orjson.dumps(doc)
    except TypeError:
        return json.dumps(doc, default=str).encode("utf-8", "surrogatepass")


summary_docs = _doc(SUMMARY).map(_json_bytes)
results_docs = _doc(RESULTS_JSON).map(_json_bytes)


def _filled(kind, values: dict) -> str:
    """The template filled; a value its format spec refuses written bare in its place."""
    try:
        return kind.format(**values)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError):
        return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: str(values.get(m[1], "")), kind.template)


def _kind_line(kind) -> st.SearchStrategy:
    return st.fixed_dictionaries({name: st.one_of(_typed(v.convert if v.convert in (int, float) else str), json_scalars)
                                  for name, v in kind.fields.items()}).map(lambda values: _filled(kind, values))


text_messages = st.sampled_from(MESSAGE_KINDS).flatmap(_kind_line)
text_lines = st.one_of(
    text_messages.map(lambda m: MAIN_LINE.format(time="10:00:00", level="INFO", message=m)),
    text_messages.map(lambda m: PROCESS_LINE.format(datetime="2026-01-01 10:00:00", level="WARNING",
                                                    process="MainProcess", message=m)),
    st.sampled_from(sorted(LINE_KINDS)).flatmap(lambda name: _kind_line(LINE_KINDS[name])),
    st.text(max_size=80))
text_logs = st.lists(text_lines, max_size=15).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))


@lru_cache(maxsize=1)
def seeds() -> dict[str, list[tuple[str, bytes]]]:
    """Per declared format with a reader, its real examples: (file name, bytes)."""
    from tests.unit.ingest.test_fuzz_readers import SEEDS

    out: dict[str, list[tuple[str, bytes]]] = {}
    for fmt, name, data in SEEDS:
        out.setdefault(fmt, []).append((name.rsplit("/", 1)[-1], data))
    return out


def _mutated(fmt: str) -> st.SearchStrategy:
    from tests.unit.ingest.test_fuzz_readers import mutate

    return st.tuples(st.sampled_from(seeds()[fmt]), st.randoms(use_true_random=False)).map(
        lambda t: (t[0][0], mutate(t[0][1], t[1])))


def foreign_formats() -> list[str]:
    """The declared formats with a reader and an example (all but our own streams and summary)."""
    return [name for name in FORMATS if name in seeds()]


foreign_files = st.sampled_from(sorted(FORMATS)).filter(lambda f: f in seeds()).flatmap(
    lambda f: _mutated(f).map(lambda pair, fmt=f: (fmt, *pair)))


@st.composite
def our_session(draw) -> dict[str, bytes]:
    """A session folder of ours: rank streams, maybe a summary.json, maybe text logs."""
    sid = draw(st.one_of(st.just("training_20260101_000000"),
                         st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"),
                                 min_size=1, max_size=20).filter(lambda t: t not in (".", ".."))))
    files = SessionFiles(sid)
    out = {f"{sid}/{files.rank_jsonl(r)}": draw(stream_lines) for r in range(draw(st.integers(1, 3)))}
    if draw(st.booleans()):
        out[f"{sid}/{files.summary_json}"] = draw(summary_docs)
    if draw(st.booleans()):
        out[f"{sid}/{files.main_log}"] = draw(text_logs)
    return out


@st.composite
def run_folder(draw) -> dict[str, bytes]:
    """A run folder: results.json from its spec, a mutated trainer_state.json."""
    out = {"v1/run/results.json": draw(results_docs)}
    if draw(st.booleans()) and FileFormat.TRAINER_STATE in seeds():
        out["v1/run/trainer_state.json"] = draw(_mutated(FileFormat.TRAINER_STATE))[1]
    return out


@st.composite
def foreign_folder(draw) -> dict[str, bytes]:
    """One to three files of other formats, mutated, in one folder."""
    out = {}
    for i in range(draw(st.integers(1, 3))):
        fmt, name, data = draw(foreign_files)
        out[f"f{i}_{name}"] = data
    return out


# the generators, by name (``make fuzz`` counts inputs and failures under these names)
GENERATORS = {"our_session": our_session(), "run_folder": run_folder(), "foreign_files": foreign_folder()}
