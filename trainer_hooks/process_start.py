"""How long ago this process started, for the ledger's start-up: everything before the logger existed
(imports, model load, quantisation) is the time from the process's start to the logger's origin.

On Linux, from the kernel's own record on the boot clock: ``/proc/self/stat`` field 22 (the start, in
clock ticks after boot) against ``CLOCK_BOOTTIME`` now. Both count from boot, so no wall-clock step or
drift since boot enters (psutil's ``create_time`` adds the boot time as a whole wall-clock second, and
is off by as much as that clock has drifted since: a second is common). Elsewhere psutil's
``create_time`` against the wall clock now. Resolution: the kernel's tick (10 ms at 100 Hz).

    >>> age, source = process_age()
    >>> source in ("/proc/self/stat", "psutil") and 0 <= age < 86400 * 365
    True
"""

from __future__ import annotations

import os
import time


def process_age() -> tuple[float | None, str | None]:
    """(seconds since this process started, where that was read), or (None, None) where no source says."""
    try:
        return _from_proc(), "/proc/self/stat"
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc, or no CLOCK_BOOTTIME
        pass
    try:
        import psutil

        return time.time() - float(psutil.Process().create_time()), "psutil"
    except Exception:  # no psutil, or a platform it cannot read
        return None, None


def _from_proc() -> float:
    with open("/proc/self/stat", encoding="ascii") as fh:
        stat = fh.read()
    # the command name (field 2) is in parentheses and may hold spaces: count fields after its ')'
    ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22 of the whole line
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
