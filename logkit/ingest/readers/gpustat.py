"""``gpustat`` / ``gpustat -i N`` captures -> ``gpu`` (one block per sample: a host/time header,
then ``[i] name | temp, [fan,] util[, power] | used / total MB | processes``).

gpustat's "MB" are MiB (it divides by 1024^2): they become MB (10^6 bytes).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch, read_bytes, text_lines
from logkit.schema.values import to_float

MIB_TO_MB = 2**20 / 1e6
HEADER = re.compile(r"^(?P<host>\S+)\s+(?P<stamp>\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\s*(?P<driver>[\d.]+)?\s*$")
GPU_LINE = re.compile(
    r"^\[(?P<gpu>\d+)\] (?P<name>[^|]+?)\s*\|\s*(?P<temp>\d+|\?\?)\s*(?:°|')C,\s*(?:(?P<fan>\d+|\?\?) %,\s*)?"
    r"(?P<util>\d+|\?\?) %(?:,\s*(?P<power>\d+|\?\?) / (?P<power_limit>\d+|\?\?) W)?\s*"
    r"\|\s*(?P<used>\d+|\?\?) / (?P<total>\d+|\?\?) MB\s*\|(?P<procs>.*)$")


def read_gpustat(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), "gpustat")
    host, t = "", None
    for number, line in enumerate(text_lines(read_bytes(read.path, read), read), start=1):
        if not line.strip():
            continue
        read.lines += 1
        if (h := HEADER.match(line)) is not None:
            host = h["host"]
            try:
                t = epoch(datetime.strptime(" ".join(h["stamp"].split()), "%a %b %d %H:%M:%S %Y"))
            except ValueError:
                t = None
                read.note(number, f"value does not convert: timestamp {h['stamp']!r}", line)
            if h["driver"]:
                read.meta.setdefault("driver_version", h["driver"])
            read.used += 1
            continue
        if (g := GPU_LINE.match(line)) is None:
            read.unmatched(number, line)
            continue
        read.used += 1
        used, total = to_float(g["used"]), to_float(g["total"])
        read.rows["gpu"].append({
            "time_s": t, "host": host, "gpu": int(g["gpu"]), "utilization_pct": to_float(g["util"]),
            "memory_used_mb": used * MIB_TO_MB if used is not None else None,
            "memory_total_mb": total * MIB_TO_MB if total is not None else None,
            "power_w": to_float(g["power"]), "temperature_c": to_float(g["temp"]), "gpu_name": g["name"],
            "fan_pct": to_float(g["fan"]), "power_limit_w": to_float(g["power_limit"]),
            "processes": g["procs"].strip(),
        })
    return read.result()
