"""Discovering a folder imports no pandas, no pyarrow, no reader of a format the folder does not hold (the
formats' declarations and sniffing only):
``analyze_logs`` answering from its cache needs nothing more (a fresh process checks what got imported)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"


def _imported(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return set(out.stdout.split())


def test_discovering_a_folder_imports_no_pandas_nor_readers():
    """A folder of our sessions (JSONL streams, text logs, summaries); a results.json or another format
    would import its reader's module, as sniffing them needs."""
    folder = SAMPLES / "qlora_tiny_cpu" / "logs"
    found = _imported(f"from logkit.ingest.discover import discover\nassert len(discover({str(folder)!r})) == 2")
    assert not {"pandas", "pyarrow", "polars", "numpy"} & found
    light = {"logkit.ingest.readers.sniff", "logkit.ingest.readers.formats"}  # how files are told, no reader
    assert not [m for m in found if m.startswith("logkit.ingest.readers.") and m not in light]


def test_a_lazy_reader_reads_and_names_itself():
    from logkit.ingest.readers import READERS, read_file

    path = next((SAMPLES / "console").rglob("*.log"))
    assert READERS["console"].__name__ == "read_console"
    assert read_file(path, "console").format == READERS["console"](path).format == "console"


def test_the_lazy_names_are_still_there():
    import logkit.ingest
    import logkit.ingest.readers
    from logkit.ingest.readers.base import ReadResult
    from logkit.ingest.session import Session

    assert logkit.ingest.Session is Session and logkit.ingest.readers.ReadResult is ReadResult
    assert set(logkit.ingest.__all__) == {"Session"}
    assert {"READERS", "ReadResult", "sniff", "read_file"} == set(logkit.ingest.readers.__all__)
