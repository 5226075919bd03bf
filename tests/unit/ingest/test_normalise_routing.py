"""Every text reader gets its lines through the normalising layer, and none takes prefixes off itself:
its module imports ``normalise`` and neither ``prefixes`` nor the raw line iterators (but where said
why), and each reads a real file behind a log service's columns, kubectl's prefix or a markdown quote
as it reads the file bare."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from logkit.ingest.readers import READERS
from logkit.ingest.readers.formats import FORMATS, FileFormat
from logkit.ingest.readers.sniff import sniff
from tests.support.launch import REPO

READERS_DIR = REPO / "logkit" / "ingest" / "readers"
CORPUS = REPO / "sample_logs" / "real_world"
# What no reader module but the layer's own may use: the prefix rules, the raw line iterators.
RAW = {"iter_lines", "text_lines"}
# Raw lines a reader may still read, and why: none of them is a record handed to a grammar.
ALLOWED = {
    ("console", "iter_lines"): "_year scans for the first full date (glog stamps carry no year)",
    ("logkit_text", "text_lines"): "decodes the file read whole; its lines go through layout.records",
    ("text_columns", "text_lines"): "the columnar reader, taken only where the layout learned nothing",
    ("llamafactory", "iter_lines"): "trainer_log.jsonl: a JSON document per line, written by the framework itself",
    ("ms_swift", "iter_lines"): "logging.jsonl: a JSON document per line, written by the framework itself",
}
LAYER = {"normalise", "prefixes", "base"}


def _text_reader_modules() -> set[str]:
    out = set()
    for f in FORMATS.values():
        if f.reader is not None and (isinstance(f.telltale, re.Pattern) or f.name in (FileFormat.LOGKIT_TEXT,
                                                                                   FileFormat.LOGKIT_ERRORS)):
            out.add(f.reader.module.rsplit(".", 1)[1])
    return out


def _imports(path: Path) -> set[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    return {(node.module.rsplit(".", 1)[-1], a.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


def test_every_text_reader_imports_the_layer():
    modules = _text_reader_modules()
    assert {"console", "nccl_tests", "nvidia_smi", "gpustat", "logkit_text", "logkit_errors"} <= modules
    for name in modules:
        assert any(mod == "normalise" for mod, _ in _imports(READERS_DIR / f"{name}.py")), name


def test_no_reader_takes_prefixes_off_itself():
    for path in sorted(READERS_DIR.glob("*.py")):
        name = path.stem
        if name in LAYER:
            continue
        for mod, imported in _imports(path):
            assert mod != "prefixes", f"{name} imports the prefix rules: lines come through normalise"
            if imported in RAW:
                assert (name, imported) in ALLOWED, f"{name} reads raw lines ({imported}) past the layer"


def _cloudwatch(line: str) -> str:
    return f"  | 2024-08-23T22:22:51.871Z | {line}"


def _kubectl(line: str) -> str:
    return f"[pod/trainer-worker-3/pytorch] {line}"


def _quote(line: str) -> str:
    return f"> {line}" if line else ">"


def _read(fmt: str, path: Path) -> tuple:
    r = READERS[fmt](path)
    # a log service's time stamp may give a row the time the bare line lacks: the rest must be the same
    tables = {k: [{c: v for c, v in row.items() if c != "time_s"} for row in t.to_pylist()] for k, t in r.tables.items()}
    return tables, dict(r.meta), [(d["line"], d["reason"]) for d in r.diagnostics], r.used


# one real file per text reader (the errors log is ours: a line made by its template)
FILES = [
    (FileFormat.CONSOLE, CORPUS / "console" / "alcf_resnet50_ddp_watchdog_broadcast_timeout.log"),
    (FileFormat.CONSOLE, CORPUS / "console" / "milabench_269_host_stderr_prefix_wrapped_watchdog.log"),
    (FileFormat.NCCL_TESTS, CORPUS / "nccl_tests" / "alcf_polaris_2node_all_reduce.log"),
    (FileFormat.NVIDIA_SMI_DMON, CORPUS / "gpu_captures" / "hpc_nrw_ddp_dmon_2xA100.txt"),
    (FileFormat.NVIDIA_SMI_CSV, CORPUS / "gpu_captures" / "ksysguard_gpu_27_query_gpu_power_clocks.csv"),
    (FileFormat.GPUSTAT, CORPUS / "gpu_captures" / "insightface_partial_fc_gpustat_8xV100.txt"),
    (FileFormat.LOGKIT_TEXT, REPO / "sample_logs" / "text_logs" / "logs" / "training_20241206_143022"
     / "training_20241206_143022_main.log"),
    (FileFormat.LOGKIT_ERRORS, None),
]


@pytest.mark.parametrize("wrap", [_cloudwatch, _kubectl, _quote])
@pytest.mark.parametrize("fmt, source", FILES, ids=[f"{f}-{p.name if p else 'errors'}" for f, p in FILES])
def test_a_reader_reads_a_prefixed_file_as_the_bare_file(tmp_path, fmt, source, wrap):
    if source is None:
        source = tmp_path / "s_errors.log"
        source.write_text("2026-11-22T01:55:42.123456+00:00 | ERROR | cannot write logs/s/s_rank0.jsonl: "
                          "OSError(28, 'No space left')\n2026-11-22T01:55:43+00:00 | WARNING | disk nearly full\n")
    bare = tmp_path / "bare" / source.name
    wrapped = tmp_path / "wrapped" / source.name
    bare.parent.mkdir()
    wrapped.parent.mkdir()
    text = source.read_text(encoding="utf-8")
    bare.write_text(text, encoding="utf-8")
    wrapped.write_text("\n".join(wrap(ln) for ln in text.splitlines()) + "\n", encoding="utf-8")
    want = _read(fmt, bare)
    assert want[3] > 0  # the bare file is read at all
    assert _read(fmt, wrapped) == want
    if isinstance(FORMATS[fmt].telltale, re.Pattern):  # found in a folder: its telltale is seen through the prefix
        assert sniff(wrapped) == sniff(bare) == fmt


def test_the_layer_imports_nothing_heavy_with_the_format_declarations():
    # formats.py is light (discovery reads it); the layer is imported by readers only
    formats = importlib.import_module("logkit.ingest.readers.formats")
    assert "normalise" not in Path(formats.__file__).read_text()
