"""ResourceSampler: real psutil sampling, a fake NVML for the GPU path, and the ways GPU metrics go off."""

from __future__ import annotations

import builtins
import sys
import time
import types
from statistics import mean

import pytest

from logkit.schema.gpu import DEVICE_METRICS
from trainer_hooks.sampling import IntervalStats, ResourceSampler, snapshot_message
from trainer_hooks.sampling import nvml as nvml_mod


@pytest.fixture(autouse=True)
def fresh_nvml(monkeypatch):
    """Every test decides which pynvml it sees: forget the process-wide NVML state."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_mod.reset_nvml()
    yield
    nvml_mod.reset_nvml()


# -- a fake pynvml: two GPUs with known, changing values ---------------------------------------
class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    pass


class NVMLError_Unknown(NVMLError):  # noqa: N801
    pass


def fake_pynvml(init_error: Exception | None = None, count: int = 2, unsupported: dict | None = None):
    """A module with pynvml's names. GPU i at call k reports utilization 10*(i+1) + k, etc.
    ``unsupported``: {device index: {function names that raise NotSupported}}."""
    unsupported = unsupported or {}
    calls = {"init": 0, "util": 0}
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    m.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    m.NVML_TEMPERATURE_GPU, m.NVML_CLOCK_SM = 0, 1
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    m.NVML_FI_DEV_NVLINK_LINK_COUNT = 91
    m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    m.calls = calls

    def init():
        calls["init"] += 1
        if init_error is not None:
            raise init_error

    def guard(name, h):
        if name in unsupported.get(h, ()):
            raise NVMLError_NotSupported("Not Supported")

    def util(h):
        guard("util", h)
        calls["util"] += 1
        k = calls["util"]
        return types.SimpleNamespace(gpu=10 * (h + 1) + k, memory=5)

    def memory(h):
        guard("memory", h)
        return types.SimpleNamespace(used=4_000_000_000 * (h + 1), total=80_000_000_000, free=0)

    def temperature(h, sensor):
        guard("temperature", h)
        return 60 + h

    def power(h):
        guard("power", h)
        return 250_000 + 1000 * h  # milliwatts

    def clock(h, kind):
        guard("clock", h)
        return 1980

    def pcie(h, counter):
        guard("pcie", h)
        return 2_000_000 if counter == m.NVML_PCIE_UTIL_RX_BYTES else 1_000_000  # KiB/s

    nvlink_kib = {0: 0}

    def field_values(h, ids):
        guard("nvlink", h)
        out = []
        for fid in ids:
            fid, link = fid if isinstance(fid, tuple) else (fid, 0)
            value = 4 if fid == 91 else nvlink_kib[0]
            out.append(types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(ullVal=value)))
        nvlink_kib[0] += 1_000_000  # every read: +1e6 KiB per link and direction
        return out

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-fake-{h}"
    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetMemoryInfo = memory
    m.nvmlDeviceGetTemperature = temperature
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetClockInfo = clock
    m.nvmlDeviceGetPcieThroughput = pcie
    m.nvmlDeviceGetFieldValues = field_values
    return m


# -- host sampling, for real ----------------------------------------------------------------------
def test_host_sampling_values_in_range():
    s = ResourceSampler(interval_s=None, gpu=False)
    first = s.sample_once()
    assert first["cpu"]["usage_percent"] is None or 0 <= first["cpu"]["usage_percent"] <= 100  # None: no tick yet
    spent = time.process_time()
    while time.process_time() - spent < 0.05:  # CPU time for this process to show, whatever the load
        sum(i * i for i in range(10_000))
    sample = s.sample_once()
    cpu, mem = sample["cpu"], sample["memory"]
    assert 0.0 <= cpu["usage_percent"] <= 100.0
    assert cpu["count"] >= 1 and cpu["process_percent"] > 0
    assert 0.0 < mem["usage_percent"] < 100.0
    assert 0.0 < mem["used_gb"] < mem["total_gb"]
    assert 0.0 < mem["available_gb"] <= mem["total_gb"]
    assert 0.0 < mem["process_rss_gb"] < mem["total_gb"]  # this very process is resident
    assert sample["gpu"] == {"devices": []}
    assert s.latest() is sample


def test_interval_aggregates_match_the_recorded_samples():
    s = ResourceSampler(interval_s=None, sample_every_s=0.02, gpu=False).start()
    deadline = time.monotonic() + 3
    while s.samples_taken < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    with s._lock:  # freeze: no sample lands between reading the raw ones and the aggregate
        raw = list(s._history)
        snap = s._stats.snapshot()
    s.stop(final=False)
    assert snap["samples"] == len(raw) >= 6
    for group, key in (("cpu", "usage_percent"), ("memory", "used_gb"), ("memory", "usage_percent")):
        values = [r[group][key] for r in raw if r[group][key] is not None]
        got = snap["resource_usage"][group]
        assert got[key] == pytest.approx(mean(values), abs=1e-3)
        assert got[key + "_min"] == pytest.approx(min(values), abs=1e-3)
        assert got[key + "_max"] == pytest.approx(max(values), abs=1e-3)
    assert snap["resource_usage"]["memory"]["total_gb"] == raw[-1]["memory"]["total_gb"]  # constant: as is


def test_background_thread_closes_intervals_and_delivers_them():
    got: list[dict] = []
    s = ResourceSampler(interval_s=0.1, sample_every_s=0.02, on_interval=got.append, gpu=False).start()
    time.sleep(0.45)
    final = s.stop()
    assert not s.running
    assert 3 <= len(got) <= 7
    assert final is got[-1]
    assert sum(g["samples"] for g in got) == s.samples_taken
    for g in got[:-1]:
        assert g["interval_s"] == pytest.approx(0.1, abs=0.06)
        assert g["samples"] >= 2
        assert set(g) == {"devices", "interval_s", "samples", "resource_usage"}
        assert set(g["resource_usage"]) == {"cpu", "memory", "gpu"}
    assert s.stop() is None  # nothing pending: no extra interval


def test_interval_stats_on_fed_samples():
    st = IntervalStats()
    feed = [
        {"cpu": {"usage_percent": 10.0}, "memory": {"used_gb": 1.0},
         "gpu": {"devices": [{"index": 0, "name": "g", "uuid": "u", "utilization_percent": 50.0,
                              "memory_total_mb": 100.0, "power_w": None}]}},
        {"cpu": {"usage_percent": 30.0}, "memory": {"used_gb": 3.0},
         "gpu": {"devices": [{"index": 0, "name": "g", "uuid": "u", "utilization_percent": 70.0,
                              "memory_total_mb": 100.0, "power_w": float("nan")}]}},
        {"cpu": {"usage_percent": None}, "memory": {"used_gb": 2.0}, "gpu": {"devices": []}},
    ]
    for i, sample in enumerate(feed):
        st.add(sample, t=float(i))
    snap = st.snapshot()
    assert snap["samples"] == 3 and snap["interval_s"] == 2.0
    cpu = snap["resource_usage"]["cpu"]
    assert (cpu["usage_percent"], cpu["usage_percent_min"], cpu["usage_percent_max"]) == (20.0, 10.0, 30.0)
    assert snap["resource_usage"]["memory"]["used_gb"] == 2.0
    (dev,) = snap["devices"]
    assert (dev["utilization_percent"], dev["utilization_percent_min"], dev["utilization_percent_max"]) == (60.0, 50.0, 70.0)
    assert dev["power_w"] is None and dev["power_w_min"] is None  # never a value: None, not NaN
    assert dev["memory_total_mb"] == 100.0 and "memory_total_mb_min" not in dev
    assert snap["resource_usage"]["gpu"]["devices"] == snap["devices"]


# -- the GPU path through a fake NVML --------------------------------------------------------------
def test_gpu_path_with_fake_nvml(monkeypatch):
    nv = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = ResourceSampler(interval_s=None)
    first = s.sample_once()
    second = s.sample_once()
    assert s.gpu_available and s.status == "gpu+host" and s.notes == []
    d0, d1 = second["gpu"]["devices"]
    assert (d0["index"], d0["name"], d0["uuid"]) == (0, "NVIDIA H100 80GB HBM3", "GPU-fake-0")
    assert d0["memory_used_mb"] == 4000.0 and d0["memory_total_mb"] == 80000.0  # MB = 10^6 bytes
    assert d1["memory_usage_percent"] == 10.0
    assert d0["temperature_c"] == 60.0 and d1["power_w"] == 251.0 and d0["sm_clock_mhz"] == 1980.0
    assert d0["pcie_rx_mb_s"] == pytest.approx(2_000_000 * 1024 / 1e6)  # KiB/s -> MB/s
    assert d0["pcie_tx_mb_s"] == pytest.approx(1_000_000 * 1024 / 1e6)
    # NVLink: a rate needs two readings of NVML's cumulative counters
    assert first["gpu"]["devices"][0]["nvlink_rx_mb_s"] is None
    assert d0["nvlink_rx_mb_s"] > 0 and d0["nvlink_tx_mb_s"] > 0
    assert set(d0) == {"index", "nvml_index", "name", "uuid", *(m.key for m in DEVICE_METRICS)}
    snap = s.take_interval()
    a0 = snap["devices"][0]
    raw_util = [first["gpu"]["devices"][0]["utilization_percent"], d0["utilization_percent"]]
    assert a0["utilization_percent"] == pytest.approx(mean(raw_util))
    assert (a0["utilization_percent_min"], a0["utilization_percent_max"]) == (min(raw_util), max(raw_util))
    assert snap["samples"] == 2 and len(snap["resource_usage"]["gpu"]["devices"]) == 2
    assert snapshot_message(snap).startswith("GPU snapshot | GPU 0:")
    assert nv.calls["init"] == 1


def test_not_supported_metric_is_off_for_that_device_only(monkeypatch):
    nv = fake_pynvml(unsupported={1: {"power", "pcie", "nvlink", "temperature"}})
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = ResourceSampler(interval_s=None)
    for _ in range(3):
        s.sample_once()
    d0, d1 = s.latest()["gpu"]["devices"]
    assert d1["power_w"] is None and d1["pcie_rx_mb_s"] is None and d1["temperature_c"] is None
    assert d1["nvlink_rx_mb_s"] is None and d1["utilization_percent"] is not None
    assert d0["power_w"] == 250.0 and d0["pcie_rx_mb_s"] is not None
    assert s.notes == []  # NotSupported is normal, not a fault
    snap = s.take_interval()
    assert snap["devices"][1]["power_w"] is None and snap["devices"][0]["power_w_max"] == 250.0


def test_other_nvml_errors_give_none_and_one_note(monkeypatch):
    nv = fake_pynvml(count=1)

    def broken(h):
        raise NVMLError_Unknown("Unknown Error")

    nv.nvmlDeviceGetPowerUsage = broken
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = ResourceSampler(interval_s=None)
    s.sample_once()
    s.sample_once()
    assert s.latest()["gpu"]["devices"][0]["power_w"] is None
    assert len([n for n in s.notes if "power" in n]) == 1


def test_sampler_thread_survives_a_raising_nvml_and_callback(monkeypatch):
    nv = fake_pynvml(count=1)
    nv.nvmlDeviceGetUtilizationRates = lambda h: 1 / 0
    monkeypatch.setitem(sys.modules, "pynvml", nv)

    def bad_callback(snap):
        raise RuntimeError("consumer bug")

    s = ResourceSampler(interval_s=0.05, sample_every_s=0.01, on_interval=bad_callback).start()
    time.sleep(0.2)
    assert s.running
    s.stop()
    assert s.samples_taken >= 3
    assert any("on_interval callback failed" in n for n in s.notes)


# -- GPU metrics off: said once, host still sampled -------------------------------------------
def test_pynvml_missing_host_still_sampled_one_note(monkeypatch):
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    got: list[dict] = []
    s = ResourceSampler(interval_s=0.05, sample_every_s=0.01, on_interval=got.append).start()
    # known when start() returns: the emitter turns it into one record right then
    assert s.notes == ["pynvml not installed (pip install nvidia-ml-py): GPU metrics off"]
    assert s.wait_ready(5)
    time.sleep(0.15)
    s.stop()
    assert s.gpu_available is False and s.status == "host only"
    assert s.notes == ["pynvml not installed (pip install nvidia-ml-py): GPU metrics off"]
    assert s.take_notes() == s.notes and s.take_notes() == []  # given out once
    assert got and all(g["devices"] == [] for g in got)
    assert got[0]["resource_usage"]["cpu"]["usage_percent"] is not None
    assert got[0]["resource_usage"]["memory"]["used_gb"] > 0


@pytest.mark.parametrize("error, words", [
    (NVMLError_LibraryNotFound("NVML Shared Library Not Found"), "no NVIDIA driver"),
    (NVMLError("Driver/library version mismatch"), "NVML init failed"),
])
def test_nvml_init_failure_one_note(monkeypatch, error, words):
    nv = fake_pynvml(init_error=error)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s1 = ResourceSampler(interval_s=None)
    s2 = ResourceSampler(interval_s=None)
    for _ in range(3):
        s1.sample_once()
        s2.sample_once()
    assert nv.calls["init"] == 1  # nvmlInit once per process, not per sampler or sample
    assert len(s1.notes) == 1 and words in s1.notes[0] and s1.notes[0].endswith("GPU metrics off")
    assert s1.latest()["memory"]["used_gb"] > 0 and s1.latest()["gpu"]["devices"] == []


def test_no_gpu_found_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    s = ResourceSampler(interval_s=None)
    s.sample_once()
    assert s.notes == ["no NVIDIA GPU found: GPU metrics off"] and not s.gpu_available


def test_cuda_visible_devices_maps_ordinals_to_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-fake-3")
    s = ResourceSampler(interval_s=None, gpu_indices=[1], pcie=False, nvlink=False)
    (dev,) = s.sample_once()["gpu"]["devices"]
    assert (dev["index"], dev["nvml_index"], dev["uuid"]) == (1, 3, "GPU-fake-3")  # torch's cuda:1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nvml_mod.reset_nvml()
    s = ResourceSampler(interval_s=None)
    s.sample_once()
    assert s.notes == ["no NVIDIA GPU visible (CUDA_VISIBLE_DEVICES): GPU metrics off"]


def test_resource_usage_for_step_records(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=1))
    s = ResourceSampler(interval_s=None, sample_every_s=0.01)
    assert s.resource_usage() == {}
    s.start()
    assert s.wait_ready(5)
    usage = s.resource_usage()
    s.stop(final=False)
    assert set(usage) == {"cpu", "memory", "gpu"}
    assert usage["gpu"]["devices"][0]["memory_usage_percent"] == 5.0
    assert len(s.recent(3)) == min(3, s.samples_taken)


# -- through the emitter: the interval aggregates reach the stream without a GPU too ----------------
def test_without_a_gpu_each_interval_still_gives_its_host_mean_min_max(tmp_path, monkeypatch):
    from logkit.schema import SessionFiles
    from tests.support.launch import read_jsonl
    from trainer_hooks.session_logger import SessionLogger

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    log = SessionLogger(tmp_path, "high", gpu_snapshot_interval=0.25)
    log.start(per_device_batch_size=2, max_steps=30)
    for step in range(1, 31):
        log.step_begin()
        sum(i * i for i in range(20_000))  # some CPU for the samples to see
        time.sleep(0.03)
        log.step_end(step, loss=1.0)
    sampler = log._sampler
    log.end()
    raw = sampler.recent()
    records = read_jsonl(tmp_path / log.session_id / SessionFiles(log.session_id).rank_jsonl(0))
    snaps = [r for r in records if r["type"] == "gpu_snapshot"]
    assert len(snaps) >= 3 and sum(s["samples"] for s in snaps) == len(raw) == sampler.samples_taken
    assert snaps[0]["message"].startswith("Resource snapshot (no GPU metrics): CPU ")
    # the intervals cut the raw samples in order: each record is its chunk's mean/min/max
    start = 0
    for snap in snaps:
        assert snap["devices"] == [] and snap["hostname"]
        chunk = raw[start:start + snap["samples"]]
        start += snap["samples"]
        usage = snap["resource_usage"]
        for group, key in (("cpu", "usage_percent"), ("memory", "usage_percent"), ("memory", "process_rss_gb")):
            values = [s[group][key] for s in chunk if s[group][key] is not None]
            got = usage[group]
            if not values:
                assert got[key] is None
                continue
            assert got[key] == pytest.approx(mean(values), abs=1e-3)
            assert (got[key + "_min"], got[key + "_max"]) == (pytest.approx(min(values), abs=1e-3),
                                                              pytest.approx(max(values), abs=1e-3))
    assert any(s["resource_usage"]["cpu"]["usage_percent_max"] > 0 for s in snaps)
    notes = [r["message"] for r in records if r.get("kind") == "sampling_degraded"]
    assert notes == ["no NVIDIA GPU found: GPU metrics off"]


def test_the_probe_reads_what_the_table_names():
    """Every metric of the contract's table is a reading of the probe, and nothing else is."""
    assert set(nvml_mod.Reading._fields) == {m.attr for m in DEVICE_METRICS}
