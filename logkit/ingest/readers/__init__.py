"""One reader per log format; ``READERS`` maps a format name to its reader, ``sniff`` names a
file's format from its name and first bytes.

Every reader is ``reader(path, rank=None) -> ReadResult`` (``rank``: the rank a file belongs
to when its folder says so, e.g. ``logs/rank_N/``) and never raises on content.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from logkit.ingest.readers.base import ReadResult
from logkit.ingest.readers.console import read_console
from logkit.ingest.readers.flight_recorder import read_flight_recorder
from logkit.ingest.readers.gpustat import read_gpustat
from logkit.ingest.readers.json_docs import read_legacy_summary, read_results_json, read_trainer_state
from logkit.ingest.readers.logkit_errors import read_logkit_errors
from logkit.ingest.readers.logkit_text import read_logkit_text
from logkit.ingest.readers.nccl_tests import read_nccl_tests
from logkit.ingest.readers.nvidia_smi import read_nvidia_smi_csv, read_nvidia_smi_dmon
from logkit.ingest.readers.sniff import sniff
from logkit.ingest.readers.verbose_jsonl import read_verbose_jsonl

__all__ = ["READERS", "ReadResult", "sniff", "read_file"]

READERS: dict[str, Callable[..., ReadResult]] = {
    "logkit_text": read_logkit_text,
    "logkit_errors": read_logkit_errors,
    "verbose_jsonl": read_verbose_jsonl,
    "console": read_console,
    "nccl_tests": read_nccl_tests,
    "nvidia_smi_csv": read_nvidia_smi_csv,
    "nvidia_smi_dmon": read_nvidia_smi_dmon,
    "gpustat": read_gpustat,
    "trainer_state": read_trainer_state,
    "results_json": read_results_json,
    "legacy_summary": read_legacy_summary,
    "flight_recorder": read_flight_recorder,
}


def read_file(path: str | Path, format: str | None = None, rank: int | None = None) -> ReadResult:
    """Read one file with the reader of ``format`` (sniffed when not given; console as a last resort)."""
    path = Path(path)
    fmt = format or sniff(path, loose=True) or "console"
    return READERS[fmt](path, rank=rank)
