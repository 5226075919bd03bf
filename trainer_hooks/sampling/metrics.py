"""The catalogue of sampled host metrics: each one's key in the output dicts, name and unit.

In the style of nvitop's ``ResourceMetricCollector``: the metrics are declared as a table
(attribute, name, unit) that the probes fill and the interval statistics walk. The per-GPU
metrics are the contract's (``logkit.schema.gpu.DEVICE_METRICS``: the record spec is made of them).
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9  # SI, as the records' units: GiB only where a name says GiB
MB = 1e6


@dataclass(frozen=True)
class Metric:
    """One sampled quantity: its key in the output dicts, a human name and its unit."""

    attr: str
    name: str
    unit: str
    aggregate: bool = True  # False: a constant (a total), reported as its last value


# Host metrics, keyed by group of ``resource_usage`` (cpu{}, memory{}, ...).
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
