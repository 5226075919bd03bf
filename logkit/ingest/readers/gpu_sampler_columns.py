"""A training script's own GPU sampler CSV: its column names -> the ``--query-gpu`` fields they mean.

Scripts that poll NVML or nvidia-smi themselves write their samples under names of their own
(``timestamp,gpu_utilization,memory_used,memory_total``; ``elapsed_sec,gpu_util_pct,mem_used_mb,
mem_total_mb,temp_c,power_w``; GPUtil's camelCase ``memoryUsed,memoryTotal``). A name is read by its words: what it measures (utilization, memory
used / total / free, temperature, power, the GPU's index, elapsed time) and the unit its suffix
states (``_mb``, ``_gb``, ``_pct``, ``_w``, ``_c``). Memory a script calls MB is what nvidia-smi and NVML
report, MiB (NVML's bytes / 2**20, which scripts name MB). A name that says neither what nor which
(``memory_usage``: MiB or %?) is not mapped and keeps its own name.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z]+")
# a camelCase name's word boundaries (GPUtil's ``memoryUsed``, ``memUsedMB``, ``GPUUtil``): split before lowercasing
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_UTIL = {"util", "utilization", "utilisation", "utilization_gpu", "load"}
_MEM = {"mem", "memory", "vram", "fb"}
_UNITS = {"mb": "MiB", "mib": "MiB", "gb": "GiB", "gib": "GiB", "pct": "%", "percent": "%", "w": "W",
          "watts": "W", "c": None, "mhz": "MHz", "s": None, "sec": None, "secs": None, "seconds": None}
# the field ``elapsed`` is not nvidia-smi's: seconds since the sampler started (``gpu_sampler_time``)
ELAPSED = "elapsed"


def _what(words: set[str]) -> str | None:
    """The query field a name's words say, or None."""
    # memory is what a name with a memory unit measures (``used_mib``, ``total_mib``)
    mem = bool(words & _MEM) or bool(words & {"mb", "mib", "gb", "gib"})
    if words & _UTIL:
        return "utilization.memory" if mem and "gpu" not in words else "utilization.gpu"
    if mem:
        for part, field in (("used", "memory.used"), ("total", "memory.total"), ("free", "memory.free")):
            if part in words:
                return field
        return None
    if words & {"temp", "temperature"}:
        return "temperature.gpu"
    if words & {"power", "watts"}:
        return "power.draw"
    if words & {"elapsed", "runtime"} or words in ({"time", "s"}, {"t", "s"}, {"time", "sec"}):
        return ELAPSED
    if words in ({"gpu"}, {"gpu", "id"}, {"gpu", "index"}, {"gpu", "idx"}, {"device"}, {"device", "id"}):
        return "index"
    return None


def sampler_field(name: str) -> tuple[str, str | None] | None:
    """(query field, unit) that a sampler's column name means, or None where it says neither."""
    words = _WORD.findall(_CAMEL.sub(" ", name).lower().replace("%", " pct "))
    field = _what(set(words))
    if field is None:
        return None
    unit = next((_UNITS[w] for w in reversed(words) if w in _UNITS), None)
    if field in ("memory.used", "memory.total", "memory.free") and unit not in ("MiB", "GiB"):
        unit = "MiB"  # nvidia-smi's and NVML's unit (a script's bare "memory_used" is in it)
    return field, unit


def sampler_header(cells: list[str]) -> list[tuple[str, str | None]] | None:
    """The (field, unit) of each column when ``cells`` is a sampler's header: names (no numbers), two or
    more of them mapped, one a GPU's utilization or memory. Unmapped names keep themselves."""
    if len(cells) < 2 or any(not c or c[0].isdigit() or c[0] in "-+." for c in cells):
        return None
    mapped = [sampler_field(c) for c in cells]
    fields = {m[0] for m in mapped if m is not None}
    if len(fields) < 2 or not fields & {"utilization.gpu", "memory.used", "memory.total"}:
        return None
    return [m if m is not None else (c, None) for c, m in zip(cells, mapped, strict=True)]
