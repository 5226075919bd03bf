"""Communication table: counts, bytes, percentiles, bandwidths, share of step time, link peaks, verdicts;
nccl-tests per op at the largest message size. Expected values are computed here, from the fixture
files (parsed with the test's own regular expressions) or from the synthetic rows."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from logkit.analysis.communication import communication_peaks, communication_table
from logkit.analysis.nccl_tests import nccl_tests_table
from logkit.analysis.peaks import COMMUNICATION_PEAKS, half_peak_bytes, link_for
from logkit.analysis.thresholds import NEAR_PEAK
from logkit.ingest import load_session
from logkit.schema.collectives import busbw_factor
from tests.support.analysis_synth import comm_rows, session, step_rows
from tests.support.launch import REPO, fixture_session

H100 = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]
SAMPLES = REPO / "sample_logs"
SEED000 = SAMPLES / "seed000_text" / "logs" / "training_20241206_143022"
NCCL_TESTS = SAMPLES / "nccl_tests" / "all_reduce_all_gather_8xA100.log"


def test_table_against_numpy():
    rng = np.random.default_rng(5)
    sizes = [25_000_000] * 40
    dur = list(rng.uniform(1.0, 3.0, 40))
    times = [0.5] * 40
    s = session("c", world_size=2, gpus=H100, mode="MULTI-GPU", backend="nccl",
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
    # every step has both a sync and a step time: the share over the 40 matched steps
    assert row["sync_share_of_step_time"] == pytest.approx(sum(dur) / 1000 / sum(times))
    assert row["matched_steps"] == 40
    assert row["link"] == "NVLink 4 (H100 SXM)" and row["peak_busbw_gb_s"] == 450.0
    assert row["pct_of_peak"] == pytest.approx(np.median(alg) / 450_000 * 100)
    # 25 MB messages (> 20 us x 450 GB/s = 9 MB) yet a few % of the peak: below peak, not latency-bound
    assert not row["latency_bound"] and row["verdict"] == "below peak"
    assert "below peak at large messages" in row["note"]
    small = t.loc[(0, "broadcast")]
    assert small["count"] == 5 and bool(small["latency_bound"]) and small["verdict"] == "latency-bound"


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op,factor", [("allreduce", lambda n: 2 * (n - 1) / n),
                                       ("gradient_sync", lambda n: 2 * (n - 1) / n),
                                       ("allgather", lambda n: (n - 1) / n),
                                       ("reduce_scatter", lambda n: (n - 1) / n),
                                       ("broadcast", lambda n: 1.0)])
def test_busbw_derived_from_algbw_when_missing(n, op, factor):
    # busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter), 1
    size, dur = 64_000_000, 10.0
    algbw = size / 1e6 / (dur / 1000)  # 6400 MB/s
    rows = [{"rank": 0, "step": i + 1, "op": op, "size_bytes": size, "duration_ms": dur, "algbw_mb_s": algbw,
             "group_size": n} for i in range(3)]
    s = session("d", world_size=n, comm=rows, gpus=H100, backend="nccl", mode="MULTI-GPU")
    (row,) = communication_table(s).to_dict("records")
    assert row["busbw_mb_s"] == pytest.approx(algbw * factor(n))
    assert row["busbw_from"].startswith("derived")
    assert busbw_factor(op, n) == pytest.approx(factor(n))


def test_busbw_derived_with_the_world_size_when_group_size_is_missing():
    rows = [{"rank": 0, "step": 1, "op": "allreduce", "size_bytes": 8e6, "duration_ms": 2.0}]
    s = session("w", world_size=8, comm=rows, gpus=H100, backend="nccl")
    (row,) = communication_table(s).to_dict("records")
    algbw = 8e6 / 1e6 / 0.002  # derived from size / duration too
    assert row["algbw_mb_s"] == pytest.approx(algbw)
    assert row["busbw_mb_s"] == pytest.approx(algbw * 2 * 7 / 8)


def test_logged_busbw_is_kept():
    rows = comm_rows([8e6] * 3, [2.0] * 3, group=4)  # synth: busbw = algbw x 2(n-1)/n, logged
    rows[0]["busbw_mb_s"] = 123.0
    s = session("k", world_size=4, comm=rows, gpus=H100, backend="nccl")
    (row,) = communication_table(s).to_dict("records")
    assert row["busbw_from"] == "logged"
    assert row["busbw_mb_s"] == pytest.approx(np.median([123.0, 4000 * 1.5, 4000 * 1.5]))


def test_gloo_on_gpus_has_no_nvlink_peak():
    rows = comm_rows([1000] * 20, [0.5] * 20, group=2)
    s = session("g", world_size=2, mode="MULTI-GPU", backend="gloo", gpus=H100, comm=rows)
    (row,) = communication_table(s).to_dict("records")
    assert "gloo" in row["link"] and "NVLink" not in row["link"]
    assert np.isnan(row["peak_busbw_gb_s"]) and np.isnan(row["pct_of_peak"])
    assert row["verdict"] == "no reference" and "NVLink" in row["note"]  # says why no NVLink peak applies
    assert row["latency_bound"] is None or row["latency_bound"] is np.nan or str(row["latency_bound"]) == "<NA>"


def test_bandwidth_bound_near_peak():
    # 100 MB all-reduces at 400 GB/s busbw on H100 (peak 450): near peak
    n = 8
    size = 100e6
    busbw = 400_000.0  # MB/s
    algbw = busbw / (2 * (n - 1) / n)
    dur = size / 1e6 / algbw * 1000
    s = session("b", world_size=n, gpus=H100, backend="nccl", comm=comm_rows([size] * 5, [dur] * 5, group=n))
    (row,) = communication_table(s).to_dict("records")
    assert row["pct_of_peak"] == pytest.approx(400 / 450 * 100)
    assert row["pct_of_peak"] >= NEAR_PEAK * 100 and row["verdict"] == "bandwidth-bound"


def test_sync_share_only_over_steps_that_have_both():
    # syncs logged at steps 1..10, step times at steps 6..15 (differently sampled): steps 6..10 match
    comm = [{"rank": 0, "step": s, "op": "gradient_sync", "size_bytes": 1e6, "duration_ms": 10.0 * s,
             "group_size": 2} for s in range(1, 11)]
    steps = step_rows([0.1 * s for s in range(6, 16)], start_step=6)
    s = session("m", world_size=2, comm=comm, steps=steps, gpus=H100, backend="nccl")
    (row,) = communication_table(s).to_dict("records")
    matched = range(6, 11)
    expected = sum(10.0 * k for k in matched) / 1000 / sum(0.1 * k for k in matched)
    assert row["matched_steps"] == 5
    assert row["sync_share_of_step_time"] == pytest.approx(expected)
    # the old definition (all syncs over all step times) would have said this instead:
    assert expected != pytest.approx(sum(10.0 * k for k in range(1, 11)) / 1000 / sum(0.1 * k for k in range(6, 16)))


def test_sync_share_of_a_rank_without_steps_uses_the_lowest_ranks_step_times():
    comm = comm_rows([1e6] * 4, [20.0] * 4, rank=1)
    s = session("r", world_size=2, comm=comm, steps=step_rows([0.2] * 4, rank=0), gpus=H100, backend="nccl")
    (row,) = communication_table(s).to_dict("records")
    assert row["rank"] == 1 and row["matched_steps"] == 4
    assert row["sync_share_of_step_time"] == pytest.approx(0.08 / 0.8)


def _seed000_comm_lines():
    """(size_mb, duration_ms or None, bandwidth_mb_s) of each Communication line of seed 000's multigpu.log."""
    text = (SEED000 / "training_20241206_143022_multigpu.log").read_text(encoding="utf-8")
    out = []
    for line in text.splitlines():
        m = re.search(r"Communication \| gradient_sync .*Size: ([\d.]+)MB(?: \| Duration: ([\d.]+)ms)? \| "
                      r"Bandwidth: ([\d.]+)MB/s", line)
        if m:
            out.append((float(m[1]), float(m[2]) if m[2] else None, float(m[3])))
    return out


def test_seed000_busbw_derived_and_verdict_from_size_and_bandwidth():
    s = load_session(SEED000)
    (row,) = communication_table(s).to_dict("records")
    lines = _seed000_comm_lines()
    summary = json.loads((SEED000 / "training_20241206_143022_summary.json").read_text(encoding="utf-8"))
    n = summary["world_size"]
    algbw = np.median([bw for _, _, bw in lines])
    assert row["count"] == len(lines)
    assert row["busbw_mb_s"] == pytest.approx(algbw * 2 * (n - 1) / n)  # derived: not logged in the text line
    assert row["busbw_from"].startswith("derived")
    # RTX 4090: PCIe 4.0 x16, 32 GB/s per direction, no NVLink
    assert row["link"] == "PCIe 4.0 x16"
    assert row["pct_of_peak"] == pytest.approx(algbw / 32_000 * 100)
    assert row["verdict"] == "below peak"  # 45 MB messages at ~12% of peak: not "bandwidth-bound"
    # the log samples the syncs; summary.json has the run's totals, shown beside
    op = summary["communication"]["gradient_sync"]
    assert row["sampled"] and row["summary_count"] == op["count"]
    assert row["summary_total_bytes"] == pytest.approx(op["total_mb"] * 1e6)
    assert row["total_bytes"] == pytest.approx(sum(mb for mb, _, _ in lines) * 1e6)
    # no step line shares a step with a sync line: no share at all rather than a wrong one
    assert row["matched_steps"] == 0 and np.isnan(row["sync_share_of_step_time"])


def test_real_fixture_comm_bytes():
    s = load_session(fixture_session(2))
    t = communication_table(s)
    for r, g in s.comm.groupby("rank"):
        row = t[(t["rank"] == r) & (t["op"] == "gradient_sync")].iloc[0]
        assert row["count"] == len(g)
        assert row["total_bytes"] == g["size_bytes"].sum()
        assert row["p50_ms"] == pytest.approx(g["duration_ms"].median())
        rank_steps = s.steps[s.steps["rank"] == r].set_index("step")["step_time_s"]
        per_step = g.groupby("step")["duration_ms"].sum()
        both = per_step.index.intersection(rank_steps.dropna().index)
        assert row["sync_share_of_step_time"] == pytest.approx(per_step[both].sum() / 1000 / rank_steps[both].sum())
        assert row["link"] == "loopback/gloo (CPU)" and np.isnan(row["peak_busbw_gb_s"])


def _nccl_tables():
    """{(op, placement): [(size, time_us, algbw, busbw, line)]} and {op: avg busbw}, read from the file here."""
    rows: dict = {}
    avg = {}
    op = None
    for number, line in enumerate(NCCL_TESTS.read_text(encoding="utf-8").splitlines(), 1):
        m = re.search(r"\./build/(\w+)_perf", line)
        if m:
            op = m[1].replace("_", "")
            continue
        m = re.match(r"#\s+Avg bus bandwidth\s*:\s*([\d.]+)", line)
        if m:
            avg[op] = float(m[1])
            continue
        parts = line.split()
        if len(parts) == 13 and parts[0].isdigit():
            size = int(parts[0])
            rows.setdefault((op, "out-of-place"), []).append((size, float(parts[5]), float(parts[6]),
                                                              float(parts[7]), number))
            rows.setdefault((op, "in-place"), []).append((size, float(parts[9]), float(parts[10]),
                                                          float(parts[11]), number))
    return rows, avg


def test_nccl_tests_fixture_at_the_largest_size():
    s = load_session(NCCL_TESTS)
    t = nccl_tests_table(s)
    tables, avg = _nccl_tables()
    assert len(t) == len(tables) == 4
    header = NCCL_TESTS.read_text(encoding="utf-8")
    model = re.search(r"device\s+\d+ \[0x[0-9a-f]+\] (.+)", header)[1].strip()
    link = link_for(model)
    assert link["link"].startswith("NVLink 3")  # NVIDIA A100-SXM4-80GB
    for r in t.to_dict("records"):
        rows = tables[(r["op"], r["placement"])]
        size, us, alg, bus, line = max(rows)
        assert (r["max_bytes"], r["busbw_at_max_size_gb_s"], r["algbw_at_max_size_gb_s"]) == (size, bus, alg)
        assert r["time_at_max_size_us"] == pytest.approx(us)
        top = max(b for *_, b, _ in rows)
        assert r["size_at_80pct_bytes"] == min(sz for sz, _, _, b, _ in rows if b >= 0.8 * top)
        assert r["avg_busbw_gb_s"] == avg[r["op"]]
        assert r["group_size"] == 8 and r["sizes"] == len(rows)
        assert r["source"] == f"{NCCL_TESTS.name}:{line}"
        assert r["link"] == link["link"]
        assert r["pct_of_peak"] == pytest.approx(bus / link["peak_busbw_gb_s"] * 100)
    # a median over a size sweep from 8 B to 128 MB means nothing: no per-rank median rows for nccl-tests
    assert communication_table(s).empty


def test_nccl_tests_verdict_uses_the_peak():
    rows = [{"op": "allreduce", "size_bytes": sz, "duration_ms": 1.0, "algbw_mb_s": bw / 1.75, "busbw_mb_s": bw,
             "group_size": 8, "placement": "out-of-place", "source": f"x.log:{i}"}
            for i, (sz, bw) in enumerate([(1e3, 100.0), (1e6, 100_000.0), (1e8, 250_000.0), (4e8, 260_000.0)])]
    s = session("t", comm=rows, formats=["nccl_tests"], gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB"}],
                nccl_tests=[{"op": "allreduce", "table": None, "avg_busbw_gb_s": 90.0}])
    (r,) = nccl_tests_table(s).to_dict("records")
    assert r["busbw_at_max_size_gb_s"] == 260.0 and r["size_at_80pct_bytes"] == 1e8
    assert r["pct_of_peak"] == pytest.approx(260 / 300 * 100) and r["verdict"] == "bandwidth-bound"
    assert r["avg_busbw_gb_s"] == 90.0 and r["source"] == "x.log:3"


def test_peak_table_has_sources():
    frame = communication_peaks()
    assert frame["source"].str.len().min() > 20
    assert link_for("NVIDIA A100-SXM4-80GB")["link"].startswith("NVLink 3")
    assert link_for("NVIDIA A100 80GB PCIe")["link"] == "PCIe 4.0 x16"
    assert link_for("NVIDIA H100 PCIe")["link"] == "PCIe 5.0 x16"
    assert link_for("Tesla T4")["link"] == "PCIe 3.0 x16"
    assert link_for("NVIDIA H100 80GB HBM3", backend="gloo")["peak_busbw_gb_s"] is None
    assert link_for("mystery") is None
    assert half_peak_bytes(COMMUNICATION_PEAKS[0]) == pytest.approx(20e-6 * 900e9)


def test_empty_comm():
    assert communication_table(session("e")).empty
