"""The plain ``nvidia-smi`` table (the boxed one) -> ``gpu``: one snapshot per frame, as printed
alone, by ``nvidia-smi -l N`` or by ``watch nvidia-smi`` (``Every 2.0s: nvidia-smi`` headers).

The table's layout changed with the drivers (2014-2026): ``MB`` then ``MiB``, the ``MIG M.`` row
(450+), wider columns (530+), ``KMD Version`` / ``CUDA UMD Version`` for ``Driver Version`` /
``CUDA Version`` (610+), ``TCC/WDDM`` in place of ``Persistence-M`` on Windows, and the processes
table with or without ``GI ID CI ID`` and ``Type``. So a GPU is read by its cells, never by column
positions: its first row ``| 0  Name  Persistence | Bus-Id  Disp.A | ECC |``, its second
``| Fan Temp Perf Pwr:Usage/Cap | Memory-Usage | GPU-Util Compute M. |``, its optional third
(``MIG M.``).

Per GPU and frame: ``gpu`` (the index), ``gpu_name`` (as shown: a name cut by the table, ``...``,
is kept without the dots and ``name_truncated`` says so), ``bus_id``, ``persistence`` (On/Off, or
the Windows driver model), ``display_active``, ``ecc``, ``fan_pct``, ``temperature_c``, ``pstate``,
``power_w``, ``power_limit_w``, ``memory_used_mb``, ``memory_total_mb`` (the table's MiB, and the
``MB`` of old drivers, which are MiB too, become MB = 10^6 bytes), ``utilization_pct``,
``compute_mode``, ``mig_mode``, its MIG devices where the table lists them (``mig_devices``: "GI/CI/dev:
used / total MB, SMs" joined by "; ", ``mig_device_count``), and the frame's processes on the GPU (``processes``: "pid name
(type, MB)" joined by "; ", ``process_count``, ``process_memory_mb``). ``sample`` numbers the
frames; ``time_s`` is the frame's own time line (``Mon Nov 25 10:00:00 2024``) or its ``watch``
header's, else unknown. The header gives ``meta.driver_version`` and ``meta.cuda_driver_version``;
``meta.gpu_count`` is the number of GPUs the table lists, with ``gpu_count_from`` and the lines in
``meta.facts_source``. ``N/A``, ``[N/A]``, ``ERR!`` and ``Unknown Error`` are absent values (a
header's ``CUDA Version: N/A``, a host whose driver has no CUDA, leaves the version stated as
none). A capture pasted indented, or as a markdown quote, is read as it is.

What a capture holds around the table: the shell prompt the command was typed at names the host
(``root@node1:~# nvidia-smi``, ``[user@host dir]$ ...``: ``host`` of the rows below it), and
``nvidia-smi -L``'s list (``GPU 0: <name> (UUID: GPU-...)``, its MIG lines under it) gives each
GPU its ``uuid`` (and its whole name where the table cuts it); a GPU listed and not in the table is
a row of the first snapshot with its name and UUID alone.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records

MIB_TO_MB = 2**20 / 1e6
_ABSENT = {"N/A", "[N/A]", "ERR!", "Unknown Error", "[Unknown Error]", "Not Supported", "[Not Supported]", "-"}
_PASTE = re.compile(r"^[ \t]*(?:>[ \t]?)*[ \t]*")  # indentation, markdown quote marks
_STAMP = re.compile(r"(?P<stamp>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
                    r"\s+\d{1,2} \d\d:\d\d:\d\d \d{4})")
_WATCH = re.compile(r"^Every\s+\d+(?:\.\d+)?s:\s+\S*nvidia-smi\b")
# the command that printed the table (behind a shell prompt, kubectl exec, docker run, watch)
_COMMAND = re.compile(r"(?:^|[\s$#>:/])nvidia-smi\b")
_HEADER = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<driver>\S+)"
                     r"(?:\s+CUDA (?:UMD )?Version:\s*(?P<cuda>\d+(?:\.\d+)?|N/A))?")
_NUM = r"\d+(?:\.\d+)?"
_ABS = r"N/A|\[N/A\]|ERR!|Unknown Error"
_ROW1 = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<name>\S.*?)\s+(?P<persist>On|Off|N/A|WDDM|TCC|MCDM)\s*$")
_BUS = re.compile(r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*(?P<disp>On|Off|N/A)?\s*$")
_ROW2 = re.compile(rf"^\s*(?P<fan>\d+%|{_ABS})\s+(?P<temp>-?\d+C|{_ABS})\s+(?P<perf>P\d+|{_ABS})"
                   rf"\s+(?P<pwr>{_NUM}W|{_ABS})\s*/\s*(?P<cap>{_NUM}W|{_ABS})\s*$")
_MEMORY = re.compile(r"^\s*(?P<used>\d+)\s*(?P<uu>MiB|MB)\s*/\s*(?P<total>\d+)\s*(?P<tu>MiB|MB)\s*$")
_UTIL = re.compile(rf"^\s*(?P<util>\d+%|{_ABS})\s+(?P<compute>\S.*?)\s*$")
_MIG = re.compile(r"^\s*(?P<mig>Enabled|Disabled|N/A)\s*$")
# a MIG device (the "MIG devices:" table, 450+): GPU, GI, CI, MIG dev | memory | SMs, ECC | shared engines
_MIG_DEVICE = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s*$")
_SMS = re.compile(r"^\s*(?P<sm>\d+)\b")
# a processes row: GPU, [GI ID, CI ID], PID, [type], name, memory (or N/A)
_PROCESS = re.compile(r"^\s*(?P<gpu>\d+)\s+(?:(?P<gi>\d+|N/A)\s+(?P<ci>\d+|N/A)\s+)?(?P<pid>\d+)\s+"
                      r"(?:(?P<type>C\+G|M\+C|C|G|M)\s+)?(?P<name>\S.*?)\s+"
                      r"(?P<mem>\d+\s*(?:MiB|MB)|N/A|Not Supported)\s*$")
# a shell prompt before a command: "user@host:dir# ", "[user@host dir]$ " (a conda env's "(base) " before it)
PROMPT = re.compile(r"^(?:\([\w.-]+\)\s+)?(?:\[[\w.-]+@(?P<h1>[\w.-]+)(?:[ :][^\]]*)?\]|[\w.-]+@(?P<h2>[\w.-]+):\S*)\s?[#$%](?:\s|$)")
# nvidia-smi -L: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)", and a MIG device's line under its GPU
_LISTED = re.compile(r"^GPU (?P<gpu>\d+): (?P<name>\S.*?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\)\s*$")
_LISTED_MIG = re.compile(r"^MIG \S+\s+Device\s+\d+: \(UUID: MIG-[0-9a-fA-F-]+\)\s*$")
# lines of the table that hold no value: rules, column titles, the processes' header
# how the table's lines begin: its rules and cells, a frame's date or watch header, the command typed
GRAMMAR = Grammar(re.compile(r"[+|]|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) |Every\s|\S*nvidia-smi\b|GPU \d+: |MIG "))
# how a line of the table begins, told from a log service's "| <time> |" column (a reader of another tool that
# meets the table inside its capture, gpustat's, says so in its own grammar and still learns such a prefix)
TABLE_LINE = re.compile(r"\+-|\|(?=[\s=-]*(?:[|+]|$|NVIDIA-SMI|GPU\b|Fan\b|N/A|\d+%|\d+\s+\S|Processes:|No running|ID\b))"
                        r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} |GPU \d+: |MIG \S+\s+Device")
_FURNITURE = re.compile(r"^[+|][-=+|\s]*$|Persistence-M|TCC/WDDM|Pwr:Usage/Cap|MIG M\.\s*\|\s*$|Processes:|"
                        r"Process name|^\|\s+ID\s+ID\b|Usage\s*\|\s*$|No running (?:compute )?processes found|"
                        r"MIG devices:|Memory-Usage|BAR1-Usage|\bECC\|")


def _value(text: str, unit: str = "") -> float | None:
    """The number of a cell (``45%``, ``62W``, ``32C``), None where the table says none."""
    text = text.strip()
    if text in _ABSENT:
        return None
    return float(text[: len(text) - len(unit)] if unit and text.endswith(unit) else text)


def _cells(line: str) -> list[str] | None:
    """The cells of a boxed row (``| a | b | c |``), None for a line that is not one."""
    if not (line.startswith("|") and line.rstrip().endswith("|")):
        return None
    return line.strip()[1:-1].split("|")


def _time(text: str) -> float | None:
    try:
        return epoch(datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


class Table:
    """The state of one capture: the frame being read, the GPU whose rows come next, the
    processes table."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.sample, self.time_s, self.new_frame = -1, None, True
        self.frame: dict[int, dict] = {}  # gpu index -> its row in this frame
        self.gpu: dict | None = None  # the GPU whose second and third rows come next
        self.expect = 0  # which row of self.gpu comes next: 2, 3, or 0 (none)
        self.in_processes = False
        self.listed: dict[int, int] = {}  # gpu index -> first line it was listed at
        self.host = ""  # the host the last shell prompt named
        self.inventory: dict[int, tuple[str, str]] = {}  # nvidia-smi -L: gpu index -> (name, uuid)

    def start_frame(self, time_s: float | None = None) -> None:
        """A frame's marker (its time line, ``watch`` header, NVIDIA-SMI header): the next GPU
        row opens a new snapshot."""
        if time_s is not None:
            self.time_s = time_s
        self.new_frame, self.in_processes, self.gpu, self.expect = True, False, None, 0

    def _marker(self, line: str) -> bool:
        """A frame's marker (watch's header, the time line, the NVIDIA-SMI header) or an ``nvidia-smi -L``
        line: taken; else False."""
        if _WATCH.match(line) is not None:  # watch's header: its time, until the frame's own time line
            s = _STAMP.search(line)
            self.start_frame(_time(s["stamp"]) if s else None)
            return True
        if (s := _STAMP.fullmatch(line.strip())) is not None:  # nvidia-smi's own time line
            self.start_frame(_time(s["stamp"]))
            return True
        if (h := _HEADER.search(line)) is not None:
            self.read.meta.fill(driver_version=h["driver"])
            if h["cuda"] == "N/A":  # stated: the driver has no CUDA (a hypervisor's host)
                self.read.meta.fill(cuda_driver_version=None)
            elif h["cuda"]:
                major, _, minor = h["cuda"].partition(".")
                self.read.meta.fill(cuda_driver_version=int(major) * 1000 + int(minor or 0) * 10)
            self.start_frame()
            return True
        if (g := _LISTED.match(line)) is not None:
            self.inventory.setdefault(int(g["gpu"]), (g["name"], g["uuid"]))
            return True
        return _LISTED_MIG.match(line) is not None

    def line(self, number: int, line: str) -> bool:
        if self._marker(line):
            return True
        cells = _cells(line)
        if cells is None:  # a rule (``+---+``, ``|---+---+``), the command, or no line of the table
            if (p := PROMPT.match(line)) is not None:
                self.host = p["h1"] or p["h2"]
                return True
            return bool(_FURNITURE.search(line) or ("|" not in line and _COMMAND.search(line)))
        if "Processes:" in line:
            self.in_processes, self.gpu, self.expect = True, None, 0
            return True
        if self.in_processes and len(cells) == 1 and (p := _PROCESS.match(cells[0])) is not None:
            self._process(number, p)
            return True
        if len(cells) == 4:
            return self._mig_device(number, line, cells)
        if len(cells) == 3:
            if self.expect == 2 and (r2 := _ROW2.match(cells[0])) is not None:
                return self._row2(number, line, r2, cells)
            if self.expect == 3 and _MIG.match(cells[2]) and not cells[0].strip() and not cells[1].strip():
                self.gpu["mig_mode"] = None if cells[2].strip() == "N/A" else cells[2].strip()
                self.expect = 0
                return True
            if (r1 := _ROW1.match(cells[0])) is not None and (b := _BUS.match(cells[1])) is not None:
                self._row1(number, r1, b, cells[2])
                return True
        return bool(_FURNITURE.search(line))

    def _row1(self, number: int, r1: re.Match, b: re.Match, ecc: str) -> None:
        gpu = int(r1["gpu"])
        if self.new_frame or gpu in self.frame:  # a GPU listed again without a marker: the next snapshot
            self.sample, self.frame, self.new_frame = self.sample + 1, {}, False
        name = r1["name"].strip()
        truncated = name.endswith("...")
        row = {"time_s": self.time_s, "host": self.host, "gpu": gpu, "gpu_name": name[:-3].rstrip() if truncated else name,
               "name_truncated": truncated, "bus_id": b["bus"], "persistence": r1["persist"],
               "display_active": b["disp"], "ecc": None if ecc.strip() in _ABSENT else ecc.strip(),
               "sample": self.sample, "processes": "", "process_count": 0, "process_memory_mb": 0.0}
        self.read.rows["gpu"].append(row)
        self.frame[gpu] = row
        self.gpu, self.expect = row, 2
        self.listed.setdefault(gpu, number)

    def name_listed(self) -> None:
        """The ``nvidia-smi -L`` inventory onto the table's rows: each GPU's UUID, its whole name where the
        table cut it; a GPU listed and not in the table, a row of the first snapshot."""
        rows = self.read.rows["gpu"]
        seen = {r["gpu"] for r in rows}
        for gpu, (name, _uuid) in self.inventory.items():
            if gpu not in seen:
                rows.append({"time_s": None, "host": self.host, "gpu": gpu, "gpu_name": name,
                             "name_truncated": False, "sample": max(self.sample, 0), "processes": "",
                             "process_count": 0, "process_memory_mb": 0.0})
        for row in rows:
            if (listed := self.inventory.get(row["gpu"])) is None:
                continue
            row["uuid"] = listed[1]
            if row["name_truncated"] and listed[0].startswith(row["gpu_name"]):
                row["gpu_name"], row["name_truncated"] = listed[0], False

    def _row2(self, number: int, line: str, r2: re.Match, cells: list[str]) -> bool:
        row, read = self.gpu, self.read
        m, u = _MEMORY.match(cells[1]), _UTIL.match(cells[2])
        if m is None or u is None:
            read.note(number, "nvidia-smi table: a GPU's second row does not read (memory, utilization)", line)
            self.expect = 3  # its third row (MIG M.) may still follow
            return True
        scale = {"MiB": MIB_TO_MB, "MB": MIB_TO_MB}  # the old drivers' "MB" are MiB too
        row.update(fan_pct=_value(r2["fan"], "%"), temperature_c=_value(r2["temp"], "C"),
                   pstate=None if r2["perf"] in _ABSENT else r2["perf"], power_w=_value(r2["pwr"], "W"),
                   power_limit_w=_value(r2["cap"], "W"), memory_used_mb=float(m["used"]) * scale[m["uu"]],
                   memory_total_mb=float(m["total"]) * scale[m["tu"]], utilization_pct=_value(u["util"], "%"),
                   compute_mode=u["compute"])
        self.expect = 3
        return True

    def _mig_device(self, number: int, line: str, cells: list[str]) -> bool:
        """A row of the MIG devices table: a device (its GPU's ``mig_devices``, "GI/CI/dev: used / total MB,
        SMs"), or its BAR1 row below it."""
        d, m = _MIG_DEVICE.match(cells[0]), _MEMORY.match(cells[1])
        if d is None:  # the BAR1 row below a device, or the table's titles
            return (not cells[0].strip() and m is not None) or bool(_FURNITURE.search(line))
        row = self.frame.get(int(d["gpu"]))
        if row is None or m is None:
            self.read.note(number, f"nvidia-smi MIG devices: GPU {d['gpu']} is not in the table above"
                           if row is None else "nvidia-smi MIG devices: a device's memory does not read", line)
            return True
        sms = _SMS.match(cells[2])
        text = (f"GI {d['gi']}/CI {d['ci']}/dev {d['dev']}: {float(m['used']) * MIB_TO_MB:.0f} / "
                f"{float(m['total']) * MIB_TO_MB:.0f} MB" + (f", {sms['sm']} SMs" if sms else ""))
        row["mig_devices"] = f"{row['mig_devices']}; {text}" if row.get("mig_devices") else text
        row["mig_device_count"] = row.get("mig_device_count", 0) + 1
        return True

    def _process(self, number: int, p: re.Match) -> None:
        row = self.frame.get(int(p["gpu"]))
        if row is None:
            self.read.note(number, f"nvidia-smi processes: GPU {p['gpu']} is not in the table above", p.string)
            return
        mem = p["mem"].replace(" ", "")
        mb = float(mem[:-3] if mem.endswith("MiB") else mem[:-2]) * MIB_TO_MB if mem[0].isdigit() else None
        kind = f"{p['type']}, " if p["type"] else ""
        text = f"{p['pid']} {p['name']} ({kind}{'n/a' if mb is None else f'{mb:.0f} MB'})"
        row["processes"] = f"{row['processes']}; {text}" if row["processes"] else text
        row["process_count"] += 1
        row["process_memory_mb"] += mb or 0.0


def read_nvidia_smi_table(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.NVIDIA_SMI_TABLE)
    table = Table(read)
    for rec in records(read, GRAMMAR):
        number, raw = rec.number, rec.text
        line = raw[_PASTE.match(raw).end():].rstrip()  # a paste's own indentation and quote marks
        if not line:
            continue
        if table.line(number, line):
            read.used += 1
        else:
            read.unmatched(number, raw)
    table.name_listed()
    if table.listed:
        # the lines that first list each GPU (its first row, and its second below it)
        where = f"{read.label}:{min(table.listed.values())}-{max(table.listed.values()) + 1}"
        n = len(table.listed)
        read.meta.update(gpu_count=n, gpu_count_from=f"derived: {n} GPU(s) the nvidia-smi table lists ({where})",
                         facts_source={"gpu_count": f"{read.label}:{min(table.listed.values())}"})
    return read.result()
