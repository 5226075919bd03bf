"""Aggregation of samples over an interval (mean, min, max of every metric).

Pure, so it can be checked against the raw samples it was fed.
"""

from __future__ import annotations

import math

from logkit.schema.gpu import DEVICE_IDS, DEVICE_METRICS, STATISTICS
from logkit.schema.records import GPU_SNAPSHOT
from trainer_hooks.sampling.metrics import HOST_METRICS

_IDS = tuple(i.key for i in DEVICE_IDS)


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
        low, high = (key + s for s in STATISTICS)
        if self.n == 0:
            out[key] = out[low] = out[high] = None
            return
        out[key] = round(self.total / self.n, digits)
        out[low] = round(self.lo, digits)
        out[high] = round(self.hi, digits)


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
            accs = self._gpu.setdefault(index, {m.key: _Acc() for m in DEVICE_METRICS})
            self._ids[index] = {k: dev.get(k) for k in _IDS}
            for m in DEVICE_METRICS:
                accs[m.key].add(dev.get(m.key))

    def devices(self) -> list[dict]:
        out = []
        for index in sorted(self._gpu, key=lambda i: (i is None, i)):
            dev = dict(self._ids[index])
            for m in DEVICE_METRICS:
                self._gpu[index][m.key].put(dev, m.key, m.aggregate)
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
        """The interval's part of a ``gpu_snapshot`` record, laid out by its spec: ``{"devices":
        [...], "interval_s", "samples", "resource_usage": {cpu, memory, gpu}}``."""
        devices = self.devices()
        usage = self.host()
        usage["gpu"] = {"devices": devices}
        if interval_s is None and self.first_t is not None and self.last_t is not None:
            interval_s = self.last_t - self.first_t
        return GPU_SNAPSHOT.build(devices=devices, interval_s=None if interval_s is None else round(interval_s, 6),
                                  samples=self.samples, resource_usage=usage)
