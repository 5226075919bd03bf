"""Name a file's format from its name and its first bytes (``.gz`` looked through)."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from logkit.schema import RANK_JSONL_RE

__all__ = ["sniff", "TEXT_SUFFIXES", "LOGKIT_TEXT_RE"]

PEEK = 64 * 1024
TEXT_SUFFIXES = (".log", ".txt", ".out", ".err", ".csv")
LOGKIT_TEXT_RE = re.compile(r"^(?P<session_id>.+)_(?:main|multigpu|performance)\.log(?:\.gz)?$")
_SKIP = re.compile(r"_(?:errors\.log|summary\.txt)(?:\.gz)?$")
_GPUSTAT = re.compile(r"^\[\d+\] [^|]+\|\s*(?:\d+|\?\?)\s*(?:°|')C,", re.M)
_DMON = re.compile(r"^#\s*(?:Date\s+Time\s+)?gpu\s+(?:pwr|sm|fb|mclk)\b", re.M)
_CSV = re.compile(r"^(?:timestamp|index|name|uuid|pci\.bus_id)(?:\s*\[[^\]]*\])?\s*,\s*[\w.]+", re.M)
_NCCL_TESTS = re.compile(r"^# nThread \d+|^#\s+size\s+count\s+type|^# Avg bus bandwidth", re.M)
# Enough to call a text file a console capture when found discovering a folder.
_CONSOLE = re.compile(r"NCCL (?:INFO|WARN)|Traceback \(most recent|\[(?:rank|default)\d+\]:|^GPU\d+:|Watchdog caught"
                      r"|CUDA out of memory|ChildFailedError|\{'loss': |\d+%\|.*\|\s*\d+/\d+|torch\.distributed"
                      r"|^\[\d+,\d+\]<std(?:out|err)>:|NaN \w+ DETECTED|\bStep \[\d+/\d+\]", re.M)


def _peek(path: Path) -> str:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                data = fh.read(PEEK)
        else:
            with open(path, "rb") as fh:
                data = fh.read(PEEK)
    except (OSError, EOFError, zlib.error):
        return ""
    return data.decode("utf-8", errors="replace")


def sniff(path: Path, loose: bool = False) -> str | None:
    """The format of ``path`` (a key of ``READERS``, or ``logkit_jsonl`` / ``logkit_summary``), or
    None when it is no log we read. ``loose``: a text file given by name is a console capture
    even without a telltale line in its first 64 KiB."""
    name = path.name
    if RANK_JSONL_RE.match(name):
        return "logkit_jsonl"
    base = name[:-3] if name.endswith(".gz") else name
    if _SKIP.search(name):
        return None
    if LOGKIT_TEXT_RE.match(name):
        return "logkit_text"
    suffix = Path(base).suffix.lower()
    if suffix == ".json":
        head = _peek(path)
        if '"log_history"' in head or base == "trainer_state.json":
            return "trainer_state"
        if '"training_metrics"' in head or '"gpu_snapshots"' in head or '"communication_logs"' in head:
            return "legacy_summary"
        if base.endswith("_summary.json"):
            return "logkit_summary"
        if base == "results.json" or ('"duration_seconds"' in head and ('"num_gpus"' in head or '"mode"' in head)):
            return "results_json"
        return None
    if suffix == ".jsonl":
        head = _peek(path)
        return "verbose_jsonl" if '"type"' in head[:4096] or loose else None
    if suffix not in TEXT_SUFFIXES and not (loose and suffix == ""):
        return None
    head = _peek(path)
    if "\x00" in head[:4096]:
        return None  # binary
    if _CSV.search(head):
        return "nvidia_smi_csv"
    if _DMON.search(head):
        return "nvidia_smi_dmon"
    if _NCCL_TESTS.search(head):
        return "nccl_tests"
    if _GPUSTAT.search(head):
        return "gpustat"
    if suffix != ".csv" and (loose or _CONSOLE.search(head)):
        return "console"
    return None
