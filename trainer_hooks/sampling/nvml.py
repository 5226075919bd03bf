"""GPU readings from NVML (``pynvml``, imported lazily): the loader, one ``nvmlInit`` per
process, and the probe of a set of devices numbered as CUDA numbers them. What a device's sample
holds is the contract's table (``logkit.schema.gpu``): its ids, and each metric's reading (a field
of ``Reading``, in NVML's units) in the metric's unit under its key."""

from __future__ import annotations

import os
import threading
import warnings
from typing import NamedTuple

from logkit.schema.gpu import DEVICE_IDS, DEVICE_METRICS
from logkit.schema.values import to_float

_IDS = tuple(i.key for i in DEVICE_IDS)


class Reading(NamedTuple):
    """One device's readings, in NVML's units (bytes, mW, KiB/s): a field per ``DeviceMetric.attr``."""

    utilization: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    power: float | None = None
    temperature: float | None = None
    memory_percent: float | None = None
    sm_clock: float | None = None
    pcie_rx: float | None = None
    pcie_tx: float | None = None
    nvlink_rx: float | None = None
    nvlink_tx: float | None = None

_NVML_LOCK = threading.Lock()
_NVML: dict = {"module": None, "error": None, "tried": False}


def nvml_module():
    """(pynvml module, None) after one ``nvmlInit`` per process, or (None, why GPU metrics are off)."""
    with _NVML_LOCK:
        if not _NVML["tried"]:
            _NVML["tried"] = True
            _NVML["module"], _NVML["error"] = _init_nvml()
        return _NVML["module"], _NVML["error"]


def reset_nvml() -> None:
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


class GpuProbe:
    """NVML readings of a set of devices. A metric a device does not support is asked once."""

    def __init__(self, nv, indices: list[int] | None, pcie: bool, nvlink: bool) -> None:
        self.nv = nv
        count = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(self._call(nv.nvmlDeviceGetUUID, h)) for h in handles]
        visible = cuda_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)  # CUDA ordinal -> NVML index
        wanted = range(len(visible)) if indices is None else [i for i in indices if 0 <= i < len(visible)]
        self.devices = []
        for ordinal in wanted:
            i = visible[ordinal]
            h = handles[i]
            ids = dict(zip(_IDS, (ordinal, i, _text(self._call(nv.nvmlDeviceGetName, h)), uuids[i]), strict=True))
            self.devices.append({**ids, "handle": h, "off": set(), "links": None, "nvlink_prev": None})
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
        """Each device: its ids, and every metric of ``DEVICE_METRICS`` under its key, in its unit."""
        out = []
        for dev in self.devices:
            reading = self.read(dev, now)
            out.append({**{k: dev[k] for k in _IDS},
                        **{m.key: m.value(getattr(reading, m.attr)) for m in DEVICE_METRICS}})
        return out

    def read(self, dev: dict, now: float) -> Reading:
        """One device's readings (None where NVML gives none, or the metric is off)."""
        nv, h = self.nv, dev["handle"]
        util = self._get(dev, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._get(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        used, total = to_float(getattr(mem, "used", None)), to_float(getattr(mem, "total", None))
        rx = tx = None
        if self.pcie:  # each call blocks ~20 ms inside NVML: fine here, never on training
            rx = to_float(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
                                    getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)))
            tx = to_float(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
                                    getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)))
        link_rx, link_tx = self._nvlink(dev, now) if self.nvlink else (None, None)
        return Reading(
            utilization=to_float(getattr(util, "gpu", None)), memory_used=used, memory_total=total,
            memory_percent=100.0 * used / total if used is not None and total else None,
            temperature=to_float(self._get(dev, "temperature", nv.nvmlDeviceGetTemperature, h,
                                           getattr(nv, "NVML_TEMPERATURE_GPU", 0))),
            power=to_float(self._get(dev, "power", nv.nvmlDeviceGetPowerUsage, h)),  # milliwatts
            sm_clock=to_float(self._get(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h,
                                        getattr(nv, "NVML_CLOCK_SM", 1))),
            pcie_rx=rx, pcie_tx=tx, nvlink_rx=link_rx, nvlink_tx=link_tx)

    def _nvlink(self, dev: dict, now: float) -> tuple[float | None, float | None]:
        """NVLink data throughput (KiB/s) from NVML's cumulative KiB counters, summed over links."""
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
        return max(0.0, rx_kib - prev[1]) / dt, max(0.0, tx_kib - prev[2]) / dt

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


def cuda_visible(env: str | None, uuids: list[str | None]) -> list[int]:
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
    return to_float(value)


def _text(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)

