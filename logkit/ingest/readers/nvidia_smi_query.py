"""``nvidia-smi -q``: the full query report (foreign grammar: written by nvidia-smi, not by us).

The report is indented ``Key : value`` lines under a banner::

    ==============NVSMI LOG==============
    Timestamp                           : Mon Jul 13 14:02:18 2020
    Driver Version                      : 418.67
    CUDA Version                        : 10.1
    Attached GPUs                       : 1
    GPU 00000000:03:00.0
        Product Name                    : Tesla P100-PCIE-16GB
        GPU UUID                        : GPU-ec315101-...
        FB Memory Usage
            Total                       : 16280 MiB
            Used                        : 0 MiB
        Utilization
            Gpu                         : 0 %

Each banner opens a snapshot (``nvidia-smi -q -l N`` repeats the report); each ``GPU <bus id>`` line
opens a GPU row of it, numbered in the order the report lists them (nvidia-smi lists GPUs by index). A
key under a section (``FB Memory Usage`` / ``Used``) is read by the section it is in, told by its
indentation. ``-q -d MEMORY,UTILIZATION`` prints only some sections: what is there is read. The header
gives ``meta.driver_version`` and ``meta.cuda_driver_version`` (NCCL's encoding: 10.1 -> 10010), and
``Attached GPUs`` the GPU count it states.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records
from logkit.ingest.readers.nvidia_smi_table import MIB_TO_MB, PROMPT

BANNER = re.compile(r"^\s*=+\s*NVSMI LOG\s*=+\s*$")
_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>\S[^:]*?)\s*:\s?(?P<value>.*?)\s*$")
_SECTION = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][^:]*?)\s*$")
_COMMAND = re.compile(r"(?:^|[\s$#>:/])nvidia-smi\b")
# how a line of the report begins: its banner, a key, a GPU's bus id, an indented line, the command typed
GRAMMAR = Grammar(re.compile(r"=+\s*NVSMI|[A-Z][\w ]*\s*:|GPU [0-9A-Fa-f]{4,8}:|\s|\S*nvidia-smi\b"))
_ABSENT = {"N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "ERR!"}

# (section, key) -> (column, unit): a section of None is a key of the GPU itself
_FIELDS = {
    (None, "Product Name"): ("gpu_name", None), (None, "GPU UUID"): ("uuid", None),
    (None, "Persistence Mode"): ("persistence", None), (None, "Performance State"): ("pstate", None),
    (None, "Fan Speed"): ("fan_pct", "%"), (None, "Compute Mode"): ("compute_mode", None),
    ("FB Memory Usage", "Total"): ("memory_total_mb", "MiB"), ("FB Memory Usage", "Used"): ("memory_used_mb", "MiB"),
    ("Utilization", "Gpu"): ("utilization_pct", "%"),
    ("Temperature", "GPU Current Temp"): ("temperature_c", "C"),
    ("Power Readings", "Power Draw"): ("power_w", "W"), ("GPU Power Readings", "Power Draw"): ("power_w", "W"),
    ("GPU Power Readings", "Instantaneous Power Draw"): ("power_w", "W"),
    ("Power Readings", "Power Limit"): ("power_limit_w", "W"),
    ("GPU Power Readings", "Current Power Limit"): ("power_limit_w", "W"),
}


def _number(value: str, unit: str) -> float | None:
    """``1934 MiB`` -> MB, ``47 %`` -> 47.0; None where the report says none (``N/A``)."""
    text = value.strip()
    if text in _ABSENT or not text.endswith(unit):
        return None
    try:
        number = float(text[: -len(unit)].strip())
    except ValueError:
        return None
    return number * MIB_TO_MB if unit == "MiB" else number


def _time(text: str) -> float | None:
    try:
        return epoch(datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


class Report:
    """The state of one capture: the snapshot, the GPU whose keys come next, the section they are in."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.sample, self.time_s = -1, None
        self.gpu: dict | None = None
        self.index = 0  # the next GPU's number in this snapshot
        self.section: tuple[int, str] | None = None  # (indent, name) of the section keys are under
        self.where: dict[str, int] = {}
        self.host = ""
        self.attached: int | None = None  # "Attached GPUs : N"

    def line(self, number: int, text: str) -> bool:
        if BANNER.match(text):
            self.sample, self.index, self.gpu, self.section, self.time_s = self.sample + 1, 0, None, None, None
            return True
        if (g := _GPU.match(text)) is not None:
            self._gpu(number, g["bus"])
            return True
        if (k := _KEY.match(text)) is not None and not k["indent"]:
            return self._header(number, k["key"], k["value"])
        if self.gpu is None:
            if (p := PROMPT.match(text)) is not None:
                self.host = p["h1"] or p["h2"]
                return True
            return _COMMAND.search(text) is not None
        indent = len(text) - len(text.lstrip())
        if self.section is not None and indent <= self.section[0]:
            self.section = None
        if (k := _KEY.match(text)) is not None:
            field = _FIELDS.get((self.section[1] if self.section else None, k["key"]))
            if field is not None:
                column, unit = field
                value = k["value"]
                self.gpu[column] = (None if value in _ABSENT else value) if unit is None else _number(value, unit)
            return True
        if (s := _SECTION.match(text)) is not None:
            if self.section is None:  # a section of the GPU; deeper ones (Clocks / Max ...) keep the outer name
                self.section = (len(s["indent"]), s["key"])
            return True
        return False

    def _header(self, number: int, key: str, value: str) -> bool:
        meta = self.read.meta
        if key == "Timestamp":
            self.time_s = _time(value)
        elif key == "Driver Version":
            meta.fill(driver_version=value)
        elif key == "CUDA Version":
            if value == "N/A":
                meta.fill(cuda_driver_version=None)
            elif re.fullmatch(r"\d+(?:\.\d+)?", value):
                major, _, minor = value.partition(".")
                meta.fill(cuda_driver_version=int(major) * 1000 + int(minor or 0) * 10)
        elif key == "Attached GPUs" and value.isdigit():
            self.where.setdefault("attached", number)
            self.attached = int(value)
        self.gpu, self.section = None, None
        return True

    def _gpu(self, number: int, bus: str) -> None:
        if self.sample < 0:  # a report pasted without its banner
            self.sample = 0
        self.gpu = {"time_s": self.time_s, "host": self.host, "gpu": self.index, "bus_id": bus,
                    "sample": self.sample, "gpu_name": None, "name_truncated": False, "processes": "",
                    "process_count": 0, "process_memory_mb": 0.0}
        self.read.rows["gpu"].append(self.gpu)
        self.index += 1
        self.section = None
        self.where.setdefault("gpu", number)


def read_nvidia_smi_query(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.NVIDIA_SMI_QUERY)
    report = Report(read)
    for rec in records(read, GRAMMAR):
        if not rec.text.strip():
            continue
        if report.line(rec.number, rec.text.rstrip()):
            read.used += 1
        else:
            read.unmatched(rec.number, rec.text)
    if (attached := report.attached) is not None:
        where = f"{read.label}:{report.where['attached']}"
        read.meta.update(gpu_count=attached, gpu_count_from=f"stated: Attached GPUs : {attached} (nvidia-smi -q, {where})",
                         facts_source={**(read.meta.facts_source or {}), "gpu_count": where})
    elif read.rows["gpu"]:
        n = len({r["gpu"] for r in read.rows["gpu"]})
        where = f"{read.label}:{report.where['gpu']}"
        read.meta.update(gpu_count=n, gpu_count_from=f"derived: {n} GPU(s) the nvidia-smi -q report lists ({where})",
                         facts_source={**(read.meta.facts_source or {}), "gpu_count": where})
    return read.result()
