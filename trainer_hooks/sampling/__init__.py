"""Host and GPU sampling in a background thread, aggregated per interval (mean, min, max).

- ``metrics``: the catalogue of host metrics (what is sampled, its name and unit; the GPU's are
  ``logkit.schema.gpu.DEVICE_METRICS``);
- ``stats``: an interval's mean/min/max of every metric (``IntervalStats``);
- ``host``: psutil readings; ``nvml``: NVML readings (probing, apart from aggregation);
- ``sampler``: the thread (``ResourceSampler``) and a snapshot's one-line message.
"""

from __future__ import annotations

from trainer_hooks.sampling.host import host_sample
from trainer_hooks.sampling.metrics import HOST_METRICS, Metric
from trainer_hooks.sampling.sampler import ResourceSampler, snapshot_message
from trainer_hooks.sampling.stats import IntervalStats

__all__ = ["Metric", "HOST_METRICS", "IntervalStats", "ResourceSampler", "host_sample",
           "snapshot_message"]
