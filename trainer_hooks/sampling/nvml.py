"""GPU readings from NVML (``pynvml``, imported lazily): the loader, one ``nvmlInit`` per
process, and the probe of a set of devices numbered as CUDA numbers them."""

from __future__ import annotations

import os
import threading
import warnings

from logkit.schema.values import to_float
from trainer_hooks.sampling.metrics import KIB, MB

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
            rec["utilization_percent"] = to_float(getattr(util, "gpu", None))
            mem = self._get(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            used, total = to_float(getattr(mem, "used", None)), to_float(getattr(mem, "total", None))
            rec["memory_used_mb"] = None if used is None else round(used / MB, 3)
            rec["memory_total_mb"] = None if total is None else round(total / MB, 3)
            rec["memory_usage_percent"] = round(100.0 * used / total, 3) if used is not None and total else None
            rec["temperature_c"] = to_float(self._get(dev, "temperature", nv.nvmlDeviceGetTemperature, h,
                                                  getattr(nv, "NVML_TEMPERATURE_GPU", 0)))
            power = to_float(self._get(dev, "power", nv.nvmlDeviceGetPowerUsage, h))  # milliwatts
            rec["power_w"] = None if power is None else round(power / 1000.0, 3)
            rec["sm_clock_mhz"] = to_float(self._get(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h,
                                                 getattr(nv, "NVML_CLOCK_SM", 1)))
            rx = tx = None
            if self.pcie:  # each call blocks ~20 ms inside NVML: fine here, never on training
                rx = to_float(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
                                    getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)))
                tx = to_float(self._get(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h,
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

