"""``gpustat`` / ``gpustat -i N`` captures -> ``gpu`` (one block per sample: a host/time header,
then ``[i] name | temp, [fan,] util[, power] | used / total MB | processes``).

gpustat's "MB" are MiB (it divides by 1024^2): they become MB (10^6 bytes). ``??`` (a value the
driver does not report) is absent. Snapshots pasted without their header (``gpustat -i`` output
copied from a terminal, ``# label`` lines between them, a terminal multiplexer's pane border
after the values) are told apart by ``sample`` (a new one where a GPU index comes again, or
after a header or comment line), with the comment as the snapshot's ``label``. ``meta.gpu_count``:
the distinct GPUs of each host the capture lists (derived, ``gpu_count_from``).

A capture often runs both tools in turn (``gpustat``, then ``nvidia-smi``): the boxed table's lines
are read by the table's reader into the same frame, each of its frames a snapshot of its own after
gpustat's (its header gives ``meta.driver_version`` and ``meta.cuda_driver_version`` too), and the
shell prompts typed between them name the host.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records
from logkit.ingest.readers.nvidia_smi import count_gpus
from logkit.ingest.readers.nvidia_smi_table import TABLE_LINE, Table
from logkit.schema.values import to_float

MIB_TO_MB = 2**20 / 1e6
HEADER = re.compile(r"^(?P<host>\S+)\s+(?P<stamp>\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\s*(?P<driver>[\d.]+)?\s*$")
GPU_LINE = re.compile(
    r"^\[(?P<gpu>\d+)\] (?P<name>[^|]+?)\s*\|\s*(?P<temp>\d+|\?\?)\s*(?:°|')C,\s*(?:(?P<fan>\d+|\?\?) %,\s*)?"
    r"(?P<util>\d+|\?\?) %(?:,\s*(?P<power>\d+|\?\?) / (?P<power_limit>\d+|\?\?) W)?\s*"
    r"\|\s*(?P<used>\d+|\?\?)\s*/\s*(?P<total>\d+|\?\?) MB\b(?:\s*\|(?P<procs>.*))?.*$")
_COMMENT = re.compile(r"^#\s*(?P<label>.*?)\s*$")
GRAMMAR = Grammar(re.compile("|".join(p.pattern for p in (HEADER, GPU_LINE, _COMMENT, TABLE_LINE))))


def read_gpustat(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.GPUSTAT)
    host, t, label = "", None, None
    sample, seen, first = -1, set(), None
    table = Table(read)  # nvidia-smi's boxed table, where the capture runs it too
    for rec in records(read, GRAMMAR):
        number, line = rec.number, rec.text
        if GPU_LINE.match(line) is None and HEADER.match(line) is None:
            table.sample = max(table.sample, sample)  # its frames come after gpustat's snapshots
            if table.line(number, line.strip()):
                read.used += 1
                sample = max(sample, table.sample)
                if table.host:
                    host = table.host
                continue
        if (h := HEADER.match(line)) is not None:
            host, t, seen = h["host"], _header_time(read, number, h, line), set()
            sample += 1
            if h["driver"]:
                read.meta.fill(driver_version=h["driver"])
            read.used += 1
            continue
        if (c := _COMMENT.match(line)) is not None:
            label, seen = c["label"], set()
            sample += 1
            read.used += 1
            continue
        if (g := GPU_LINE.match(line)) is None:
            read.unmatched(number, line)
            continue
        read.used += 1
        gpu = int(g["gpu"])
        if gpu in seen or sample < 0:
            sample, seen = sample + 1, set()
        seen.add(gpu)
        used, total = to_float(g["used"]), to_float(g["total"])
        read.rows["gpu"].append({
            "time_s": t, "host": host, "gpu": gpu, "utilization_pct": to_float(g["util"]),
            "memory_used_mb": used * MIB_TO_MB if used is not None else None,
            "memory_total_mb": total * MIB_TO_MB if total is not None else None,
            "power_w": to_float(g["power"]), "temperature_c": to_float(g["temp"]), "gpu_name": g["name"],
            "fan_pct": to_float(g["fan"]), "power_limit_w": to_float(g["power_limit"]),
            "processes": (g["procs"] or "").strip(), "sample": sample, "label": label,
        })
        first = number if first is None else first
    table.name_listed()
    count_gpus(read, first)
    return read.result()


def _header_time(read: Read, number: int, h: re.Match, line: str) -> float | None:
    try:
        return epoch(datetime.strptime(" ".join(h["stamp"].split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        read.note(number, f"value does not convert: timestamp {h['stamp']!r}", line)
        return None
