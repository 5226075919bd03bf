"""nvidia-smi captures -> ``gpu``: ``--query-gpu=... --format=csv`` (units inside values or in the
header with ``nounits``) and ``nvidia-smi dmon`` (``-`` where a metric is unsupported).

MiB become MB (10^6 bytes, the unit of every MB in logkit). ``[N/A]`` and ``[Not Supported]`` are
absent values, not errors; any other value that does not convert is a diagnostic. A query field
logkit has no name for keeps its value as a number where it is one (``5001 MHz`` -> 5001.0).
dmon's older ``temp`` column (before ``gtemp``/``mtemp``) is the GPU temperature; a capture pasted
indented or as a markdown quote (``> \\# gpu ...``) is read as the table it is.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records

MIB_TO_MB = 2**20 / 1e6
# --query-gpu field -> (frame column, factor when the unit is MiB)
QUERY_COLUMNS: dict[str, str] = {
    "index": "gpu", "utilization.gpu": "utilization_pct", "memory.used": "memory_used_mb",
    "memory.total": "memory_total_mb", "power.draw": "power_w", "temperature.gpu": "temperature_c",
    "name": "gpu_name", "uuid": "uuid", "pci.bus_id": "bus_id", "utilization.memory": "memory_util_pct",
    "memory.free": "memory_free_mb", "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz", "power.limit": "power_limit_w", "fan.speed": "fan_pct",
    "pstate": "pstate", "temperature.memory": "memory_temperature_c", "clocks.current.memory": "mem_clock_mhz",
    "clocks.current.graphics": "graphics_clock_mhz", "clocks.gr": "graphics_clock_mhz",
}
_TEXT_COLUMNS = {"gpu_name", "uuid", "bus_id", "pstate"}
_ABSENT = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "-", ""}
_HEADER_UNIT = re.compile(r"^(?P<field>[\w.]+)(?: \[(?P<unit>[^\]]+)\])?$")
_VALUE = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>%|MiB|MB|GiB|W|MHz|C)?$")
DMON_COLUMNS = {"gpu": "gpu", "pwr": "power_w", "gtemp": "temperature_c", "temp": "temperature_c",
                "mtemp": "memory_temperature_c",
                "sm": "utilization_pct", "mem": "memory_util_pct", "enc": "enc_pct", "dec": "dec_pct",
                "jpg": "jpg_pct", "ofa": "ofa_pct", "mclk": "mem_clock_mhz", "pclk": "sm_clock_mhz",
                "fb": "memory_used_mb", "bar1": "bar1_mb", "ccpm": "ccpm_mb", "pviol": "power_violation_pct",
                "tviol": "thermal_violation", "rxpci": "pcie_rx_mb_s", "txpci": "pcie_tx_mb_s"}


def _stamp(text: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S",
                "%Y%m%d %H:%M:%S", "%a %b %d %H:%M:%S %Y"):
        try:
            return epoch(datetime.strptime(text.strip(), fmt))
        except ValueError:
            continue
    return None


def _number(read: Read, number: int, column: str, value: str, unit: str | None, line: str):
    value = value.strip()
    if value in _ABSENT:
        return None
    m = _VALUE.match(value)
    if m is None:
        read.note(number, f"value does not convert: {column} {value!r}", line)
        return None
    unit = m["unit"] or unit
    out = float(m["num"])
    return out * MIB_TO_MB if unit == "MiB" else out


def _maybe_number(value: str, unit: str | None):
    """A field logkit has no name for: its number where it is one, else its text."""
    m = _VALUE.match(value.strip())
    if m is None:
        return value
    out = float(m["num"])
    return out * MIB_TO_MB if (m["unit"] or unit) == "MiB" else out


# How a line of each table begins (what a prefix taken off by ``normalise`` must leave); a markdown
# paste escapes dmon's '#' (``\#``).
CSV_GRAMMAR = Grammar(re.compile(r"(?:timestamp|index|name|uuid|pci\.bus_id)\b|\d{4}/\d\d/\d\d|\s*\d+\s*,"))
DMON_GRAMMAR = Grammar(re.compile(r"\\?#|\s*\d+\s+\S+\s+\S+"))


def read_nvidia_smi_csv(path: Path, rank: int | None = None) -> ReadResult:
    """``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` (repeated headers allowed)."""
    read = Read(Path(path), FileFormat.NVIDIA_SMI_CSV)
    header: list[tuple[str, str | None]] | None = None
    for rec in records(read, CSV_GRAMMAR):
        number, line = rec.number, rec.text
        cells = [c.strip() for c in line.split(",")]
        if cells and (cells[0] in QUERY_COLUMNS or cells[0].split(" [")[0] in QUERY_COLUMNS or cells[0] == "timestamp"):
            header = []
            for c in cells:
                m = _HEADER_UNIT.match(c)
                header.append((m["field"], m["unit"]) if m else (c, None))
            read.used += 1
            continue
        if header is None or len(cells) != len(header):
            read.unmatched(number, line)
            continue
        read.used += 1
        row: dict = {"time_s": None, "host": "", "gpu": None}
        for (field, unit), value in zip(header, cells, strict=True):
            if field == "timestamp":
                row["time_s"] = _stamp(value)
                if row["time_s"] is None:
                    read.note(number, f"value does not convert: timestamp {value!r}", line)
                continue
            column = QUERY_COLUMNS.get(field, field.replace(".", "_"))
            if column in _TEXT_COLUMNS:
                row[column] = value
            elif field not in QUERY_COLUMNS:
                row[column] = _maybe_number(value, unit)
            else:
                row[column] = _number(read, number, field, value, unit, line)
        read.rows["gpu"].append(row)
    return read.result()


def read_nvidia_smi_dmon(path: Path, rank: int | None = None) -> ReadResult:
    """``nvidia-smi dmon [-s ...] [-o DT]``: one row per GPU per sample; without ``-o T`` a
    sample's ``time_s`` is its index (dmon samples once per second by default)."""
    read = Read(Path(path), FileFormat.NVIDIA_SMI_DMON)
    columns: list[str] | None = None
    units: list[str] = []
    sample, seen = -1, set()
    for rec in records(read, DMON_GRAMMAR):
        number, line = rec.number, rec.text.lstrip()
        line = line[1:] if line.startswith("\\#") else line  # markdown's escaped '#'
        if line.startswith("#"):
            names = line.lstrip("#").split()
            if "gpu" in names:
                columns = names
            elif columns is not None:
                units = names
            read.used += 1
            continue
        if (cells := read.table_row(number, line, columns)) is None:
            continue
        values = dict(zip(columns, cells, strict=True))
        row: dict = {"host": "", "time_s": None}
        if "Date" in values and "Time" in values:
            row["time_s"] = _stamp(f"{values['Date']} {values['Time']}")
        elif "Time" in values:
            row["clock"] = values["Time"]
        for name, value in values.items():
            if name in ("Date", "Time"):
                continue
            column = DMON_COLUMNS.get(name, name)
            unit = units[columns.index(name)] if len(units) == len(columns) else None
            row[column] = _number(read, number, name, value, "MiB" if unit == "MB" and name in ("fb", "bar1") else None,
                                  line)
        gpu = row.get("gpu")
        if gpu in seen or sample < 0:
            sample, seen = sample + 1, set()
        seen.add(gpu)
        if row["time_s"] is None:
            row["time_s"] = float(sample)
            read.time_base = "elapsed"
        row["sample"] = sample
        read.rows["gpu"].append(row)
    return read.result()
