"""One reader per log format; ``READERS`` maps a format name to its reader, ``sniff`` names a
file's format from its name and first bytes.

Every reader is ``reader(path, rank=None) -> ReadResult`` (``rank``: the rank a file belongs
to when its folder says so, e.g. ``logs/rank_N/``) and never raises on content.

A reader's module is imported when a file of its format is read, not with this package: discovering
a folder imports ``sniff`` (and so this package), and a folder of our JSONL streams reads no other format.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from logkit.ingest.readers.sniff import sniff

__all__ = ["READERS", "ReadResult", "sniff", "read_file"]


class _Lazy:
    """A reader, its module imported on its first call."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name, self.__name__ = module, name, name

    def __call__(self, path, rank=None):
        return getattr(importlib.import_module(self.module), self.name)(path, rank=rank)

    def __repr__(self) -> str:
        return f"<reader {self.module}.{self.name}>"


# The modules are named in full (the cache's code key follows the names quoted here as imports).
READERS: dict[str, Callable[..., object]] = {
    "logkit_text": _Lazy("logkit.ingest.readers.logkit_text", "read_logkit_text"),
    "logkit_errors": _Lazy("logkit.ingest.readers.logkit_errors", "read_logkit_errors"),
    "verbose_jsonl": _Lazy("logkit.ingest.readers.verbose_jsonl", "read_verbose_jsonl"),
    "console": _Lazy("logkit.ingest.readers.console", "read_console"),
    "nccl_tests": _Lazy("logkit.ingest.readers.nccl_tests", "read_nccl_tests"),
    "nvidia_smi_csv": _Lazy("logkit.ingest.readers.nvidia_smi", "read_nvidia_smi_csv"),
    "nvidia_smi_dmon": _Lazy("logkit.ingest.readers.nvidia_smi", "read_nvidia_smi_dmon"),
    "gpustat": _Lazy("logkit.ingest.readers.gpustat", "read_gpustat"),
    "trainer_state": _Lazy("logkit.ingest.readers.json_docs", "read_trainer_state"),
    "results_json": _Lazy("logkit.ingest.readers.json_docs", "read_results_json"),
    "legacy_summary": _Lazy("logkit.ingest.readers.json_docs", "read_legacy_summary"),
    "flight_recorder": _Lazy("logkit.ingest.readers.flight_recorder", "read_flight_recorder"),
}


def __getattr__(name: str):
    if name == "ReadResult":  # lazy: it brings pyarrow and the frames' assembly
        from logkit.ingest.readers.base import ReadResult

        return ReadResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_file(path: str | Path, format: str | None = None, rank: int | None = None):
    """Read one file with the reader of ``format`` (sniffed when not given; console as a last resort)."""
    path = Path(path)
    fmt = format or sniff(path, loose=True) or "console"
    return READERS[fmt](path, rank=rank)
