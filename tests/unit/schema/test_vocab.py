"""Every vocabulary is declared once, in the schema (``schema/vocab.py``, ``schema/findings.py``), and
code names its words instead of spelling them: a scan of the code finds no finding kind, event kind,
status, mode or result word written as a literal where a kind is made, emitted or compared, and no
severity passed as text; what the sample folders give (event kinds, finding kinds, statuses, the
results' words) is all declared. A word is the string it stands for, so the output is unchanged."""

from __future__ import annotations

import ast
import json
import pickle

import orjson
import pandas as pd
import pytest

from logkit.schema.findings import (
    EMITTER_KINDS,
    EMITTER_NOTES,
    NONFINITE_KINDS,
    SCALING_FLAG_KINDS,
    FindingKind,
)
from logkit.schema.records import EVENT_TYPES, EventType
from logkit.schema.vocab import (
    ENDED,
    AlertKind,
    AlertState,
    Basis,
    ComparisonBasis,
    DivergenceKind,
    EventKind,
    FlagKind,
    LineSubkind,
    LossAxis,
    Mode,
    Regime,
    SessionKind,
    Status,
    on_cpu,
)
from tests.support.launch import REPO

VOCABULARIES = (FindingKind, EventKind, LineSubkind, Status, Mode, SessionKind, Regime, Basis, ComparisonBasis,
                LossAxis, FlagKind, DivergenceKind, AlertKind, AlertState)
DECLARATIONS = {REPO / "logkit" / "schema" / name for name in ("vocab.py", "findings.py", "records.py")}
# Words that must be named, never spelled, where a kind is made, emitted or compared.
WORDS = frozenset().union(*(v.words() for v in VOCABULARIES), EVENT_TYPES)
# What a value compared with a word is about (the other side of the comparison names one of these).
ABOUT = ("kind", "status", "regime", "basis", "mode", "axis")
KEYWORDS = ("kind", "subkind", "status", "mode", "regime", "basis")


# --- the declarations ------------------------------------------------------------------------
def test_a_word_is_the_string_it_stands_for():
    word = FindingKind.NCCL_TIMEOUT
    assert word == "nccl_timeout" and hash(word) == hash("nccl_timeout") and f"{word}" == str(word) == "nccl_timeout"
    assert json.dumps([word]) == '["nccl_timeout"]' and orjson.dumps([word]) == b'["nccl_timeout"]'
    assert pd.Series(["nccl_timeout", "x"]).isin([word]).tolist() == [True, False]
    assert pickle.loads(pickle.dumps(word)) is word and FindingKind("nccl_timeout") is word
    with pytest.raises(ValueError):
        Status("finished")


def test_every_word_says_what_it_means():
    for vocabulary in VOCABULARIES:
        assert [m for m in vocabulary if not m.meaning] == [], vocabulary.__name__
    assert all(k.title for k in FindingKind)


def test_the_kinds_the_emitter_writes_are_declared_with_their_severity():
    assert set(EMITTER_KINDS) == {"slow_step", "gpu_util_low", "memory_high", "gpu_memory_high", "loss_spike",
                                  "grad_explode", "grad_vanish"}
    assert all(k.severity is not None for k in (*EMITTER_KINDS.values(), *NONFINITE_KINDS))
    assert EMITTER_NOTES <= set(FindingKind) and set(SCALING_FLAG_KINDS) == set(FlagKind)
    assert set(ENDED) == {"completed", "failed", "interrupted"}


def test_an_event_kind_is_no_record_type_but_the_error_line():
    assert EventKind.words() & set(EVENT_TYPES) == {EventType.ERROR}


@pytest.mark.parametrize("mode, gpus, expected", [
    ("CPU", None, True), ("multi-cpu", None, True), (None, 0, True), ("SINGLE-GPU", 0, True), ("CPU", 2, False),
    (Mode.MULTI_GPU, 4, False), (None, None, None), ("MULTI-GPU", None, None)])
def test_the_cpu_rule(mode, gpus, expected):
    assert on_cpu(mode, gpus) is expected


# --- the scan --------------------------------------------------------------------------------
def _text(node) -> str:
    return ast.unparse(node).lower()


def _spelled(node) -> set[str]:
    """The declared words a node spells: a text constant, or a tuple / list / set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & WORDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_spelled(e) for e in node.elts)) if node.elts else set()
    return set()


def _literal(node) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def spelled_words(source: str) -> list[str]:
    """Where ``source`` spells a kind instead of naming it: ``Finding.make`` with a text severity or
    kind, an event emitted under a text kind, a ``"kind": "..."`` or ``kind="..."`` of a declared
    word, and a declared word compared with a kind, status, regime, basis, mode or axis."""
    out = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, args = node.func.attr, node.args
            if name == "make" and _text(node.func.value) == "finding" and any(_literal(a) for a in args[:2]):
                out.append(f"{where}: Finding.make with a severity or kind in text")
            elif name == "event" and args and _literal(args[0]):
                out.append(f"{where}: an event of kind {_text(args[0])}")
            elif name == "isin" and args and _spelled(args[0]):
                out.append(f"{where}: isin({sorted(_spelled(args[0]))})")
        if isinstance(node, ast.Call):
            out += [f"{where}: {k.arg}={k.value.value!r}" for k in node.keywords
                    if k.arg in KEYWORDS and _spelled(k.value)]
        elif isinstance(node, ast.Dict):
            out += [f"{where}: {k.value!r}: {v.value!r}" for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value in KEYWORDS and _spelled(v)]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            words = set().union(*(_spelled(s) for s in sides))
            if words and any(a in _text(s) for s in sides if not _spelled(s) for a in ABOUT):
                out.append(f"{where}: {_text(node)}")
        elif isinstance(node, ast.Assign) and _spelled(node.value):
            if any(a in _text(t) for t in node.targets for a in ABOUT):
                out.append(f"{where}: {_text(node)}")
    return out


def test_the_scan_sees_a_spelled_word():
    for snippet in ('Finding.make("warning", FindingKind.HANG, sid, t, d)', "Finding.make(s, f'scaling_{k}', sid, t, d)",
                    'read.event("nccl_timeout", 3)', 'ev[ev["kind"] == "stall"]', 'status in ("failed", "interrupted")',
                    'kind.isin(["warning", "error"])', 'meta["status"] = "completed"', 'ev.update(kind="error")',
                    'x = {"kind": "rendezvous_timeout"}', 'c.regime == "strong"', 'curves.loss_axis == "samples seen"'):
        assert spelled_words(snippet), snippet
    for snippet in ('Finding.make(K.severity, K, sid, t, d)', 'rows.sort_values("step", kind="stable")',
                    'frame == "steps"', 'x.level == "ERROR"'):
        assert not spelled_words(snippet), snippet


def test_no_code_spells_a_declared_word():
    found = {}
    for path in sorted((REPO / "logkit").rglob("*.py")):
        if path not in DECLARATIONS:
            hits = spelled_words(path.read_text(encoding="utf-8"))
            if hits:
                found[str(path.relative_to(REPO))] = hits
    assert not found


def test_the_emitter_writes_declared_kinds_by_name():
    """The emitter's finding records name their kind (``subkind=FindingKind.X``), never its text."""
    found = {str(p.relative_to(REPO)): h for p in sorted((REPO / "trainer_hooks").rglob("*.py"))
             if (h := spelled_words(p.read_text(encoding="utf-8")))}
    assert not found


# --- what the sample folders give --------------------------------------------------------------
@pytest.fixture(scope="module")
def samples():
    from logkit.analysis import analyze
    from logkit.run.load import load_sessions

    sessions = load_sessions(REPO / "sample_logs")
    return sessions, analyze(sessions)


def _words(values) -> set[str]:
    return {str(v) for v in values if v is not None and not (isinstance(v, float) and pd.isna(v))}


def test_every_event_kind_of_the_samples_is_declared(samples):
    sessions, _ = samples
    events = pd.concat([s.events for s in sessions if len(s.events)], ignore_index=True)
    assert _words(events["kind"]) - set(EVENT_TYPES) - EventKind.words() == set()
    findings = events[events["kind"].isin([EventType.ANOMALY, EventType.RESOURCE_WARNING, EventType.NAN_DETECTED])]
    assert _words(findings["subkind"]) - FindingKind.words() == set()
    lines = events[events["kind"].isin([EventKind.WARNING, EventKind.ERROR])]
    assert _words(lines["subkind"]) - LineSubkind.words() == set()


def test_every_finding_and_result_word_of_the_samples_is_declared(samples):
    sessions, analysis = samples
    assert analysis.findings and _words(f.kind for f in analysis.findings) - FindingKind.words() == set()
    summaries = analysis.scaling.sessions
    assert _words(s.kind for s in summaries) <= SessionKind.words()
    assert _words(s.mode for s in summaries) <= Mode.words()
    assert _words(s.status for s in summaries) <= Status.words()
    assert _words(s.basis for s in summaries) <= Basis.words()
    comparisons = analysis.scaling.comparisons
    assert comparisons and _words(c.regime for c in comparisons) <= Regime.words()
    assert _words(c.basis for c in comparisons) <= ComparisonBasis.words()
    assert _words(f.kind for c in comparisons for f in c.flags) <= FlagKind.words()
    assert _words([analysis.curves.loss_axis, *(p.aligned_by for p in analysis.loss_parity)]) <= LossAxis.words()
    assert _words(h.basis for h in analysis.health.values()) <= LossAxis.words()
