"""Communication table: counts, bytes, percentiles, bandwidths, share of step time, link peaks."""

from __future__ import annotations

import numpy as np
import pytest

from logkit.analysis.communication import communication_peaks, communication_table
from logkit.analysis.peaks import COMMUNICATION_PEAKS, half_peak_bytes, link_for
from logkit.ingest import load_session
from tests.analysis_synth import comm_rows, session, step_rows

H100 = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]


def test_table_against_numpy():
    rng = np.random.default_rng(5)
    sizes = [25_000_000] * 40
    dur = list(rng.uniform(1.0, 3.0, 40))
    times = [0.5] * 40
    s = session("c", world_size=2, gpus=H100, mode="MULTI-GPU",
                steps=step_rows(times, rank=0) + step_rows(times, rank=1),
                comm=comm_rows(sizes, dur, rank=0) + comm_rows([1000] * 5, [0.05] * 5, rank=0, op="broadcast")
                + comm_rows(sizes, dur, rank=1))
    t = communication_table(s).set_index(["rank", "op"])
    row = t.loc[(0, "gradient_sync")]
    assert row["count"] == 40 and row["total_bytes"] == 40 * 25e6 and row["mean_bytes"] == 25e6
    assert row["p50_ms"] == pytest.approx(np.median(dur)) and row["p95_ms"] == pytest.approx(np.quantile(dur, 0.95))
    alg = [25e6 / 1e6 / (d / 1000) for d in dur]
    assert row["algbw_mb_s"] == pytest.approx(np.median(alg))
    assert row["busbw_mb_s"] == pytest.approx(np.median(alg) * 1.0)  # 2(n-1)/n = 1 for n = 2
    assert row["sync_share_of_step_time"] == pytest.approx(sum(dur) / 1000 / sum(times))
    assert row["link"] == "NVLink 4 (H100 SXM)" and row["peak_busbw_gb_s"] == 450.0
    assert row["pct_of_peak"] == pytest.approx(np.median(alg) / 450_000 * 100)
    assert not row["latency_bound"]  # 25 MB > 20 us x 450 GB/s = 9 MB
    small = t.loc[(0, "broadcast")]
    assert small["count"] == 5 and bool(small["latency_bound"]) and "latency-bound" in small["note"]


def test_real_fixture_comm_bytes():
    s = load_session("sample_logs/qlora_tiny_cpu/logs/training_20261122_020158")
    t = communication_table(s)
    for r, g in s.comm.groupby("rank"):
        row = t[(t["rank"] == r) & (t["op"] == "gradient_sync")].iloc[0]
        assert row["count"] == len(g) == 30
        assert row["total_bytes"] == g["size_bytes"].sum() == 30 * 69632
        assert row["p50_ms"] == pytest.approx(g["duration_ms"].median())
        rank_steps = s.steps[s.steps["rank"] == r]["step_time_s"].sum()
        assert row["sync_share_of_step_time"] == pytest.approx(g["duration_ms"].sum() / 1000 / rank_steps)
        assert row["link"] == "loopback/gloo (CPU)" and np.isnan(row["peak_busbw_gb_s"])


def test_nccl_tests_fixture_rows():
    s = load_session("sample_logs/nccl_tests/all_reduce_all_gather_8xA100.log")
    t = communication_table(s).set_index("op")
    assert t.loc["allreduce", "count"] == (s.comm["op"] == "allreduce").sum()
    assert t.loc["allreduce", "total_bytes"] == s.comm.loc[s.comm["op"] == "allreduce", "size_bytes"].sum()


def test_peak_table_has_sources():
    frame = communication_peaks()
    assert frame["source"].str.len().min() > 20
    assert link_for("NVIDIA A100-SXM4-80GB")["link"].startswith("NVLink 3")
    assert link_for("NVIDIA A100 80GB PCIe")["link"] == "PCIe 4.0 x16"
    assert link_for("NVIDIA H100 PCIe")["link"] == "PCIe 5.0 x16"
    assert link_for("Tesla T4")["link"] == "PCIe 3.0 x16"
    assert link_for("mystery") is None
    assert half_peak_bytes(COMMUNICATION_PEAKS[0]) == pytest.approx(20e-6 * 900e9)


def test_empty_comm():
    assert communication_table(session("e")).empty
