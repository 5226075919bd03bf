"""A session's meta is typed: ``schema.meta.SessionMeta`` declares every key (type, unit, meaning) and
nothing else can be set or read; code reads it by attribute (a scan finds no literal key read or
written anywhere but in the declaration, and every key a reader or the precedence names is declared);
it stays a dict for JSON, pickling, the cache and exports; what the sample folders give is of the
declared types."""

from __future__ import annotations

import ast
import json
import pickle

import orjson
import pytest

from logkit.ingest import meta as precedence
from logkit.ingest.readers import logkit_lines, nccl_procs, run_facts
from logkit.ingest.session import Session
from logkit.ingest.store import read_session, write_session
from logkit.schema.meta import META_KEYS, Key, SessionMeta, UndeclaredKey
from logkit.schema.records import SESSION_END, SESSION_START
from tests.support.launch import REPO

DECLARATION = REPO / "logkit" / "schema" / "meta.py"


# --- the declaration ---------------------------------------------------------------------------
def test_every_key_is_documented_and_typed():
    assert len(META_KEYS) > 50
    for name, key in META_KEYS.items():
        assert key.name == name and key.doc and key.type, name
    assert META_KEYS["duration_s"].unit == "s" and META_KEYS["total_batch_size"].unit == "samples"


@pytest.mark.parametrize("use", [
    lambda m: SessionMeta(wrold_size=2), lambda m: SessionMeta({"wrold_size": 2}), lambda m: m["wrold_size"],
    lambda m: m.get("wrold_size"), lambda m: "wrold_size" in m, lambda m: m.__setitem__("wrold_size", 2),
    lambda m: m.update(wrold_size=2), lambda m: m.fill(wrold_size=2), lambda m: m.setdefault("wrold_size"),
    lambda m: m.pop("wrold_size", None), lambda m: m | {"wrold_size": 2}, lambda m: Session(meta={"wrold_size": 2})])
def test_an_undeclared_key_can_be_neither_set_nor_read(use):
    with pytest.raises(UndeclaredKey):
        use(SessionMeta(session_id="s"))


def test_an_undeclared_attribute_is_no_key_either():
    meta = SessionMeta()
    with pytest.raises(AttributeError):
        meta.wrold_size = 2  # noqa: B018 - the point
    with pytest.raises(AttributeError):
        meta.wrold_size  # noqa: B018


def test_it_reads_by_attribute_and_stays_a_dict():
    meta = SessionMeta(session_id="s", world_size=2)
    meta.status = "completed"
    meta.fill(world_size=8, model="m")
    assert (meta.session_id, meta.world_size, meta.model, meta.gpu_count) == ("s", 2, "m", None)
    assert list(meta) == ["session_id", "world_size", "status", "model"] and meta == dict(meta)
    assert type(meta.to_dict()) is dict and json.loads(json.dumps(meta)) == meta == orjson.loads(orjson.dumps(meta))
    copied = pickle.loads(pickle.dumps(meta))
    assert type(copied) is SessionMeta and copied == meta and type(meta.copy()) is SessionMeta
    assert Session(meta={"session_id": "s"}).meta.session_id == "s" and type(Session().meta) is SessionMeta


def test_a_stored_session_keeps_its_meta(tmp_path):
    session = Session(meta={"session_id": "s", "world_size": 2, "status": "completed", "gpus": [{"index": 0}]})
    back = read_session(write_session(session, tmp_path / "s", "parquet"))
    assert type(back.meta) is SessionMeta and back.meta == session.meta


def test_the_precedence_and_the_readers_name_declared_keys():
    named = {name for name, _, _ in precedence.RECORD_META} | set(precedence.FROM_FIRST) | set(precedence.DEFAULTS)
    named |= {spec.type for spec in precedence.WHOLE_META} | set(precedence.SUMMARY_META) | set(precedence.OTHER_META)
    named |= set(precedence.ALWAYS) | set(precedence.GUESSES)
    for source in precedence.META_SOURCES:
        named |= set(source.keys) | set(source.renames.values())
        named |= set(source.stamps) | {key for key, _ in source.stamps.values()}
    named |= {name for name, _ in logkit_lines.HEADER_META.values()} | set(run_facts.FACT_META) | set(
        nccl_procs.FACT_META)
    assert named - set(META_KEYS) == set()


def test_a_key_read_from_a_record_has_the_fields_type():
    for name, spec, key in precedence.RECORD_META:
        assert spec in (SESSION_START, SESSION_END)
        declared = META_KEYS[name].type
        assert spec[key].type in (declared if isinstance(declared, tuple) else (declared,)), name


# --- the scan --------------------------------------------------------------------------------
def _is_meta(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "meta") or (isinstance(node, ast.Attribute) and node.attr == "meta")


def _text_key(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def meta_literals(source: str) -> tuple[list[str], set[str]]:
    """(where ``source`` reads or writes a meta key by a literal, the key names it sets by keyword or in a
    dict given to ``update`` / ``fill``)."""
    spelled, named = [], set()
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Subscript) and _is_meta(node.value) and _text_key(node.slice):
            spelled.append(f"{where}: meta[{node.slice.value!r}]")
        elif isinstance(node, ast.Compare) and _is_meta(node.comparators[-1]) and _text_key(node.left):
            spelled.append(f"{where}: {node.left.value!r} in meta")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_meta(node.func.value):
            if node.func.attr in ("get", "setdefault", "pop") and node.args and _text_key(node.args[0]):
                spelled.append(f"{where}: meta.{node.func.attr}({node.args[0].value!r})")
            if node.func.attr in ("update", "fill"):
                named |= {k.arg for k in node.keywords if k.arg}
                named |= {k.value for a in node.args if isinstance(a, ast.Dict) for k in a.keys if _text_key(k)}
    return spelled, named


def test_the_scan_sees_a_literal_key():
    spelled, named = meta_literals('s.meta.get("world_size"); meta["status"] = 1; x = "nccl_tests" in meta\n'
                                   'read.meta.update({"wrold": 1}, model="m"); meta.fill(mode="CPU")')
    assert len(spelled) == 3 and named == {"wrold", "model", "mode"}
    assert meta_literals("s.meta.world_size; meta[key] = v; config.get('seq_len')") == ([], set())


def test_no_code_reads_or_writes_meta_by_a_literal_key():
    spelled, named = {}, set()
    for path in sorted((REPO / "logkit").rglob("*.py")):
        if path != DECLARATION:
            hits, keys = meta_literals(path.read_text(encoding="utf-8"))
            named |= keys
            if hits:
                spelled[str(path.relative_to(REPO))] = hits
    assert not spelled
    assert named and named - set(META_KEYS) == set()


# --- what the sample folders give ---------------------------------------------------------------
def test_the_samples_meta_is_of_the_declared_types():
    from logkit.run.load import load_sessions

    sessions = load_sessions(REPO / "sample_logs")
    assert sessions and all(type(s.meta) is SessionMeta for s in sessions)
    assert {s.meta.session_id: s.meta.mistyped() for s in sessions if s.meta.mistyped()} == {}


def test_a_key_accepts_none_and_its_type():
    number, text = Key(float, "a number"), Key(str, "a text")
    assert number.accepts(None) and number.accepts(2) and number.accepts(2.5) and not number.accepts(True)
    assert text.accepts("x") and not text.accepts(1)
