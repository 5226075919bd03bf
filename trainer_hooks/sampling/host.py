"""Host readings from psutil: CPU and memory, and at ``ultra`` disk/network I/O and temperatures."""

from __future__ import annotations

import os
import time

from trainer_hooks.sampling.metrics import GB, MB


class HostProbe:
    """psutil readings; a process tree (``pid`` and its children) for RSS and CPU share."""

    def __init__(self, pid: int | None, children: bool, system_state: bool = False) -> None:
        import psutil

        self.psutil = psutil
        self.pid = os.getpid() if pid is None else pid
        self.children = children
        self.system_state = system_state
        self.notes: list[str] = []
        self._io_prev: dict[str, tuple[float, object]] = {}
        self._procs: dict[int, object] = {}
        # Our own reference point: psutil.cpu_percent(None) shares one with every other caller
        # in the process (the emitter's system info, a user's code), which skews it.
        self._cpu_prev = psutil.cpu_times()
        self._tree()

    def _tree(self) -> list:
        ps = self.psutil
        try:
            root = self._procs.get(self.pid) or ps.Process(self.pid)
            procs = [root] + (root.children(recursive=True) if self.children else [])
        except ps.Error:
            return []
        # Keep Process objects across samples: cpu_percent() is measured since the last call.
        current = {}
        for p in procs:
            known = self._procs.get(p.pid)
            if known is None:
                try:
                    p.cpu_percent(None)
                except ps.Error:
                    continue
                known = p
            current[p.pid] = known
        self._procs = current
        return list(current.values())

    def sample(self) -> dict:
        ps = self.psutil
        vm = ps.virtual_memory()
        rss = cpu = 0.0
        for p in self._tree():
            try:
                rss += p.memory_info().rss
                cpu += p.cpu_percent(None)
            except ps.Error:  # a child that just exited
                continue
        return {
            "cpu": {"usage_percent": self._cpu_percent(), "process_percent": round(cpu, 2),
                    "count": ps.cpu_count()},
            "memory": {"usage_percent": vm.percent, "used_gb": round(vm.used / GB, 4),
                       "available_gb": round(vm.available / GB, 4), "total_gb": round(vm.total / GB, 4),
                       "process_rss_gb": round(rss / GB, 4)},
            **(self._system_state() if self.system_state else {}),
        }

    def _system_state(self) -> dict:
        """Disk and network I/O (psutil's counters and the rates since the previous sample) and
        host temperatures; a group psutil cannot give here is left out and said once."""
        ps, out, now = self.psutil, {}, time.monotonic()
        for group, read, keys in (("disk", ps.disk_io_counters, ("read_bytes", "write_bytes")),
                                  ("network", ps.net_io_counters, ("bytes_recv", "bytes_sent"))):
            try:
                counters = read()
            except Exception:
                counters = None
            if counters is None:  # e.g. a container without /proc/diskstats
                self._say(f"host {group} I/O counters not available: not sampled")
                continue
            values = {k: getattr(counters, k) for k in keys}
            prev, self._io_prev[group] = self._io_prev.get(group), (now, values)
            rates = [None, None]
            if prev is not None and now > prev[0]:
                rates = [round(max(0, values[k] - prev[1][k]) / MB / (now - prev[0]), 4) for k in keys]
            names = ("read_mb_s", "write_mb_s") if group == "disk" else ("recv_mb_s", "sent_mb_s")
            out[group] = {names[0]: rates[0], names[1]: rates[1], **values}
        try:
            sensors = ps.sensors_temperatures() if hasattr(ps, "sensors_temperatures") else {}
        except Exception:
            sensors = {}
        readings = {}
        for chip, entries in (sensors or {}).items():
            for i, entry in enumerate(entries):
                if entry.current is not None and entry.current > 0:
                    readings[f"{chip}/{entry.label or i}"] = round(float(entry.current), 1)
        if readings:
            out["temperatures"] = {"max_c": max(readings.values()), "sensors": readings}
        else:
            self._say("host temperature sensors not available: not sampled")
        return out

    def _say(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _cpu_percent(self) -> float | None:
        """Busy share of all cores since the previous sample; None when no tick has passed."""
        now, prev = self.psutil.cpu_times(), self._cpu_prev
        total = sum(now) - sum(prev)
        if total <= 0:
            return None
        self._cpu_prev = now
        idle = (now.idle - prev.idle) + (getattr(now, "iowait", 0.0) - getattr(prev, "iowait", 0.0))
        return round(min(100.0, max(0.0, 100.0 * (total - idle) / total)), 2)


def host_sample(pid: int | None = None, children: bool = False) -> dict:
    """One host reading: ``{"cpu": {...}, "memory": {...}}`` (CPU shares over the next 0.1 s)."""
    probe = HostProbe(pid, children)
    time.sleep(0.1)
    return probe.sample()

