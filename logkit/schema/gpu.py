"""The per-GPU metrics of a ``gpu_snapshot``, in one table: the sampler reads each device by it
(``trainer_hooks.sampling``: NVML's reading ``attr``, divided by ``scale``, written under ``key``;
the interval statistics aggregate it by ``aggregate``), and the ``GPU_DEVICE`` record spec, with it
the readers and the ``gpu`` frame, is made of it (``records.GPU_DEVICE``). In the style of nvitop's
``DEVICE_METRICS`` (attribute, name, unit).

    >>> [m.key for m in DEVICE_METRICS][:3], DEVICE_METRICS[1].value(81_920_000_000.0)
    (['utilization_percent', 'memory_used_mb', 'memory_total_mb'], 81920.0)
    >>> [k for m in DEVICE_METRICS[:2] for k in m.keys]
    ['utilization_percent', 'utilization_percent_min', 'utilization_percent_max', 'memory_used_mb', 'memory_used_mb_min', 'memory_used_mb_max']
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceId", "DeviceMetric", "DEVICE_IDS", "DEVICE_METRICS", "STATISTICS"]

_MB = 1e6  # SI, as the records' units
_KIB = 1024  # NVML's PCIe and NVLink "KB" are KiB (as nvitop reads them)
STATISTICS = ("_min", "_max")  # beside an aggregated metric's interval mean: its extremes


@dataclass(frozen=True)
class DeviceId:
    """What names a device in a snapshot: its key, what logkit calls it, its type, and what it is."""

    key: str
    name: str
    type: type
    doc: str
    frame: bool = False


@dataclass(frozen=True)
class DeviceMetric:
    """One per-GPU metric: ``attr`` the probe's reading it comes from (NVML's units), ``key`` its key
    in a device of a snapshot, ``unit`` and ``scale`` (the reading / ``scale`` is the value in ``unit``),
    ``name`` what logkit calls it (a ``gpu`` frame column where ``frame``), ``aggregate``: the interval
    mean with ``_min`` and ``_max`` beside it (False: a constant, its last value)."""

    attr: str
    key: str
    unit: str
    doc: str
    name: str = ""
    scale: float = 1.0
    aggregate: bool = True
    frame: bool = False

    @property
    def column(self) -> str:
        """What logkit calls it: ``name``, else the key."""
        return self.name or self.key

    @property
    def keys(self) -> tuple[str, ...]:
        """Its keys in a snapshot's device: the value, then the interval's extremes where aggregated."""
        return (self.key, *(self.key + s for s in STATISTICS)) if self.aggregate else (self.key,)

    def value(self, reading: float | None) -> float | None:
        """The reading in ``unit`` (to 3 decimals), None where there is none."""
        return None if reading is None else round(float(reading) / self.scale, 3)


DEVICE_IDS: tuple[DeviceId, ...] = (
    DeviceId("index", "gpu", int, "CUDA ordinal (as CUDA_VISIBLE_DEVICES numbers the devices)", frame=True),
    DeviceId("nvml_index", "nvml_index", int, "NVML's index: the physical device"),
    DeviceId("name", "gpu_name", str, "the device's name"),
    DeviceId("uuid", "gpu_uuid", str, "the device's UUID"),
)

# In the order of the gpu frame's columns; the first seven are frame columns.
DEVICE_METRICS: tuple[DeviceMetric, ...] = (
    DeviceMetric("utilization", "utilization_percent", "%", "GPU utilization", "utilization_pct", frame=True),
    DeviceMetric("memory_used", "memory_used_mb", "MB", "GPU memory used (10^6 bytes)", scale=_MB, frame=True),
    DeviceMetric("memory_total", "memory_total_mb", "MB", "GPU memory total", scale=_MB, aggregate=False,
                 frame=True),
    DeviceMetric("power", "power_w", "W", "GPU power draw", scale=1000.0, frame=True),  # NVML: mW
    DeviceMetric("temperature", "temperature_c", "°C", "GPU temperature", frame=True),
    DeviceMetric("memory_percent", "memory_usage_percent", "%", "GPU memory used", "memory_usage_pct", frame=True),
    DeviceMetric("sm_clock", "sm_clock_mhz", "MHz", "SM clock", frame=True),
    DeviceMetric("pcie_rx", "pcie_rx_mb_s", "MB/s", "PCIe receive throughput (sampled with pcie on)",
                 scale=_MB / _KIB),
    DeviceMetric("pcie_tx", "pcie_tx_mb_s", "MB/s", "PCIe transmit throughput (sampled with pcie on)",
                 scale=_MB / _KIB),
    DeviceMetric("nvlink_rx", "nvlink_rx_mb_s", "MB/s", "NVLink receive throughput, all links (with nvlink on)",
                 scale=_MB / _KIB),
    DeviceMetric("nvlink_tx", "nvlink_tx_mb_s", "MB/s", "NVLink transmit throughput, all links (with nvlink on)",
                 scale=_MB / _KIB),
)
