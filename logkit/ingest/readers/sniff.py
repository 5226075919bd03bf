"""Name a file's format from its name and its first bytes (``.gz`` looked through)."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from logkit.schema import RANK_JSONL_RE

PEEK = 64 * 1024
TEXT_SUFFIXES = (".log", ".txt", ".out", ".err", ".csv")
LOGKIT_TEXT_RE = re.compile(r"^(?P<session_id>.+)_(?:main|multigpu|performance)\.log(?:\.gz)?$")
_SKIP = re.compile(r"_(?:errors\.log|summary\.txt)(?:\.gz)?$")
_GPUSTAT = re.compile(r"^\[\d+\] [^|]+\|\s*(?:\d+|\?\?)\s*(?:°|')C,", re.M)
# dmon's header, also indented or pasted as a markdown quote (``> \\# gpu pwr ...``)
_DMON = re.compile(r"^[ \t]*(?:>[ \t]*)?\\?#\s*(?:Date\s+Time\s+)?gpu\s+(?:pwr|sm|fb|mclk)\b", re.M)
_CSV = re.compile(r"^(?:timestamp|index|name|uuid|pci\.bus_id)(?:\s*\[[^\]]*\])?\s*,\s*[\w.]+", re.M)
_NCCL_TESTS = re.compile(r"^# nThread \d+|^#\s+size\s+count\s+type|^# Avg bus bandwidth", re.M)
# Enough to call a text file a console capture when found discovering a folder.
_CONSOLE = re.compile(r"NCCL (?:INFO|WARN)|Traceback \(most recent|\[(?:rank|default)\d+\]:|^GPU\d+:|Watchdog caught"
                      r"|CUDA out of memory|ChildFailedError|\{'loss': |\d+%\|.*\|\s*\d+/\d+|torch\.distributed"
                      r"|^\[\d+,\d+\]<std(?:out|err)>:|NaN \w+ DETECTED|\bStep \[\d+/\d+\]"
                      r"|mismatch between collectives|ProcessGroupNCCL|NCCL error|NCCL version|ncclCommInit"
                      r"|closing signal SIG|failed \(exitcode: -?\d+\)|exits with return code|died from signal"
                      r"|OutOfMemoryError|c10d|what\(\):|Process group watchdog|iteration\s+\d+/\s*\d+ \|", re.M)
# Text formats told by a line of their own, in the order they are tried.
_TEXT_FORMATS = (("nvidia_smi_csv", _CSV), ("nvidia_smi_dmon", _DMON), ("nccl_tests", _NCCL_TESTS),
                 ("gpustat", _GPUSTAT))


# a Flight Recorder dump: a pickle (protocol 2+) or JSON holding these keys near its start
_FR_KEYS = (b"collective_seq_id", b"pg_config", b"pg_status")


def _flight_recorder(path: Path, suffix: str) -> bool:
    if suffix not in ("", ".pkl", ".pickle", ".json"):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(PEEK)
    except OSError:
        return False
    opens = head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") or head.lstrip()[:1] == b"{"
    return opens and b"entries" in head and any(k in head for k in _FR_KEYS)


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


def _sniff_json(path: Path, base: str) -> str | None:
    head = _peek(path)
    if '"log_history"' in head or base == "trainer_state.json":
        return "trainer_state"
    if '"training_metrics"' in head or '"gpu_snapshots"' in head or '"communication_logs"' in head:
        return "legacy_summary"
    if base.endswith("_summary.json"):
        return "logkit_summary"
    from logkit.ingest.readers.json_docs import RESULTS_JSON  # here: it brings pyarrow and pandas

    duration, gpus, mode = (f'"{RESULTS_JSON[n].raw[0]}"' for n in ("duration_s", "gpu_count", "mode"))
    if base == "results.json" or (duration in head and (gpus in head or mode in head)):
        return "results_json"
    return None


def _sniff_text(path: Path, suffix: str, loose: bool) -> str | None:
    head = _peek(path)
    if "\x00" in head[:4096]:
        return None  # binary
    for fmt, telltale in _TEXT_FORMATS:
        if telltale.search(head):
            return fmt
    if suffix != ".csv" and (loose or _CONSOLE.search(head)):
        return "console"
    return None


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
    if _flight_recorder(path, suffix):
        return "flight_recorder"
    if suffix == ".json":
        return _sniff_json(path, base)
    if suffix == ".jsonl":
        return "verbose_jsonl" if '"type"' in _peek(path)[:4096] or loose else None
    if suffix not in TEXT_SUFFIXES and not (loose and suffix == ""):
        return None
    return _sniff_text(path, suffix, loose)
