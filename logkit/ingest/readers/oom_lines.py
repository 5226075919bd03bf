"""CUDA out-of-memory messages as torch prints them (``torch.cuda.OutOfMemoryError``), read for the console
reader: what was requested, the GPU's capacity and free memory, and what PyTorch had allocated and reserved."""

from __future__ import annotations

import re

# CUDA out of memory, old ("(GPU 0; 15.78 GiB total capacity; ...; 5.12 MiB free; ...)") and new ("GPU 7 has a total
# capacity of 79.11 GiB of which 2.61 GiB is free. ... this process has 0 bytes memory in use. Of the allocated
# memory 48.15 GiB is allocated by PyTorch"); a size as torch's format_size writes it: "N bytes" up to 1 KiB, else
# KiB / MiB / GiB (older releases: KB / MB / GB)
_NUM = r"\d+(?:\.\d*)?|\.\d+"
_SIZE = r"[KMGT]?i?B|bytes"
_OOM = re.compile(rf"CUDA out of memory\. Tried to allocate (?P<req>{_NUM}) ?(?P<ru>{_SIZE})")
_OOM_NEW = re.compile(rf"GPU (?P<gpu>\d+) has a total capac\w* of (?P<cap>{_NUM}) ?(?P<cu>{_SIZE}) of which "
                      rf"(?P<free>{_NUM}) ?(?P<fu>{_SIZE}) is free")
_OOM_OLD = re.compile(rf"\(GPU (?P<gpu>\d+); (?P<cap>{_NUM}) ?(?P<cu>{_SIZE}) total capac\w*;.*?"
                      rf"(?P<free>{_NUM}) ?(?P<fu>{_SIZE}) free")
_OOM_MORE = {"allocated_gib": re.compile(rf"(?:Of the allocated memory (?P<v>{_NUM}) ?(?P<u>{_SIZE}) is allocated"
                                         rf"|(?P<v2>{_NUM}) ?(?P<u2>{_SIZE}) already allocated)"),
             "reserved_gib": re.compile(rf"(?P<v>{_NUM}) ?(?P<u>{_SIZE}) reserved in total by PyTorch"),
             "in_use_gib": re.compile(rf"(?:this process|Process \d+) has (?P<v>{_NUM}) ?(?P<u>{_SIZE}) memory in use")}
_UNITS = {"B": 1 / 2**30, "bytes": 1 / 2**30, "KB": 1e3 / 2**30, "KiB": 1 / 2**20, "MB": 1e6 / 2**30, "MiB": 1 / 2**10,
          "GB": 1e9 / 2**30, "GiB": 1.0, "TB": 1e12 / 2**30, "TiB": 2.0**10}


def _gib(value: str | None, unit: str | None) -> float | None:
    try:
        return float(value) * _UNITS[unit]
    except (KeyError, ValueError, TypeError):
        return None


def parse_oom(text: str) -> dict | None:
    """CUDA out of memory: requested_gib, capacity_gib, free_gib, gpu, allocated_gib, reserved_gib, in_use_gib
    (None where the line does not say), or None."""
    o = _OOM.search(text)
    if o is None:
        return None
    cap = _OOM_NEW.search(text) or _OOM_OLD.search(text)
    out = {"requested_gib": _gib(o["req"], o["ru"]), "capacity_gib": _gib(cap["cap"], cap["cu"]) if cap else None,
           "free_gib": _gib(cap["free"], cap["fu"]) if cap else None, "gpu": int(cap["gpu"]) if cap else None}
    for name, pattern in _OOM_MORE.items():
        v = pattern.search(text)
        out[name] = _gib(v["v"] or v.groupdict().get("v2"), v["u"] or v.groupdict().get("u2")) if v else None
    return out
