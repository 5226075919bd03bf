"""Every format is declared once (``logkit/ingest/readers/formats.py``): what the rest of logkit asks of a
format is derived from its declaration, and no code spells a format's name. A format declared at run
time (a made-up ``foo_tool`` GPU capture) is sniffed, discovered, read, kept out of the comparisons and
analysed with no other change: the recipe of docs/ARCHITECTURE.md ("A new log format to read") touches
nothing else in the code."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import re
import shutil
from pathlib import Path

import pytest

from logkit.analysis.results import Analysis
from logkit.ingest.readers import READERS, read_file, sniff
from logkit.ingest.readers.formats import (
    FORMATS,
    TEXT_SUFFIXES,
    FileFormat,
    Format,
    Reader,
    Role,
    declared,
    with_role,
)
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"
WORDS = FileFormat.words()
# the declarations, and the other vocabularies (a session kind nccl_tests, an event kind flight_recorder)
DECLARATIONS = {REPO / "logkit" / "ingest" / "readers" / "formats.py", REPO / "logkit" / "schema" / "vocab.py"}
# An analysis result named like a format (``Analysis.nccl_tests``, the nccl-tests table) may be spelled where
# that field is named: the results and the renderers.
FIELDS = {f.name for f in dataclasses.fields(Analysis)} & WORDS
FIELD_NAMERS = ("logkit/report/", "logkit/analysis/results/")


# --- the declarations ------------------------------------------------------------------------------
def test_every_format_is_a_declared_word_with_its_meaning():
    assert set(FORMATS) == WORDS and all(name == f.name for name, f in FORMATS.items())
    assert all(isinstance(f.name, FileFormat) and f.name.meaning for f in FORMATS.values())
    assert all(r.meaning for r in Role)
    nobody = declared("nobody_declared_it")
    assert nobody.role is Role.TRAINING and nobody.reader is None and nobody.telltale is None


def test_every_reader_is_there_and_lazy():
    for name in READERS:
        reader = READERS[name]
        assert isinstance(reader, Reader) and reader.module.startswith("logkit.ingest.readers.")
        assert callable(getattr(importlib.import_module(reader.module), reader.name)), name
    assert set(READERS) == {n for n, f in FORMATS.items() if f.reader is not None}
    # our streams and summary.json: read by the session reader itself
    assert set(WORDS) - set(READERS) == {FileFormat.LOGKIT_JSONL, FileFormat.LOGKIT_SUMMARY}
    with pytest.raises(KeyError):
        READERS[FileFormat.LOGKIT_JSONL]


def test_the_derived_facts_are_the_ones_the_code_had():
    """What discover, meta, groups and headline used to spell, now read off the declarations."""
    assert with_role(Role.GPU_CAPTURE) == {"nvidia_smi_csv", "nvidia_smi_dmon", "nvidia_smi_table", "nvidia_smi_query",
                                           "gpustat"}
    assert with_role(Role.BENCHMARK) == {"nccl_tests"}
    assumed = {n for n, f in FORMATS.items() if f.assumed_rank}
    assert assumed == {"trainer_state", "results_json", "legacy_summary", "trainer_results", "llamafactory_log",
                       "ms_swift_log"}
    assert {n: f.world_size_from for n, f in FORMATS.items() if f.world_size_from} == {
        "results_json": "results.json", "legacy_summary": "an earlier logger's summary (gpu_count)",
        "logkit_text": "our text logs (World size / Processes)", "verbose_jsonl": "verbose JSONL"}
    assert [(n, f.run_document) for n, f in FORMATS.items() if f.run_document] == [
        ("results_json", "results.json"), ("trainer_state", "trainer_state.json"),
        ("trainer_results", "all_results.json"), ("llamafactory_log", "trainer_log.jsonl"),
        ("ms_swift_log", "logging.jsonl"), ("ms_swift_args", "args.json")]
    assert [(n, f.totals) for n, f in FORMATS.items() if f.totals] == [
        ("results_json", "results.json"), ("trainer_state", "trainer_state.json"),
        ("legacy_summary", "summary.json (first version)"), ("trainer_results", "all_results.json")]
    by_priority = sorted(FORMATS.values(), key=lambda f: f.priority)
    text = [f.name for f in by_priority if isinstance(f.telltale, re.Pattern)]
    # the query CSV and the boxed table are told from a training log that prints them by a function
    assert text == ["nvidia_smi_dmon", "nccl_tests", "gpustat", "nvidia_smi_query", "console"]
    assert [n for n, f in FORMATS.items() if f.gathers] == ["flight_recorder", "nccl_inspector"]  # each process writes its own file
    assert [n for n, f in FORMATS.items() if f.echoes_streams] == ["logkit_text"]


# --- the scan ----------------------------------------------------------------------------------------
def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            out.add(id(first.value))
    return out


def spelled_formats(source: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Where ``source`` spells a format's name as text (docstrings aside; ``allowed``: words it may spell)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [f"line {node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS
            and node.value not in allowed and id(node) not in docs]


def test_the_scan_sees_a_spelled_format():
    for snippet in ('if fmt == "console": pass', 'Read(path, "gpustat")', 'X = ("results_json", "trainer_state")',
                    'order = {"results_json": 0}', 'meta.formats == ["nccl_tests"]',
                    'f(format="flight_recorder")'):
        assert spelled_formats(snippet), snippet
    for snippet in ('"""console captures"""', 'Read(path, FileFormat.GPUSTAT)', 'x = "console capture"',
                    'def f():\n    """nccl_tests"""'):
        assert not spelled_formats(snippet), snippet
    assert not spelled_formats('analysis.rows("nccl_tests", sid)', allowed=frozenset(FIELDS))


def test_no_code_spells_a_format_name():
    found = {}
    for path in sorted((REPO / "logkit").rglob("*.py")):
        if path in DECLARATIONS:
            continue
        rel = path.relative_to(REPO).as_posix()
        allowed = frozenset(FIELDS) if rel.startswith(FIELD_NAMERS) else frozenset()
        if hits := spelled_formats(path.read_text(encoding="utf-8"), allowed):
            found[rel] = hits
    assert not found


# --- a new format, declared at run time ----------------------------------------------------------------
_FOO = re.compile(r"^gpu(?P<gpu>\d+) util=(?P<util>\d+)% mem=(?P<used>\d+)/(?P<total>\d+)MB t=(?P<t>\d+)$")


def read_foo_tool(path: Path, rank: int | None = None):
    """The made-up tool's reader: a ``# foo_tool v1`` header, then a line per GPU and sample."""
    from logkit.ingest.readers.base import Read, iter_lines

    read = Read(Path(path), "foo_tool")
    for number, line in iter_lines(read.path, read):
        if not line.strip():
            continue
        read.lines += 1
        if line.startswith("# foo_tool"):
            read.used += 1
        elif (m := _FOO.match(line)) is not None:
            read.used += 1
            read.rows["gpu"].append({"time_s": float(m["t"]), "host": "node0", "gpu": int(m["gpu"]),
                                     "utilization_pct": float(m["util"]), "memory_used_mb": float(m["used"]),
                                     "memory_total_mb": float(m["total"])})
        else:
            read.unmatched(number, line)
    return read.result()


FOO_TOOL = Format("foo_tool", Role.GPU_CAPTURE, Reader(__name__, "read_foo_tool"), suffixes=TEXT_SUFFIXES,
                  telltale=re.compile(r"^# foo_tool v\d+", re.M), priority=45)
# a capture stopped before its first sample: only its declaration says it is a capture
UTILS = {"foo_a": (40, 60, 80), "foo_b": (90, 95, 100), "foo_empty": ()}


def _capture(path: Path, utils: tuple[int, ...]) -> Path:
    lines = ["# foo_tool v1"] + [f"gpu{g} util={u - g}% mem={1000 * (g + 1)}/80000MB t={1700000000 + i}"
                                 for i, u in enumerate(utils) for g in (0, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def root(tmp_path, monkeypatch):
    """foo_tool captures in a folder of their own, beside two training runs of ours (compared)."""
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "root"
    (root / "captures").mkdir(parents=True)
    for sid, utils in UTILS.items():
        _capture(root / "captures" / f"{sid}.log", utils)
    shutil.copytree(SAMPLES / "qlora_tiny_cpu" / "logs", root / "runs")
    return root


def test_undeclared_the_tool_is_no_format(root):
    path = root / "captures" / "foo_a.log"
    assert sniff(path) is None and sniff(path, loose=True) == FileFormat.CONSOLE
    assert "foo_tool" not in READERS


def test_a_capture_format_declared_at_run_time_is_read_and_not_compared(root, monkeypatch):
    from logkit.analysis import analyze
    from logkit.analysis.kernels.groups import session_kind
    from logkit.ingest.discover import discover, source_for_file
    from logkit.run.load import load_sessions
    from logkit.schema.vocab import SessionKind

    monkeypatch.setitem(FORMATS, "foo_tool", FOO_TOOL)
    path = root / "captures" / "foo_a.log"
    assert sniff(path) == "foo_tool" and sniff(path, loose=True) == "foo_tool"
    assert read_file(path).format == "foo_tool" and "foo_tool" in READERS
    assert [(f.format, f.path.name) for f in source_for_file(path).extra] == [("foo_tool", "foo_a.log")]

    captures = [s for s in discover(root) if s.folder.name == "captures"]
    assert [(s.session_id, s.kind, [(f.format, f.path.name) for f in s.extra]) for s in captures] == [
        (sid, "file", [("foo_tool", f"{sid}.log")]) for sid in sorted(UTILS)]

    sessions = {s.meta.session_id: s for s in load_sessions(root)}
    for sid, utils in UTILS.items():
        session = sessions[sid]
        assert session.meta.formats == ["foo_tool"] and session.meta.world_size is None
        assert len(session.gpu) == 2 * len(utils) and session.steps.empty
        assert session_kind(session) == SessionKind.GPU_CAPTURE

    analysis = analyze(list(sessions.values()))
    kinds = {s.session_id: s.kind for s in analysis.scaling.sessions}
    assert kinds == {**{sid: SessionKind.GPU_CAPTURE for sid in UTILS},
                     **{sid: SessionKind.TRAINING for sid in sessions if sid not in UTILS}}
    compared = {m for g in analysis.scaling.groups for m in g.members}
    compared |= {x for c in analysis.scaling.comparisons for x in (c.baseline, c.candidate)}
    assert analysis.scaling.comparisons and compared == set(sessions) - set(UTILS)
    assert set(UTILS) <= {n.session_id for n in analysis.scaling.not_compared}
    gpus = analysis.gpus
    for sid, utils in UTILS.items():
        rows = gpus[(gpus["session_id"] == sid) & (gpus["gpu"] == 1)]
        if not utils:
            assert rows.empty
            continue
        assert len(rows) == 1 and rows["avg_util"].iloc[0] == pytest.approx(sum(utils) / len(utils) - 1)
        assert rows["peak_util"].iloc[0] == max(utils) - 1


def test_the_cli_reports_the_new_capture(root, monkeypatch, capsys):
    from logkit.cli import main

    monkeypatch.setitem(FORMATS, "foo_tool", FOO_TOOL)
    with pytest.raises(SystemExit) as ended:
        main([str(root / "captures"), "--json", "--compare", "--no-cache"])
    assert ended.value.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert {s["session_id"]: s["kind"] for s in doc["sessions"]} == {sid: "gpu_capture" for sid in UTILS}
    assert doc["groups"] == [] and doc["comparisons"] == []
    sampled = {(sid, gpu) for sid, utils in UTILS.items() if utils for gpu in (0, 1)}
    assert {(g["session_id"], g["gpu"]) for g in doc["gpus"]} == sampled
