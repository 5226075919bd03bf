"""Host and GPU sampling in a background thread, aggregated per interval (mean, min, max).

In the style of nvitop's ``ResourceMetricCollector``: the metrics are declared as a table
(attribute, name, unit), a daemon thread samples them every ``sample_every_s`` seconds and
closes an interval every ``interval_s`` seconds, handing its aggregate to ``on_interval``.
Nothing here runs on the training thread except ``start``/``stop`` and reading results.

Host metrics come from psutil; GPU metrics from NVML (``pynvml``, imported lazily). Without
pynvml, a driver or a GPU, the same code runs, host metrics still come, and ``notes`` says
once why GPU metrics are off. The sampler thread never raises.

Example::

    >>> s = ResourceSampler(interval_s=None, sample_every_s=0.05).start()
    >>> time.sleep(0.2)
    >>> snap = s.take_interval()           # aggregate of the samples since the last take
    >>> sorted(snap)
    ['devices', 'interval_s', 'resource_usage', 'samples']
    >>> s.stop()
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Metric",
    "HOST_METRICS",
    "GPU_METRICS",
    "IntervalStats",
    "ResourceSampler",
    "host_sample",
    "snapshot_message",
]

GB = 1e9  # SI, as LOG_FORMATS.md: GiB only where a name says GiB
MB = 1e6
KIB = 1024  # NVML's PCIe and NVLink "KB" are KiB (as nvitop reads them)


@dataclass(frozen=True)
class Metric:
    """One sampled quantity: its key in the output dicts, a human name and its unit."""

    attr: str
    name: str
    unit: str
    aggregate: bool = True  # False: a constant (a total), reported as its last value


# Host metrics, keyed by group of ``resource_usage`` (seed 004: cpu{}, memory{}).
HOST_METRICS: dict[str, tuple[Metric, ...]] = {
    "cpu": (
        Metric("usage_percent", "CPU utilization (all cores)", "%"),
        Metric("process_percent", "CPU of the sampled process tree (100 = one core)", "%"),
        Metric("count", "logical CPUs", "", aggregate=False),
    ),
    "memory": (
        Metric("usage_percent", "host memory used", "%"),
        Metric("used_gb", "host memory used", "GB"),
        Metric("available_gb", "host memory available", "GB"),
        Metric("total_gb", "host memory total", "GB", aggregate=False),
        Metric("process_rss_gb", "resident memory of the sampled process tree", "GB"),
    ),
    # ``system_state`` only (verbosity ultra): I/O rates, psutil's counters, host temperatures
    "disk": (
        Metric("read_mb_s", "disk read throughput (all disks)", "MB/s"),
        Metric("write_mb_s", "disk write throughput (all disks)", "MB/s"),
        Metric("read_bytes", "bytes read since boot (psutil counter)", "bytes", aggregate=False),
        Metric("write_bytes", "bytes written since boot (psutil counter)", "bytes", aggregate=False),
    ),
    "network": (
        Metric("recv_mb_s", "network receive throughput (all interfaces)", "MB/s"),
        Metric("sent_mb_s", "network send throughput (all interfaces)", "MB/s"),
        Metric("bytes_recv", "bytes received since boot (psutil counter)", "bytes", aggregate=False),
        Metric("bytes_sent", "bytes sent since boot (psutil counter)", "bytes", aggregate=False),
    ),
    "temperatures": (
        Metric("max_c", "hottest host sensor", "°C"),
        Metric("sensors", "every host sensor, '<chip>/<label>': °C", "°C", aggregate=False),
    ),
}

# Per-GPU metrics (the ``gpu_snapshot`` device keys of LOG_FORMATS.md, plus links).
GPU_METRICS: tuple[Metric, ...] = (
    Metric("utilization_percent", "GPU utilization", "%"),
    Metric("memory_used_mb", "GPU memory used", "MB"),
    Metric("memory_total_mb", "GPU memory total", "MB", aggregate=False),
    Metric("memory_usage_percent", "GPU memory used", "%"),
    Metric("temperature_c", "GPU temperature", "°C"),
    Metric("power_w", "GPU power draw", "W"),
    Metric("sm_clock_mhz", "SM clock", "MHz"),
    Metric("pcie_rx_mb_s", "PCIe receive throughput", "MB/s"),
    Metric("pcie_tx_mb_s", "PCIe transmit throughput", "MB/s"),
    Metric("nvlink_rx_mb_s", "NVLink receive throughput (all links)", "MB/s"),
    Metric("nvlink_tx_mb_s", "NVLink transmit throughput (all links)", "MB/s"),
)

_DEVICE_IDS = ("index", "nvml_index", "name", "uuid")


# ---------------------------------------------------------------------------------------
# Aggregation: pure, so it can be checked against the raw samples it was fed.
# ---------------------------------------------------------------------------------------
class _Acc:
    __slots__ = ("n", "total", "lo", "hi", "last")

    def __init__(self) -> None:
        self.n, self.total, self.lo, self.hi, self.last = 0, 0.0, math.inf, -math.inf, None

    def add(self, value, aggregate: bool = True) -> None:
        if value is None:
            return
        if not aggregate:  # a constant, a counter or a dict: kept as sampled
            self.last = value
            return
        raw, value = value, float(value)
        if math.isnan(value):
            return
        self.n += 1
        self.total += value
        self.lo = min(self.lo, value)
        self.hi = max(self.hi, value)
        self.last = raw

    def put(self, out: dict, key: str, aggregate: bool, digits: int = 3) -> None:
        if not aggregate:
            out[key] = self.last  # a constant (count, total): as sampled
            return
        if self.n == 0:
            out[key] = out[key + "_min"] = out[key + "_max"] = None
            return
        out[key] = round(self.total / self.n, digits)
        out[key + "_min"] = round(self.lo, digits)
        out[key + "_max"] = round(self.hi, digits)


class IntervalStats:
    """Mean, min and max of every metric over the samples ``add``-ed since creation.

    A sample is the dict ``ResourceSampler.latest()`` gives: ``{"cpu": {...}, "memory":
    {...}, "gpu": {"devices": [...]}}``. Missing values (``None``) are skipped; a metric
    without any value comes out as ``None`` (with ``_min``/``_max`` also ``None``).
    """

    def __init__(self) -> None:
        self.samples = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self._host = {g: {m.attr: _Acc() for m in ms} for g, ms in HOST_METRICS.items()}
        self._groups: set[str] = set()  # host groups the samples had (disk/network/... only at ultra)
        self._gpu: dict[int, dict[str, _Acc]] = {}
        self._ids: dict[int, dict] = {}

    def add(self, sample: dict, t: float | None = None) -> None:
        self.samples += 1
        if t is not None:
            self.first_t = t if self.first_t is None else self.first_t
            self.last_t = t
        for group, metrics in HOST_METRICS.items():
            values = sample.get(group)
            if values is None:
                continue
            self._groups.add(group)
            for m in metrics:
                self._host[group][m.attr].add(values.get(m.attr), m.aggregate)
        for dev in (sample.get("gpu") or {}).get("devices") or []:
            index = dev.get("index")
            accs = self._gpu.setdefault(index, {m.attr: _Acc() for m in GPU_METRICS})
            self._ids[index] = {k: dev.get(k) for k in _DEVICE_IDS}
            for m in GPU_METRICS:
                accs[m.attr].add(dev.get(m.attr))

    def devices(self) -> list[dict]:
        out = []
        for index in sorted(self._gpu, key=lambda i: (i is None, i)):
            dev = dict(self._ids[index])
            for m in GPU_METRICS:
                self._gpu[index][m.attr].put(dev, m.attr, m.aggregate)
            out.append(dev)
        return out

    def host(self) -> dict:
        out: dict[str, dict] = {}
        for group, metrics in HOST_METRICS.items():
            if group not in self._groups and group not in ("cpu", "memory"):
                continue
            out[group] = {}
            for m in metrics:
                self._host[group][m.attr].put(out[group], m.attr, m.aggregate)
        return out

    def snapshot(self, interval_s: float | None = None) -> dict:
        """``{"devices": [...], "interval_s", "samples", "resource_usage": {cpu, memory, gpu}}``."""
        devices = self.devices()
        usage = self.host()
        usage["gpu"] = {"devices": devices}
        if interval_s is None and self.first_t is not None and self.last_t is not None:
            interval_s = self.last_t - self.first_t
        return {
            "devices": devices,
            "interval_s": None if interval_s is None else round(interval_s, 6),
            "samples": self.samples,
            "resource_usage": usage,
        }


def snapshot_message(snap: dict) -> str:
    """A one-line message for a ``gpu_snapshot`` record built from ``snap``."""
    devices = snap.get("devices") or []
    if not devices:
        cpu = (snap.get("resource_usage") or {}).get("cpu", {}).get("usage_percent")
        mem = (snap.get("resource_usage") or {}).get("memory", {}).get("usage_percent")
        return f"Resource snapshot (no GPU metrics): CPU {_pct(cpu)}, memory {_pct(mem)}"
    parts = [f"GPU {d.get('index')}: {_pct(d.get('utilization_percent'))} util, "
             f"{_pct(d.get('memory_usage_percent'))} memory" for d in devices]
    return "GPU snapshot | " + " | ".join(parts)


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


# ---------------------------------------------------------------------------------------
# Host sampling (psutil)
# ---------------------------------------------------------------------------------------
class _HostProbe:
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
    probe = _HostProbe(pid, children)
    time.sleep(0.1)
    return probe.sample()


# ---------------------------------------------------------------------------------------
# GPU sampling (NVML)
# ---------------------------------------------------------------------------------------
_NVML_LOCK = threading.Lock()
_NVML: dict = {"module": None, "error": None, "tried": False}


def _nvml():
    """(pynvml module, None) after one ``nvmlInit`` per process, or (None, why GPU metrics are off)."""
    with _NVML_LOCK:
        if not _NVML["tried"]:
            _NVML["tried"] = True
            _NVML["module"], _NVML["error"] = _init_nvml()
        return _NVML["module"], _NVML["error"]


def _reset_nvml() -> None:
    """Forget the NVML state (tests swap the ``pynvml`` module)."""
    with _NVML_LOCK:
        _NVML.update(module=None, error=None, tried=False)


def _init_nvml():
    try:
        with warnings.catch_warnings():  # the old "pynvml" wheel warns that it is deprecated
            warnings.simplefilter("ignore")
            import pynvml
    except ImportError:
        return None, "pynvml not installed (pip install nvidia-ml-py): GPU metrics off"
    except Exception as exc:  # a broken install must not stop host sampling
        return None, f"pynvml cannot be imported ({exc!r}): GPU metrics off"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        kind = type(exc).__name__
        if kind.endswith("LibraryNotFound"):
            return None, "no NVIDIA driver (libnvidia-ml not found): GPU metrics off"
        if kind.endswith("DriverNotLoaded"):
            return None, "NVIDIA driver not loaded: GPU metrics off"
        return None, f"NVML init failed ({kind}: {exc}): GPU metrics off"
    return pynvml, None


class _GpuProbe:
    """NVML readings of a set of devices. A metric a device does not support is asked once."""

    def __init__(self, nv, indices: list[int] | None, pcie: bool, nvlink: bool) -> None:
        self.nv = nv
        count = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(self._call(nv.nvmlDeviceGetUUID, h)) for h in handles]
        visible = _cuda_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)  # CUDA ordinal -> NVML index
        wanted = range(len(visible)) if indices is None else [i for i in indices if 0 <= i < len(visible)]
        self.devices = []
        for ordinal in wanted:
            i = visible[ordinal]
            h = handles[i]
            self.devices.append({"index": ordinal, "nvml_index": i, "handle": h,
                                 "name": _text(self._call(nv.nvmlDeviceGetName, h)), "uuid": uuids[i],
                                 "off": set(), "links": None, "nvlink_prev": None})
        self.pcie, self.nvlink = pcie, nvlink
        self.errors: list[str] = []  # first failure of each kind, for notes

    @staticmethod
    def _call(fn, *args):
        try:
            return fn(*args)
        except Exception:
            return None

    def _get(self, dev: dict, key: str, fn, *args):
        """``fn(*args)``, None when it fails; NotSupported (or missing) switches ``key`` off."""
        if key in dev["off"]:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            kind = type(exc).__name__
            if isinstance(exc, AttributeError) or kind.endswith(("NotSupported", "NoPermission",
                                                                  "FunctionNotFound")):
                dev["off"].add(key)
            elif len(self.errors) < 20:
                self.errors.append(f"GPU {dev['index']} {key}: {kind}: {exc}")
            return None

    def sample(self, now: float) -> list[dict]:
        nv = self.nv
        out = []
        for dev in self.devices:
            h = dev["handle"]
            rec = {"index": dev["index"], "nvml_index": dev["nvml_index"], "name": dev["name"], "uuid": dev["uuid"]}
            util = self._get(dev, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
            rec["utilization_percent"] = _num(getattr(util, "gpu", None))
            mem = self._get(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            used, total = _num(getattr(mem, "used", None)), _num(getattr(mem, "total", None))
            rec["memory_used_mb"] = None if used is None else round(used / MB, 3)
            rec["memory_total_mb"] = None if total is None else round(total / MB, 3)
            rec["memory_usage_percent"] = round(100.0 * used / total, 3) if used is not None and total else None
            rec["temperature_c"] = _num(self._get(dev, "temperature", nv.nvmlDeviceGetTemperature, h,
                                                  getattr(nv, "NVML_TEMPERATURE_GPU", 0)))
            power = _num(self._get(dev, "power", nv.nvmlDeviceGetPowerUsage, h))  # milliwatts
            rec["power_w"] = None if power is None else round(power / 1000.0, 3)
            rec["sm_clock_mhz"] = _num(self._get(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h,
                                                 getattr(nv, "NVML_CLOCK_SM", 1)))
            rx = tx = None
            if self.pcie:  # each call blocks ~20 ms inside NVML: fine here, never on training
                rx = _num(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
                                    getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)))
                tx = _num(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
                                    getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)))
            rec["pcie_rx_mb_s"] = None if rx is None else round(rx * KIB / MB, 3)
            rec["pcie_tx_mb_s"] = None if tx is None else round(tx * KIB / MB, 3)
            rec["nvlink_rx_mb_s"], rec["nvlink_tx_mb_s"] = self._nvlink(dev, now) if self.nvlink else (None, None)
            out.append(rec)
        return out

    def _nvlink(self, dev: dict, now: float) -> tuple[float | None, float | None]:
        """NVLink data throughput from NVML's cumulative KiB counters, summed over links."""
        nv = self.nv
        if "nvlink" in dev["off"]:
            return None, None
        if dev["links"] is None:
            count = self._field(dev, [getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", 91)])
            n = int(count[0]) if count and count[0] is not None else 0
            if n <= 0:
                dev["off"].add("nvlink")
                return None, None
            dev["links"] = n
        rx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139)
        tx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138)
        ids = [(rx_id, link) for link in range(dev["links"])] + [(tx_id, link) for link in range(dev["links"])]
        values = self._field(dev, ids)
        if not values or any(v is None for v in values):
            return None, None
        n = dev["links"]
        rx_kib, tx_kib = sum(values[:n]), sum(values[n:])
        prev, dev["nvlink_prev"] = dev["nvlink_prev"], (now, rx_kib, tx_kib)
        if prev is None or now <= prev[0]:
            return None, None  # a rate needs two readings
        dt = now - prev[0]
        return (round(max(0.0, rx_kib - prev[1]) * KIB / MB / dt, 3),
                round(max(0.0, tx_kib - prev[2]) * KIB / MB / dt, 3))

    def _field(self, dev: dict, ids: list) -> list | None:
        values = self._get(dev, "nvlink", self.nv.nvmlDeviceGetFieldValues, dev["handle"], ids)
        if values is None:
            return None
        out = []
        for v in values:
            if getattr(v, "nvmlReturn", 0) != 0:
                dev["off"].add("nvlink")
                return None
            out.append(_field_value(v))
        return out


def _cuda_visible(env: str | None, uuids: list[str | None]) -> list[int]:
    """NVML indices of the devices CUDA numbers 0, 1, ... (``CUDA_VISIBLE_DEVICES`` semantics:
    ordinals or UUID prefixes; the list ends at the first entry that names no device)."""
    if env is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for item in (x.strip() for x in env.split(",")):
        if item.isdigit() and int(item) < len(uuids):
            index = int(item)
        else:
            matches = [i for i, u in enumerate(uuids) if item and u and u.startswith(item)]
            if len(matches) != 1:
                break
            index = matches[0]
        if index in out:
            break
        out.append(index)
    return out


def _field_value(v):
    value = getattr(v, "value", None)
    for attr in ("ullVal", "ulVal", "uiVal", "sllVal", "dVal"):
        got = getattr(value, attr, None)
        if got is not None:
            return got
    return _num(value)


def _num(value):
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _text(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)


# ---------------------------------------------------------------------------------------
# The sampler
# ---------------------------------------------------------------------------------------
class ResourceSampler:
    """Samples host and GPU metrics in a daemon thread; aggregates them per interval.

    ``interval_s``: close an interval every so many seconds and pass its aggregate to
    ``on_interval`` (called on the sampler thread; its exceptions are swallowed into
    ``notes``). ``None``: intervals close only when ``take_interval()`` is called.
    ``sample_every_s``: seconds between samples. ``pid``/``children``: the process tree
    whose RSS and CPU share are reported (default: this process, without children).
    ``gpu``: False skips NVML. ``gpu_indices``: the devices (default: all visible).
    ``pcie``/``nvlink``: link throughput (PCIe readings cost ~20 ms each inside NVML).
    ``gpu_indices`` and the output ``index`` are CUDA ordinals (``CUDA_VISIBLE_DEVICES``
    applies, as for torch); ``nvml_index`` is the physical one.
    ``system_state``: also disk and network I/O (rates and psutil's counters) and host
    temperatures, groups ``disk``, ``network``, ``temperatures`` (verbosity ``ultra``).
    ``history``: how many raw samples ``recent()`` keeps (for trends).

    ``notes`` lists, once each, what degraded (GPU metrics off and why, a metric failing);
    ``take_notes()`` returns the ones not taken yet, for the emitter to turn into records.
    """

    def __init__(
        self,
        interval_s: float | None = 10.0,
        sample_every_s: float = 1.0,
        on_interval: Callable[[dict], None] | None = None,
        *,
        pid: int | None = None,
        children: bool = False,
        gpu: bool = True,
        gpu_indices: list[int] | None = None,
        pcie: bool = True,
        nvlink: bool = True,
        system_state: bool = False,
        history: int = 600,
    ) -> None:
        if sample_every_s <= 0:
            raise ValueError("sample_every_s must be positive")
        if interval_s is not None and interval_s <= 0:
            raise ValueError("interval_s must be positive or None")
        self.interval_s = interval_s
        self.sample_every_s = sample_every_s
        self.on_interval = on_interval
        self._pid, self._children = pid, children
        self._want_gpu, self._gpu_indices, self._pcie, self._nvlink = gpu, gpu_indices, pcie, nvlink
        self._system_state = system_state
        self.notes: list[str] = []
        self._notes_taken = 0
        self.gpu_available: bool | None = None  # known once start() or sample_once() ran
        self._host: _HostProbe | None = None
        self._gpu: _GpuProbe | None = None
        self._probes_ready = False
        self._lock = threading.Lock()
        self._stats = IntervalStats()
        self._interval_start = time.monotonic()
        self._latest: dict | None = None
        self.latest_time: float | None = None  # wall time of ``latest()``
        self._history: deque = deque(maxlen=max(1, history))
        self._stop = threading.Event()
        self._ready = threading.Event()  # set after the first sample (notes are known then)
        self._thread: threading.Thread | None = None
        self.samples_taken = 0
        self.intervals_closed = 0

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ResourceSampler:
        """Set up the probes (one ``nvmlInit`` per process, device handles: a one-off cost,
        so that ``notes`` already says whether GPU metrics are off) and start the thread."""
        self._ensure_probes()
        if self._thread is None:
            self._stop.clear()
            self._interval_start = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="logkit-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self, final: bool = True, timeout: float = 5.0) -> dict | None:
        """Stop the thread. With ``final`` and samples pending, close the last (partial)
        interval: it goes to ``on_interval`` (on this thread) and is returned."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout)
        # NVML stays initialised (no nvmlShutdown): other samplers in this process share it.
        if not final or self._stats.samples == 0:
            return None
        snap = self.take_interval()
        self._deliver(snap)
        return snap

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_ready(self, timeout: float | None = 10.0) -> bool:
        """Block until the first sample is taken (so ``notes`` and ``gpu_available`` are set)."""
        return self._ready.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- results -----------------------------------------------------------------------
    def latest(self) -> dict | None:
        """The last raw sample, ``{"cpu": {...}, "memory": {...}, "gpu": {"devices": [...]}}``
        (seed 004's ``resource_usage``), or None before the first one."""
        return self._latest

    def resource_usage(self) -> dict:
        """``latest()``, or ``{}`` before the first sample: for a step record's ``resource_usage``.
        Costs a reference read; the dict is never changed after it was made, so it can be shared."""
        return self._latest or {}

    def recent(self, n: int | None = None) -> list[dict]:
        """The last ``n`` raw samples (all kept ones when None), oldest first."""
        with self._lock:
            items = list(self._history)
        return items if n is None else items[-n:]

    def take_interval(self) -> dict:
        """Close the current interval now and return its aggregate (see ``IntervalStats.snapshot``);
        safe from any thread. ``interval_s`` is the time since the previous close."""
        now = time.monotonic()
        with self._lock:
            stats, self._stats = self._stats, IntervalStats()
            start, self._interval_start = self._interval_start, now
            self.intervals_closed += 1
        return stats.snapshot(now - start)

    def take_notes(self) -> list[str]:
        """Notes added since the last call (each note is given out once)."""
        new = self.notes[self._notes_taken:]
        self._notes_taken = len(self.notes)
        return new

    @property
    def status(self) -> str:
        """``"gpu+host"``, ``"host only"`` or ``"not sampled yet"``."""
        if self.gpu_available is None:
            return "not sampled yet"
        return "gpu+host" if self.gpu_available else "host only"

    # -- sampling ----------------------------------------------------------------------
    def sample_once(self) -> dict:
        """Take one sample on the calling thread, record it, and return it."""
        self._ensure_probes()
        t = time.monotonic()
        sample: dict = {}
        if self._host is not None:
            try:
                sample.update(self._host.sample())
                for note in self._host.notes:
                    self._note(note)
            except Exception as exc:
                self._note(f"host sampling failed: {type(exc).__name__}: {exc}")
        devices: list = []
        if self._gpu is not None:
            try:
                devices = self._gpu.sample(t)
            except Exception as exc:
                self._note(f"GPU sampling failed: {type(exc).__name__}: {exc}")
            for err in self._gpu.errors:
                self._note(err)
            self._gpu.errors.clear()
        sample["gpu"] = {"devices": devices}
        with self._lock:
            self._stats.add(sample, t)
            self._history.append(sample)
            self._latest = sample
            self.latest_time = time.time()
            self.samples_taken += 1
        self._ready.set()
        return sample

    def _ensure_probes(self) -> None:
        if self._probes_ready:
            return
        self._probes_ready = True
        try:
            self._host = _HostProbe(self._pid, self._children, self._system_state)
        except Exception as exc:  # psutil missing or the process gone: GPU metrics may still come
            self._note(f"host metrics off: {type(exc).__name__}: {exc}")
        if not self._want_gpu:
            self.gpu_available = False
            return
        nv, why = _nvml()
        if nv is None:
            self.gpu_available = False
            self._note(why)
            return
        try:
            self._gpu = _GpuProbe(nv, self._gpu_indices, self._pcie, self._nvlink)
        except Exception as exc:
            self.gpu_available = False
            self._note(f"NVML device enumeration failed ({type(exc).__name__}: {exc}): GPU metrics off")
            return
        if not self._gpu.devices:
            self._gpu = None
            self.gpu_available = False
            hidden = os.environ.get("CUDA_VISIBLE_DEVICES") is not None
            self._note("no NVIDIA GPU visible (CUDA_VISIBLE_DEVICES): GPU metrics off" if hidden
                       else "no NVIDIA GPU found: GPU metrics off")
            return
        self.gpu_available = True

    def _note(self, text: str) -> None:
        if text and text not in self.notes and len(self.notes) < 50:
            self.notes.append(text)

    def _deliver(self, snap: dict) -> None:
        if self.on_interval is None:
            return
        try:
            self.on_interval(snap)
        except Exception as exc:
            self._note(f"on_interval callback failed: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        # Everything in a try: this thread must never raise, whatever the platform does.
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                # Close first, so a sample taken at the boundary opens the next interval.
                if self.interval_s is not None and time.monotonic() - self._interval_start >= self.interval_s - 1e-3:
                    self._deliver(self.take_interval())
                self.sample_once()
            except Exception as exc:
                self._note(f"sampler error: {type(exc).__name__}: {exc}")
            next_t += self.sample_every_s
            now = time.monotonic()
            if next_t < now:  # overran (slow NVML calls): skip the missed ticks, don't burst
                next_t = now + self.sample_every_s
            if self.interval_s is not None:  # wake for an interval close that falls first
                next_t = min(next_t, max(now, self._interval_start + self.interval_s))
            self._stop.wait(max(0.0, next_t - now))
