"""Findings while training, decided from numbers the emitter already has.

Pure Python, cheap per call: running medians over short windows, and threshold checks.
Each detector returns a finding, or None: the finding's part of an ``anomaly`` /
``resource_warning`` record, laid out by that record's spec (its ``kind`` one of the kinds
``logkit.schema.findings`` declares), with a ``message`` where the default one says too little.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque

from logkit.schema.findings import FindingKind
from logkit.schema.records import ANOMALY, GPU_DEVICE, RESOURCE_WARNING


def median(values) -> float:
    """The median, by one C sort (``statistics.median`` costs several times more per call:
    these run on the writer thread for every step)."""
    return _middle(sorted(values))


def _middle(s: list[float]) -> float:
    """The median of values already sorted."""
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    half = n // 2
    return s[half] if n % 2 else (s[half - 1] + s[half]) / 2


class SortedWindow:
    """The last ``size`` values, in arrival order and sorted: a running median without a sort per step
    (a C insertion and deletion in a short list; the detectors below run for every step on the writer
    thread). Finite values only (a NaN has no place in an order)."""

    __slots__ = ("order", "sorted")

    def __init__(self, size: int) -> None:
        self.order: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        return iter(self.order)

    def append(self, value: float) -> None:
        order, ordered = self.order, self.sorted
        if len(order) == order.maxlen:  # the oldest leaves both
            del ordered[bisect_left(ordered, order[0])]
        order.append(value)
        insort(ordered, value)

    def median(self) -> float:
        """``median(window)``, from the sorted values."""
        return _middle(self.sorted)


class SlowStepDetector:
    """A step slower than ``factor`` x the running median of the last ``window`` steps.

    The first ``warmup`` steps (compilation, allocator warm-up) only feed the median.
    """

    def __init__(self, factor: float = 3.0, window: int = 50, warmup: int = 5) -> None:
        self.factor, self.warmup = factor, warmup
        self._times = SortedWindow(window)
        self._seen = 0

    def check(self, step_time: float) -> dict | None:
        self._seen += 1
        finding = None
        if self._seen > self.warmup and len(self._times) >= self.warmup:
            mid = self._times.median()
            if mid > 0 and step_time > self.factor * mid:
                finding = ANOMALY.build(subkind=FindingKind.SLOW_STEP, value=round(step_time, 6),
                                        threshold=round(self.factor * mid, 6), median=round(mid, 6))
        self._times.append(step_time)
        return finding


class LossSpikeDetector:
    """A loss above the recent median by more than ``factor`` robust deviations.

    Positive losses are compared on a log scale: a small batch's loss is right-skewed (a
    squared error, a cross-entropy near its floor), and on a linear scale its ordinary upper
    tail reads as spikes (one step in fifty on a healthy regression run). A window holding a
    loss <= 0, or ``log_scale=False``, uses the linear scale. Deviation = 1.4826 x the median
    absolute deviation, floored at 5% of the median (log 1.05 on the log scale) so that a flat
    loss curve does not turn noise into spikes. NaN/Inf are reported elsewhere.
    """

    def __init__(self, factor: float = 3.0, window: int = 20, warmup: int = 5, log_scale: bool = True) -> None:
        self.factor, self.warmup, self.log_scale = factor, warmup, log_scale
        self._losses = SortedWindow(window)

    def check(self, loss: float | None) -> dict | None:
        if loss is None or not math.isfinite(loss):
            return None
        finding = None
        losses = self._losses
        if len(losses) >= self.warmup:
            mid = losses.median()
            if self.log_scale and loss > 0 and losses.sorted[0] > 0:
                scale, center, floor = math.log, math.log(mid), _LOG_FLOOR
            else:
                scale, center, floor = _identity, mid, max(0.05 * abs(mid), 1e-12)
            x = scale(loss)
            # the spread is at least ``floor``: below that no MAD can make a spike
            if x > center + self.factor * floor:
                mad = median([abs(scale(v) - center) for v in losses]) * 1.4826
                limit = center + self.factor * max(mad, floor)
                if x > limit:
                    threshold = math.exp(limit) if scale is math.log else limit
                    finding = ANOMALY.build(subkind=FindingKind.LOSS_SPIKE, value=loss, threshold=threshold, median=mid)
        losses.append(loss)
        return finding


_LOG_FLOOR = math.log(1.05)


def _identity(x: float) -> float:
    return x


class GradNormWatch:
    """Per-layer gradient norms that explode or collapse, each against the layer's own history.

    - explode: a norm above ``factor`` x the median of the layer's last ``window`` norms, once
      it has ``warmup`` of them, in a layer that carries at least its share of the step's
      gradient (its norm at or above the root-mean-square of all layers' norms). A LoRA
      adapter whose gradient grows tenfold while it is still a few percent of the total (B
      waking up from zero) is not an explosion; one layer blowing up, or all of them, is;
    - vanish (a collapse): a norm at or below ``vanish_abs`` in a layer whose median was
      clearly non-zero (at least ``active_abs``). A layer that starts at zero is not flagged:
      with LoRA, B starts at zero, so every A gradient is exactly 0 at the first step.

    Norms at zero do not enter the history (a layer's reference stays what it was before the
    collapse). Each episode is flagged once per layer: a finding again only after the norm came
    back within bounds. No absolute threshold: gradients read before unscaling (fp16 without
    clipping) or of very different layers have very different sizes; the share is relative.
    """

    def __init__(self, factor: float = 10.0, vanish_abs: float = 1e-8, active_abs: float = 1e-6,
                 window: int = 20, warmup: int = 3) -> None:
        self.factor, self.vanish_abs, self.active_abs, self.warmup = factor, vanish_abs, active_abs, warmup
        self._history: dict[str, deque] = {}
        self._flagged: dict[str, str] = {}  # layer -> the kind of its ongoing episode
        self._window = window

    def check(self, norms: dict[str, float]) -> list[dict]:
        findings = []
        finite = [v * v for v in norms.values() if math.isfinite(v)]
        rms = math.sqrt(sum(finite) / len(finite)) if finite else 0.0
        for name, norm in norms.items():
            if not math.isfinite(norm):
                continue  # NaN/Inf have their own report
            past = self._history.get(name)
            if past is None:
                past = self._history[name] = deque(maxlen=self._window)
            kind = threshold = mid = None
            if len(past) >= self.warmup:
                mid = median(past)
                if norm <= self.vanish_abs and mid >= self.active_abs:
                    kind, threshold = FindingKind.GRAD_VANISH, self.vanish_abs
                elif norm > self.factor * mid and norm >= rms:
                    kind, threshold = FindingKind.GRAD_EXPLODE, self.factor * mid
            if kind is None:
                self._flagged.pop(name, None)
            elif self._flagged.get(name) != kind:
                self._flagged[name] = kind
                verb = "collapsed to" if kind == FindingKind.GRAD_VANISH else "exploded to"
                findings.append(ANOMALY.build(subkind=kind, tensor=name, value=norm, threshold=threshold, median=mid,
                                              message=f"Gradient norm of {name} {verb} {norm:.3g} "
                                              f"(its recent median {mid:.3g})"))
            if norm > self.vanish_abs:
                past.append(norm)
        return findings


def resource_findings(usage: dict, memory_high_pct: float, gpu_memory_high_pct: float,
                      gpu_util_low_pct: float) -> list[dict]:
    """Host memory > threshold, GPU memory > threshold, GPU utilization below threshold."""
    findings = []
    mem = (usage.get("memory") or {}).get("usage_percent")
    if mem is not None and mem > memory_high_pct:
        findings.append(RESOURCE_WARNING.build(subkind=FindingKind.MEMORY_HIGH, value=mem, threshold=memory_high_pct,
                                               message=f"Host memory usage high: {mem:.1f}%"))
    for dev in (usage.get("gpu") or {}).get("devices") or []:
        index = GPU_DEVICE["gpu"].get(dev) or 0
        gmem = GPU_DEVICE["memory_usage_pct"].get(dev)
        if gmem is not None and gmem > gpu_memory_high_pct:
            findings.append(RESOURCE_WARNING.build(
                subkind=FindingKind.GPU_MEMORY_HIGH, gpu=index, value=gmem, threshold=gpu_memory_high_pct,
                message=f"GPU {index} memory usage high: {gmem:.1f}%"))
        util = GPU_DEVICE["utilization_pct"].get(dev)
        if util is not None and util < gpu_util_low_pct:
            findings.append(RESOURCE_WARNING.build(
                subkind=FindingKind.GPU_UTIL_LOW, gpu=index, value=util, threshold=gpu_util_low_pct,
                message=f"GPU {index} utilization low: {util:.1f}%"))
    return findings


def trend(values, current: float | None = None) -> dict | None:
    """A series' trend for a step record's ``trends``: current value, mean of the last 5, and the direction."""
    if len(values) <= 5 and None not in values:  # the emitter's windows: deques of 5, no copy
        last5 = values
    else:
        last5 = [v for v in list(values)[-5:] if v is not None]
    if not last5:
        return None
    current = last5[-1] if current is None else current
    avg = sum(last5) / len(last5)
    tolerance = 0.02 * abs(avg) if avg else 1e-9
    direction = "stable" if abs(current - avg) <= tolerance else ("increasing" if current > avg else "decreasing")
    return {"current": current, "avg_last_5": round(avg, 4), "trend_direction": direction}
