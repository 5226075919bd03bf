"""The sampler thread: host and GPU readings every ``sample_every_s``, aggregated per interval.

Nothing here runs on the training thread except ``start``/``stop`` and reading results.
Without pynvml, a driver or a GPU, the same code runs, host metrics still come, and
``notes`` says once why GPU metrics are off. The thread never raises.

Example::

    >>> s = ResourceSampler(interval_s=None, sample_every_s=0.05).start()
    >>> time.sleep(0.2)
    >>> snap = s.take_interval()           # aggregate of the samples since the last take
    >>> sorted(snap)
    ['devices', 'interval_s', 'resource_usage', 'samples']
    >>> s.stop()
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

from logkit.schema.records import GPU_DEVICE, GPU_SNAPSHOT
from trainer_hooks.sampling.host import HostProbe
from trainer_hooks.sampling.nvml import GpuProbe, nvml_module
from trainer_hooks.sampling.stats import IntervalStats


def snapshot_message(snap: dict) -> str:
    """A one-line message for a ``gpu_snapshot`` record built from ``snap``."""
    devices = GPU_SNAPSHOT["devices"].get(snap) or []
    if not devices:
        usage = GPU_SNAPSHOT["resource_usage"].get(snap) or {}
        cpu = usage.get("cpu", {}).get("usage_percent")
        mem = usage.get("memory", {}).get("usage_percent")
        return f"Resource snapshot (no GPU metrics): CPU {_pct(cpu)}, memory {_pct(mem)}"
    parts = [f"GPU {GPU_DEVICE['gpu'].get(d)}: {_pct(GPU_DEVICE['utilization_pct'].get(d))} util, "
             f"{_pct(GPU_DEVICE['memory_usage_pct'].get(d))} memory" for d in devices]
    return "GPU snapshot | " + " | ".join(parts)


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


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
        self._host: HostProbe | None = None
        self._gpu: GpuProbe | None = None
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
        (a step record's ``resource_usage``), or None before the first one."""
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
            self._host = HostProbe(self._pid, self._children, self._system_state)
        except Exception as exc:  # psutil missing or the process gone: GPU metrics may still come
            self._note(f"host metrics off: {type(exc).__name__}: {exc}")
        if not self._want_gpu:
            self.gpu_available = False
            return
        nv, why = nvml_module()
        if nv is None:
            self.gpu_available = False
            self._note(why)
            return
        try:
            self._gpu = GpuProbe(nv, self._gpu_indices, self._pcie, self._nvlink)
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

