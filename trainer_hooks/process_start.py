"""When this process started (wall clock), for the ledger's start-up: everything before the logger
existed (imports, model load, quantisation) is the time from the process's start to the logger's
origin.

Read from the kernel's own record of the process: psutil's ``create_time`` where psutil is there,
else ``/proc/self/stat`` (field 22: start time in clock ticks after boot) plus the boot time of
``/proc/stat`` (``btime``). Both have the kernel's tick as resolution (10 ms at 100 Hz).

    >>> started, source = process_start()
    >>> source in ("psutil", "/proc/self/stat") and started > 0
    True
"""

from __future__ import annotations

import os


def process_start() -> tuple[float | None, str | None]:
    """(this process's start as a Unix time, where it was read), or (None, None) where no source says."""
    try:
        import psutil

        return float(psutil.Process().create_time()), "psutil"
    except Exception:  # no psutil, or a platform it cannot read
        pass
    try:
        return _from_proc(), "/proc/self/stat"
    except (OSError, ValueError, IndexError):
        return None, None


def _from_proc() -> float:
    with open("/proc/self/stat", encoding="ascii") as fh:
        stat = fh.read()
    # the command name (field 2) is in parentheses and may hold spaces: count fields after its ')'
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = int(fields[19])  # field 22 of the whole line
    with open("/proc/stat", encoding="ascii") as fh:
        boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")
