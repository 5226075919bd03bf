"""The session logger's resource sampler (``sampling.ResourceSampler``), as a part of ``SessionLogger``: started
at the session's start where ``gpu_snapshot_interval`` asks for it, one ``gpu_snapshot`` record per interval
(host and GPUs: mean, min, max), the resource findings on those means, and each degradation said once."""

from __future__ import annotations

from logkit.schema.findings import FindingKind
from logkit.schema.records import GPU_SNAPSHOT, RESOURCE_WARNING
from trainer_hooks.findings import resource_findings


class ResourceSampling:
    """Mixed into ``SessionLogger`` (its settings, info, records and emitter)."""

    def _start_sampler(self) -> None:
        interval = self.settings.gpu_snapshot_interval
        if interval <= 0:
            return
        try:
            from trainer_hooks.sampling import ResourceSampler
        except ImportError:
            return
        # five samples per interval (mean/min/max of something), at most one every 2 s (each
        # costs ~0.5 ms of CPU in psutil and NVML); where no step record carries a point reading
        # (``resource_usage_steps`` 0: low), the readings only feed the interval's means: ten per
        # interval (low: one every 6 s, a third of the CPU)
        every = interval / 10 if not self.settings.resource_usage_steps else min(2.0, interval / 5)
        self._sampler = ResourceSampler(interval_s=interval, sample_every_s=max(0.05, every),
                                        on_interval=self._on_snapshot, gpu=self._samples_gpus(),
                                        system_state=self.settings.system_state)
        self._sampler.start()
        self._sampler_notes()

    def _sampler_notes(self) -> None:
        # each degradation (no pynvml, no driver, a metric failing) is said once; the builder
        # keeps the sampler after end() let go of it (its last interval is delivered then)
        sampler = self._sampler or (self._builder.sampler if self._builder is not None else None)
        for note in sampler.take_notes() if sampler is not None else []:
            self._emit(self._record(RESOURCE_WARNING, note, "INFO", subkind=FindingKind.SAMPLING_DEGRADED))

    def _samples_gpus(self) -> bool:
        """The local-rank-0 process of each node samples every GPU visible on its node
        (``CUDA_VISIBLE_DEVICES`` applies, mapped to NVML by index or UUID); the other ranks
        sample the host only. So one stream per node holds that node's ``gpu_snapshot``
        devices, and rank 0's summary and performance.log cover the GPUs of node 0 (on several
        nodes, each node's local rank 0 stream has its own node's)."""
        return self.info is None or self.info.local_rank == 0

    def _on_snapshot(self, snapshot: dict) -> None:
        """Sampler thread: one ``gpu_snapshot`` per interval (mean/min/max over it, host and
        GPUs; ``devices: []`` where no GPU is sampled), and the findings on those means."""
        if self.settings.snapshot_records:
            from trainer_hooks.sampling import snapshot_message

            record = self._record(GPU_SNAPSHOT, snapshot_message(snapshot), step=self._last_step or None,
                                  host=self.info.hostname if self.info else None)
            record.update(snapshot)  # the sampler lays out its part by the same spec
            self._emit(record)
        self._gpu_stats.add(GPU_SNAPSHOT["devices"].get(snapshot) or [])
        self._sampler_notes()
        s = self.settings
        usage = GPU_SNAPSHOT["resource_usage"].get(snapshot) or {}
        for finding in resource_findings(usage, s.memory_high_pct, s.gpu_memory_high_pct, s.gpu_util_low_pct):
            self._finding(RESOURCE_WARNING, finding, self._last_step or None)
