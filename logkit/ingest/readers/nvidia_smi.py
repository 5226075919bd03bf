"""nvidia-smi captures -> ``gpu``: ``--query-gpu=... --format=csv`` (units inside values or in the
header with ``nounits``) and ``nvidia-smi dmon`` (``-`` where a metric is unsupported).

MiB become MB (10^6 bytes, the unit of every MB in logkit); a capture a script wrote in the query's
shape without units (``timestamp,memory.used,...`` over bare numbers, as ``nounits`` prints them) has its
memory in MiB, nvidia-smi's unit for it, and its time may be Unix epoch seconds. ``[N/A]`` and ``[Not Supported]`` are
absent values, not errors; any other value that does not convert is a diagnostic. A query field
logkit has no name for keeps its value as a number where it is one (``5001 MHz`` -> 5001.0).
dmon's older ``temp`` column (before ``gtemp``/``mtemp``) is the GPU temperature; a capture pasted
indented or as a markdown quote (``> \\# gpu ...``) is read as the table it is.

A query keyed by ``pci.bus_id`` or ``uuid`` instead of ``index`` keeps its key and numbers the GPUs
by the order their keys first appear; a query with neither, by each row's place among the rows of
one time (a query prints its GPUs within a second), else under its header (nvidia-smi lists the
GPUs in index order); ``gpu_from`` says which. A capture without a header
(``noheader``) has its columns named by their values where the values say it (a bus id, a UUID, a
time, a P-state, a GPU's name, the first column counting GPUs from 0, the MiB column that never
changes and tops the others: ``memory.total``, the W column that never changes and tops the
other: ``power.limit``, the one W column that changes: ``power.draw``); the others keep their place
and unit (``column_3_mb``), and a diagnostic says which. ``meta.gpu_count`` is the number of GPUs the capture lists, with ``gpu_count_from``. A query under
``watch`` takes each frame's time from watch's header where its rows carry none. The command line
pasted above a capture (``$ nvidia-smi --query-gpu=... --format=csv``) is no row.

A training script's own sampler CSV is read the same way, its column names mapped to the query's fields
by ``gpu_sampler_columns`` (an ``elapsed_sec`` column gives ``time_s`` as seconds since it started); a
quoted cell the script wrote over two lines (``"26.11<newline>0"``) is one row, joined where the quote
closes. Each query's rows are a ``sample`` (the rows of one time, or under one header); rows of one time
are those stamped closer than half the capture's cadence (and within 1 s), so a sampler writing one
GPU every 0.5 s gives one GPU, not a new one per row.
"""

from __future__ import annotations

import csv
import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.gpu_sampler_columns import ELAPSED, sampler_field, sampler_header
from logkit.ingest.readers.normalise import Grammar, records

_PASTE = re.compile(r"^[ \t]*(?:>[ \t]?)*[ \t]*")  # indentation, markdown quote marks
_QUOTE = re.compile(r"^\s*(?:>\s?)?\s*\\?(?=#)")  # indentation, a markdown quote, an escaped '#'
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
    # the query's other spellings of the same fields (nvidia-smi --help-query-gpu)
    "gpu_name": "gpu_name", "gpu_uuid": "uuid", "gpu_bus_id": "bus_id",
    "clocks.memory": "mem_clock_mhz", "clocks.graphics": "graphics_clock_mhz", "enforced.power.limit": "power_limit_w",
}
_KEYS = ("bus_id", "uuid")  # what names a GPU where the query has no index
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9a-fA-F-]{8,}$")
_PSTATE = re.compile(r"^P\d{1,2}$")
# watch's header over a query's output: "Every 2.0s: nvidia-smi --query-gpu=...   host: Mon Nov 25 10:00:00 2024"
_WATCH = re.compile(r"^Every\s+\d+(?:\.\d+)?s:\s+\S*nvidia-smi\b")
_WATCH_STAMP = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d{1,2} \d\d:\d\d:\d\d \d{4}")
# the command typed before the capture (behind a shell prompt, watch's or not): the query, no row of it
_COMMAND = re.compile(r"(?:^|[\s$#>:/])nvidia-smi\s+(?:\S+\s+)*?--query-gpu[= ]")
_UNIT = re.compile(r"^[-+]?\d+(?:\.\d+)?\s*(?P<unit>%|MiB|W|MHz)$")
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


# a query's time written by a script as Unix epoch seconds (``int(time.time())``: 10 digits, 2001-2286) or
# milliseconds (13 digits)
_EPOCH = re.compile(r"^(?P<s>\d{10})(?:\.\d+)?$|^(?P<ms>\d{13})$")
# fields nvidia-smi reports in MiB: a capture without units (a script's own header, its bare numbers) is in them
_MIB_FIELDS = {"memory.used", "memory.total", "memory.free", "memory.reserved"}


def _time(text: str) -> float | None:
    """A capture's time: epoch seconds or milliseconds as a script writes them, else nvidia-smi's stamp."""
    if (e := _EPOCH.match(text.strip())) is not None:
        return float(text) if e["s"] else int(e["ms"]) / 1000.0
    return _stamp(text)


def _stamp(text: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S",
                "%Y%m%d %H:%M:%S", "%a %b %d %H:%M:%S %Y"):
        try:
            return epoch(datetime.strptime(text.strip(), fmt))
        except ValueError:
            continue
    try:  # a script's ISO 8601 stamp (``datetime.now(timezone.utc).isoformat()``)
        return epoch(datetime.fromisoformat(text.strip()))
    except ValueError:
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
    return out * MIB_TO_MB if unit == "MiB" else out * 1024 * MIB_TO_MB if unit == "GiB" else out


def _maybe_number(value: str, unit: str | None):
    """A field logkit has no name for: its number where it is one, else its text."""
    m = _VALUE.match(value.strip())
    if m is None:
        return value
    out = float(m["num"])
    return out * MIB_TO_MB if (m["unit"] or unit) == "MiB" else out


# How a line of each table begins (what a prefix taken off by ``normalise`` must leave); a markdown
# paste escapes dmon's '#' (``\#``).
# a row begins with its header's first field, a time, an index, a UUID or a bus id (a headerless query keyed by them)
# (a sampler's row may begin with a fraction: elapsed seconds); a row is cut where a quoted cell is open
CSV_GRAMMAR = Grammar(re.compile(r"(?:timestamp|index|name|uuid|pci\.bus_id)\b|\d{4}/\d\d/\d\d|\s*\d+(?:\.\d+)?\s*,"
                                 r"|GPU-[0-9a-fA-F]{8}-|[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d"),
                      cut=lambda text: text.count('"') % 2 == 1)
DMON_GRAMMAR = Grammar(re.compile(r"\\?#|\s*\d+\s+\S+\s+\S+"))


def _header(cells: list[str]) -> list[tuple[str, str | None]] | None:
    """The (field, unit) of each column when ``cells`` is a header line, else None."""
    first = cells[0].split(" [")[0] if cells else ""
    if first not in QUERY_COLUMNS and first != "timestamp":
        return sampler_header(cells)  # a script's own names (``elapsed_sec,gpu_util_pct,...``)
    out = []
    for c in cells:
        m = _HEADER_UNIT.match(c)
        field, unit = (m["field"], m["unit"]) if m else (c, None)
        if field not in QUERY_COLUMNS and field != "timestamp" and (own := sampler_field(field)) is not None:
            field, unit = own[0], unit or own[1]  # a sampler's name beside the query's (``gpu_utilization``)
        out.append((field, unit))
    return out


def _cells(line: str) -> list[str]:
    """A row's cells; a quoted cell (a script's csv writer) without its quotes."""
    if '"' not in line:
        return [c.strip() for c in line.split(",")]
    return [c.strip() for c in next(csv.reader([line], skipinitialspace=True))]


def _dmon_line(line: str) -> str:
    """A dmon line without what a paste put before it (indentation, ``> ``, ``\\#``)."""
    m = _QUOTE.match(line)
    if m is not None:
        return line[m.end():]
    stripped = line.lstrip()
    return stripped[1:].lstrip() if stripped.startswith(">") else stripped


def read_nvidia_smi_csv(path: Path, rank: int | None = None) -> ReadResult:
    """``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` (repeated headers allowed)."""
    read = Read(Path(path), FileFormat.NVIDIA_SMI_CSV)
    header: list[tuple[str, str | None]] | None = None
    headless: list[tuple[int, str, list[str]]] = []  # rows before any header: named by their values
    first_row, place, watch_time = None, 0, None
    for rec in records(read, CSV_GRAMMAR):
        number, raw = rec.number, rec.text
        line = raw[_PASTE.match(raw).end():]  # a paste's own indentation and quote marks
        if _WATCH.match(line) is not None:  # a watch frame: its time for rows that carry none
            w = _WATCH_STAMP.search(line)
            watch_time = _stamp(" ".join(w[0].split())) if w else None
            read.used += 1
            continue
        if _COMMAND.search(line) is not None:
            read.used += 1
            continue
        cells = _cells(line)
        if (found := _header(cells)) is not None:
            header, place = found, 0
            read.used += 1
            continue
        if header is None:
            headless.append((number, line, cells))
            continue
        if len(cells) != len(header):
            read.unmatched(number, raw)
            continue
        read.used += 1
        row = _row(read, number, header, cells, line)
        if row["time_s"] is None:
            row["time_s"] = watch_time
        row["place"], place = place, place + 1  # its place under its header: nvidia-smi lists GPUs by index
        read.rows["gpu"].append(row)
        first_row = number if first_row is None else first_row
    first = headless[0][0] if headless else None
    if headless:
        _headless(read, headless)
    _number_gpus(read, first if first is not None else first_row)
    return read.result()


def _row(read: Read, number: int, header: list[tuple[str, str | None]], cells: list[str], line: str) -> dict:
    row: dict = {"time_s": None, "host": "", "gpu": None}
    for (field, unit), value in zip(header, cells, strict=True):
        if field == ELAPSED:  # a sampler's seconds since it started
            row["time_s"] = _maybe_number(value, None) if _VALUE.match(value) else None
            continue
        if field == "timestamp":
            row["time_s"] = _time(value)
            if row["time_s"] is None:
                read.note(number, f"value does not convert: timestamp {value!r}", line)
            continue
        column = QUERY_COLUMNS.get(field, field.replace(".", "_"))
        if column in _TEXT_COLUMNS:
            row[column] = value
        elif field not in QUERY_COLUMNS:
            row[column] = _maybe_number(value, unit)
        elif column == "gpu":
            row[column] = int(value) if value.isdigit() else None
        else:
            row[column] = _number(read, number, field, value, unit or ("MiB" if field in _MIB_FIELDS else None), line)
    return row


def _kind(values: list[str]) -> str | None:
    """What a column of a headerless capture holds, from all its values: a field, a unit, or None."""
    present = [v for v in values if v not in _ABSENT]
    if not present:
        return None
    for name, test in (("timestamp", lambda v: _time(v) is not None), ("bus_id", _BUS_ID.match),
                       ("uuid", _UUID.match), ("pstate", _PSTATE.match)):
        if all(test(v) for v in present):
            return name
    units = {m["unit"] if (m := _UNIT.match(v)) else None for v in present}
    if len(units) == 1 and None not in units:
        return units.pop()
    if all(re.fullmatch(r"\d+", v) for v in present):
        return "int"
    if all(_VALUE.match(v) for v in present):
        return "number"
    return "text"


def _headless(read: Read, rows: list[tuple[int, str, list[str]]]) -> None:
    """Rows of a capture without a header (``noheader``): each column named by its values where they
    say what it is (module doc), the rest by its place and unit, and a diagnostic naming those."""
    width = max(len(c) for _, _, c in rows)
    good = [(n, line, c) for n, line, c in rows if len(c) == width]
    for n, line, c in rows:
        if len(c) != width:
            read.unmatched(n, line)
    if width < 2 or len(good) < 1:
        for n, line, _ in good:
            read.unmatched(n, line)
        return
    columns = list(zip(*(c for _, _, c in good), strict=True))
    kinds = [_kind(list(col)) for col in columns]
    names: list[str | None] = [None] * width
    for field in ("timestamp", "bus_id", "uuid", "pstate"):
        if kinds.count(field) == 1:
            names[kinds.index(field)] = field
    ints = [i for i, k in enumerate(kinds) if k == "int"]
    if ints and ints[0] == min(i for i, k in enumerate(kinds) if k is not None) and \
            min(int(v) for v in columns[ints[0]] if v.isdigit()) == 0:  # an absent value ("") is no index
        names[ints[0]] = "index"  # the first column, counting GPUs from 0
    texts = [i for i, k in enumerate(kinds) if k == "text"]
    if len(texts) == 1:
        names[texts[0]] = "name"
    for unit, field in (("MiB", "memory.total"), ("W", "power.limit")):
        _constant_top(columns, kinds, names, unit, field)
    varying = [i for i, k in enumerate(kinds) if k == "W" and names[i] is None and len(set(columns[i])) > 1]
    if len(varying) == 1:  # of a GPU's watts only the draw changes (limits are set, not measured)
        names[varying[0]] = "power.draw"
    header: list[tuple[str, str | None]] = []
    guessed = []
    for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        if name is None:
            name = f"column_{i + 1}" + {"MiB": "_mb", "W": "_w", "MHz": "_mhz", "%": "_pct"}.get(kind or "", "")
            guessed.append(f"{i + 1} ({kind or 'empty'})")
        header.append((name, kind if kind in ("MiB", "W", "MHz", "%") else None))
    first = good[0][0]
    read.note(first, "nvidia-smi query without a header: columns named by their values"
              + (f"; kept by place: {', '.join(guessed)}" if guessed else ""), good[0][1])
    for number, line, cells in good:
        read.used += 1
        read.rows["gpu"].append(_row(read, number, header, cells, line))


def _constant_top(columns, kinds, names, unit: str, field: str) -> None:
    """Name ``field`` the column of ``unit`` that never changes for a GPU and tops the others of the
    unit on every row (a total, a limit), where exactly one does and another column of it exists."""
    at = [i for i, k in enumerate(kinds) if k == unit and names[i] is None]
    if len(at) < 2:
        return
    key = next((i for i, n in enumerate(names) if n in ("index", "bus_id", "uuid")), None)
    values = [[float(_UNIT.match(v).group(0)[: -len(unit)]) if _UNIT.match(v) else None for v in columns[i]]
              for i in at]
    tops = []
    for j, vals in enumerate(values):
        per_gpu: dict = {}
        for r, v in enumerate(vals):
            per_gpu.setdefault(columns[key][r] if key is not None else 0, set()).add(v)
        constant = all(len(s) == 1 for s in per_gpu.values())
        above = all(v is not None and all(o[r] is None or v >= o[r] for o in values) for r, v in enumerate(vals))
        if constant and above:
            tops.append(at[j])
    if len(tops) == 1:
        names[tops[0]] = field


def _one_query_per_header(rows: list[dict]) -> bool:
    """Whether each header stands over one query's rows (one per GPU): blocks of equal size, and a lone
    block whose GPU names do not repeat (a loop under one header repeats them)."""
    blocks, size = [], 0
    for r in rows:
        if r["place"] == 0 and size:
            blocks.append(size)
            size = 0
        size += 1
    blocks.append(size)
    if len(set(blocks)) != 1:
        return False
    names = [r.get("gpu_name") for r in rows]
    return len(blocks) > 1 or (None not in names and len(set(names)) == len(names))


def _number_gpus(read: Read, first: int | None) -> None:
    """Rows without an index: their key (bus id, UUID) numbers them in order of first appearance; and
    the capture's GPU count, with where it comes from."""
    rows = read.rows["gpu"]
    if not rows:
        return
    key = next((k for k in _KEYS if all(r.get(k) for r in rows)), None)
    if key is not None and all(r.get("gpu") is None for r in rows):
        order: dict[str, int] = {}
        for r in rows:
            r["gpu"] = order.setdefault(r[key], len(order))
            r["gpu_from"] = f"order of first appearance of {key}"
    elif all(r.get("gpu") is None and r.get("time_s") is not None for r in rows):
        # no index and no key, but times: a query's GPUs are printed within a second, in index order
        place, last, near = 0, None, _one_time(rows)
        for r in rows:
            place = place + 1 if last is not None and abs(r["time_s"] - last) < near else 0
            r["gpu"], r["gpu_from"], last = place, "place among the rows of one time", r["time_s"]
    elif all(r.get("gpu") is None and "place" in r for r in rows):
        if _one_query_per_header(rows):  # a header per query, the GPUs under it in index order
            for r in rows:
                r["gpu"], r["gpu_from"] = r["place"], "place under its header"
        else:
            read.note(first, "nvidia-smi query without index, bus id or UUID, and samples under one header: "
                             "its rows cannot be told apart by GPU (gpu left unknown)")
    sample, last_gpu = -1, None
    for r in rows:  # a query's rows (its GPUs in index order) are one sample
        r.pop("place", None)
        gpu = r.get("gpu")
        sample += 1 if gpu is None or last_gpu is None or gpu <= last_gpu else 0
        r["sample"], last_gpu = sample, gpu
    count_gpus(read, first)


def _one_time(rows: list[dict]) -> float:
    """How close two rows' times are when one query printed them: within 1 s, and under half the
    capture's cadence (the median gap between queries, the gaps over 50 ms: nvidia-smi stamps a query's
    rows within milliseconds), so a sampler writing one GPU twice a second is not read as two GPUs."""
    gaps = sorted(b["time_s"] - a["time_s"] for a, b in zip(rows, rows[1:], strict=False))
    apart = [g for g in gaps if g > 0.05]
    return min(1.0, apart[len(apart) // 2] / 2) if apart else 1.0


def count_gpus(read: Read, first: int | None) -> None:
    """``meta.gpu_count`` of a capture: the distinct GPUs (per host) its rows list, derived, with the
    file and its first row (``gpu_count_from``, ``facts_source``)."""
    rows = read.rows["gpu"]
    gpus = {(r.get("host") or "", r.get("gpu")) for r in rows if r.get("gpu") is not None}
    if not gpus:
        return
    n = len(gpus)
    how = rows[0].get("gpu_from")
    what = f"{n} distinct GPU(s) in the capture's rows" + (f" (numbered by {how})" if how else "")
    where = read.label if first is None else f"{read.label}:{first}"
    read.meta.update(gpu_count=n, gpu_count_from=f"derived: {what} ({read.label})", facts_source={"gpu_count": where})


def read_nvidia_smi_dmon(path: Path, rank: int | None = None) -> ReadResult:
    """``nvidia-smi dmon [-s ...] [-o DT]``: one row per GPU per sample; without ``-o T`` a
    sample's ``time_s`` is its index (dmon samples once per second by default)."""
    read = Read(Path(path), FileFormat.NVIDIA_SMI_DMON)
    columns: list[str] | None = None
    units: list[str] = []
    sample, seen, first = -1, set(), None
    for rec in records(read, DMON_GRAMMAR):
        number, raw = rec.number, rec.text
        line = _dmon_line(raw)
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
        first = number if first is None else first
    count_gpus(read, first)
    return read.result()
