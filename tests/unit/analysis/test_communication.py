"""Communication table: counts, bytes, percentiles, bandwidths, share of step time, link peaks, verdicts;
nccl-tests per op at the largest message size. Expected values are computed here, from the fixture
files (parsed with the test's own regular expressions) or from the synthetic rows."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from logkit.analysis.kernels.communication import communication_peaks, communication_table
from logkit.analysis.kernels.nccl_sweep import nccl_tests_table
from logkit.analysis.kernels.peaks import COMMUNICATION_PEAKS, half_peak_bytes, link_for
from logkit.analysis.thresholds import NEAR_PEAK
from logkit.run.load import load_session
from logkit.schema.collectives import busbw_factor
from tests.support.analysis_synth import comm_rows, session, step_rows
from tests.support.launch import REPO, fixture_session

H100 = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]
SAMPLES = REPO / "sample_logs"
SEED000 = SAMPLES / "text_logs" / "logs" / "training_20241206_143022"
NCCL_TESTS = SAMPLES / "nccl_tests" / "all_reduce_all_gather_8xA100.log"
# H100 SXM: NVLink 4's 450 GB/s per direction less NCCL's protocol overhead: "NCCL can get an effective NVLink
# bandwidth of 370GB/s" (NCCL's maintainer, NVIDIA/nccl-tests#212)
H100_PEAK = 370.0


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
    assert row["link"] == "NVLink 4 (H100 SXM)" and row["peak_busbw_gb_s"] == H100_PEAK
    assert row["pct_of_peak"] == pytest.approx(np.median(alg) / (H100_PEAK * 1000) * 100)
    # 25 MB messages (> 20 us x 370 GB/s = 7.4 MB) yet a few % of the peak: below peak, not latency-bound
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
    # 100 MB all-reduces at 400 GB/s busbw on H100 (above the 370 GB/s NCCL reaches without NVLS): near peak
    n = 8
    size = 100e6
    busbw = 400_000.0  # MB/s
    algbw = busbw / (2 * (n - 1) / n)
    dur = size / 1e6 / algbw * 1000
    s = session("b", world_size=n, gpus=H100, backend="nccl", comm=comm_rows([size] * 5, [dur] * 5, group=n))
    (row,) = communication_table(s).to_dict("records")
    assert row["pct_of_peak"] == pytest.approx(400 / H100_PEAK * 100)
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


def _text_logs_comm_lines():
    """(size_mb, duration_ms or None, bandwidth_mb_s) of each Communication line of seed 000's multigpu.log."""
    text = (SEED000 / "training_20241206_143022_multigpu.log").read_text(encoding="utf-8")
    out = []
    for line in text.splitlines():
        m = re.search(r"Communication \| gradient_sync .*Size: ([\d.]+)MB(?: \| Duration: ([\d.]+)ms)? \| "
                      r"Bandwidth: ([\d.]+)MB/s", line)
        if m:
            out.append((float(m[1]), float(m[2]) if m[2] else None, float(m[3])))
    return out


def test_text_logs_busbw_derived_and_verdict_from_size_and_bandwidth():
    s = load_session(SEED000)
    (row,) = communication_table(s).to_dict("records")
    lines = _text_logs_comm_lines()
    summary = json.loads((SEED000 / "training_20241206_143022_summary.json").read_text(encoding="utf-8"))
    n = summary["world_size"]
    algbw = np.median([bw for _, _, bw in lines])
    assert row["count"] == len(lines)
    assert row["busbw_mb_s"] == pytest.approx(algbw * 2 * (n - 1) / n)  # derived: not logged in the text line
    assert row["busbw_from"].startswith("derived")
    # RTX 4090: PCIe 4.0 x16, 16 lanes x 1.969 GB/s per direction (PCI-SIG), x 370/450 what NCCL achieves
    assert row["link"] == "PCIe 4.0 x16"
    assert row["pct_of_peak"] == pytest.approx(algbw / (round(16 * 1.969 * 370 / 450, 1) * 1000) * 100)
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
    # A100 SXM: NVLink 3's 300 GB/s line rate x 370/450 (NCCL's protocol overhead, nccl-tests#212)
    assert r["pct_of_peak"] == pytest.approx(260 / (300 * 370 / 450) * 100, rel=1e-3) and r["verdict"] == "bandwidth-bound"
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
    assert half_peak_bytes(COMMUNICATION_PEAKS[0]) == pytest.approx(20e-6 * 740e9)  # B200: 900 x 370/450
    for row in frame.to_dict("records"):  # alpha x peak, where the table gives both
        if row["alpha_us"] is not None and row["peak_busbw_gb_s"] is not None and row["alpha_us"] == row["alpha_us"]:
            assert row["half_peak_bytes"] == pytest.approx(row["alpha_us"] * 1e-6 * row["peak_busbw_gb_s"] * 1e9)
    assert frame["half_peak_bytes"].notna().sum() == sum(
        1 for r in COMMUNICATION_PEAKS if r.get("alpha_us") is not None and r.get("peak_busbw_gb_s") is not None)


def test_empty_comm():
    from logkit.analysis.kernels.communication import COMM_COLUMNS

    t = communication_table(session("e"))
    assert t.empty and list(t.columns) == COMM_COLUMNS


def _rec(rank, op, step, size, dur, *, alg=None, bus=None, group=None, source=None, timing="cuda_event"):
    return {"rank": rank, "op": op, "step": step, "size_bytes": size, "duration_ms": dur, "algbw_mb_s": alg,
            "busbw_mb_s": bus, "group_size": group, "source": source, "timing_source": timing}


def test_every_row_and_column_of_a_mixed_table_by_hand():
    """Four ranks by the meta, records of several ops with and without rank, op, algbw, busbw, group
    size, step and source; summary.json totals for rank 0's op. Every expected value written out."""
    f0, f1 = "x_rank0.jsonl", "x_rank1.jsonl"
    comm = [
        # rank 0 gradient_sync, no group size (the world size, 4: factor 2(n-1)/n = 1.5), busbw never logged
        _rec(0, "gradient_sync", 1, 4_000_000, 2.0, source=f"{f0}:5"),  # algbw 2000 (derived)
        _rec(0, "gradient_sync", 2, 6_000_000, 3.0, alg=2500.0, source=f"{f0}:9"),  # algbw as logged
        _rec(0, "gradient_sync", 3, 8_000_000, 5.0, source=f"{f0}:13"),  # 1600
        _rec(0, "gradient_sync", 5, 2_000_000, 1.0, source=f"{f0}:20"),  # 2000; step 5 has no step time
        _rec(0, None, 1, 100, 1.0),  # an op not named: "unknown", no bus factor
        # rank 1 gradient_sync in a group of 2 (factor 1): busbw logged once, derived once
        _rec(1, "gradient_sync", 1, 20_000_000, 4.0, bus=7000.0, group=2, timing="wall"),  # algbw 5000
        _rec(1, "gradient_sync", 2, 20_000_000, 4.0, group=2, timing="wall"),  # busbw 5000 derived
        _rec(1, "broadcast", None, 1000, 0.5, source=f"{f1}:3"),  # algbw 2, factor 1
        _rec(None, "my_op", 1, 3_000_000, 1.5),  # no rank; an op outside the table: no busbw
    ]
    steps = step_rows([0.1, 0.2, 0.4, 0.3], rank=0)  # rank 1 logged no steps: rank 0's times count
    s = session("x", world_size=4, gpus=H100, backend="nccl", mode="MULTI-GPU", comm=comm, steps=steps,
                summary={"communication": {"gradient_sync": {"count": 10, "total_mb": 50.0}}})
    t = communication_table(s)
    assert list(t.columns) == [
        "session_id", "rank", "op", "count", "total_bytes", "mean_bytes", "p50_ms", "p95_ms", "algbw_mb_s",
        "busbw_mb_s", "busbw_from", "total_ms", "sync_share_of_step_time", "matched_steps", "group_size",
        "timing_source", "link", "peak_busbw_gb_s", "pct_of_peak", "half_peak_bytes", "latency_bound", "verdict",
        "note", "sampled", "summary_count", "summary_total_bytes", "summary_mean_bytes", "sources", "phase",
        "role", "scope", "transport", "peak_source"]
    # no record names a host: neither scope nor transport is known; the peak is the GPU model's row's
    assert set(t["scope"]) == {None} and set(t["transport"]) == {None}
    assert t["peak_source"].str.startswith("NVIDIA datasheet H100 SXM").all()
    assert str(t["rank"].dtype) == "Int64" and str(t["matched_steps"].dtype) == "int64"
    assert set(t["session_id"]) == {"x"}
    # rows by rank (no rank first), then op in name order, an unnamed op last
    assert [(None if pd.isna(r) else int(r), op) for r, op in zip(t["rank"], t["op"], strict=True)] == [
        (None, "my_op"), (0, "gradient_sync"), (0, "unknown"), (1, "broadcast"), (1, "gradient_sync")]
    peak, half = H100_PEAK, 20e-6 * 370e9  # the H100 row: 370 GB/s, alpha 20 us: half the peak at 7.4 MB
    assert set(t["link"]) == {"NVLink 4 (H100 SXM)"} and set(t["peak_busbw_gb_s"]) == {peak}
    assert t["half_peak_bytes"].to_numpy() == pytest.approx([half] * len(t))
    # each row its own records' timing sources (rank 1's gradient_sync records say wall, the rest cuda_event)
    assert dict(zip(zip(t["rank"].fillna(-1).astype(int), t["op"], strict=True), t["timing_source"], strict=True)) == {
        (-1, "my_op"): "cuda_event", (0, "gradient_sync"): "cuda_event", (0, "unknown"): "cuda_event",
        (1, "broadcast"): "cuda_event", (1, "gradient_sync"): "wall"}
    rows = {(None if pd.isna(r) else int(r), op): row for (r, op), row in
            zip(zip(t["rank"], t["op"], strict=True), t.to_dict("records"), strict=True)}

    g0 = rows[(0, "gradient_sync")]
    durs = [2.0, 3.0, 5.0, 1.0]
    assert (g0["count"], g0["total_bytes"], g0["mean_bytes"]) == (4, 20e6, 5e6)
    assert g0["p50_ms"] == 2.5 and g0["p95_ms"] == pytest.approx(np.quantile(durs, 0.95)) and g0["total_ms"] == 11.0
    assert g0["algbw_mb_s"] == np.median([2000.0, 2500.0, 1600.0, 2000.0])
    assert g0["busbw_mb_s"] == pytest.approx(np.median([3000.0, 3750.0, 2400.0, 3000.0]))
    assert g0["busbw_from"] == "derived: algbw x 2(n-1)/n = 1.5 (n = 4)" and g0["group_size"] == 4.0
    assert g0["sync_share_of_step_time"] == pytest.approx((2.0 + 3.0 + 5.0) / 1000 / (0.1 + 0.2 + 0.4))
    assert g0["matched_steps"] == 3
    assert g0["pct_of_peak"] == pytest.approx(3000.0 / (peak * 1000) * 100)
    assert g0["verdict"] == "latency-bound" and g0["latency_bound"] is True  # 5 MB < 7.4 MB, 0.8% of the peak
    assert g0["note"].startswith("latency-bound: mean message 5 MB < 7.4 MB")
    assert g0["sources"] == f"{f0}:5 .. {f0}:20"
    assert g0["sampled"] is True and g0["summary_count"] == 10.0  # the run did 10, 4 were logged
    assert g0["summary_total_bytes"] == 50e6 and g0["summary_mean_bytes"] == 5e6

    g1 = rows[(1, "gradient_sync")]
    assert (g1["count"], g1["total_bytes"], g1["algbw_mb_s"], g1["group_size"]) == (2, 40e6, 5000.0, 2.0)
    assert g1["busbw_mb_s"] == 6000.0 and g1["busbw_from"] == "logged, derived where missing"
    assert g1["sync_share_of_step_time"] == pytest.approx(8.0 / 1000 / (0.1 + 0.2)) and g1["matched_steps"] == 2
    assert g1["verdict"] == "below peak" and g1["latency_bound"] is False  # 20 MB messages, 1.6% of the peak
    assert g1["note"].startswith("below peak at large messages: 1.6% of the NVLink 4 (H100 SXM) peak of 370 GB/s")
    assert pd.isna(g1["sources"])
    assert g1["sampled"] is False and np.isnan(g1["summary_count"]) and np.isnan(g1["summary_total_bytes"])
    assert np.isnan(g1["summary_mean_bytes"])

    b1 = rows[(1, "broadcast")]
    assert (b1["count"], b1["algbw_mb_s"], b1["busbw_mb_s"]) == (1, 2.0, 2.0)
    assert b1["busbw_from"] == "derived: algbw x 1 (n = 4)" and b1["sources"] == f"{f1}:3"
    assert b1["total_bytes"] == 1000.0 and b1["total_ms"] == 0.5  # one record is a total too
    assert np.isnan(b1["sync_share_of_step_time"]) and b1["matched_steps"] == 0  # no step number

    for key in ((None, "my_op"), (0, "unknown")):
        row = rows[key]
        assert np.isnan(row["busbw_mb_s"]) and pd.isna(row["busbw_from"]) and row["verdict"] == "unknown"
        assert pd.isna(row["latency_bound"]) is False and row["latency_bound"] is False
    assert rows[(None, "my_op")]["algbw_mb_s"] == 2000.0 and rows[(0, "unknown")]["algbw_mb_s"] == pytest.approx(0.1)
    # rank-less records count at rank 0's step times
    assert rows[(None, "my_op")]["sync_share_of_step_time"] == pytest.approx(1.5 / 1000 / 0.1)


def test_the_reference_link_by_hosts_mode_and_backend():
    from logkit.analysis.kernels.communication import session_link
    from logkit.analysis.kernels.peaks import CPU_LINK, GLOO_LINK
    from tests.support.analysis_synth import event_rows

    def init(host, network=None, kind="nccl_init"):
        return {"kind": kind, "host": host, "network": network}

    two_hosts = session("n", world_size=4, gpus=H100, backend="nccl",
                        events=event_rows(init("a", "IB"), init("b", "IB"), init("b", "Socket")))
    assert session_link(two_hosts) == {
        "link": "inter-node network (IB, Socket)", "peak_busbw_gb_s": None, "alpha_us": None,
        "source": "several hosts: the network, not the GPUs' link, bounds the collectives"}
    unnamed = session("u", world_size=2, gpus=H100, backend="nccl", events=event_rows(init("a"), init("b")))
    assert session_link(unnamed)["link"] == "inter-node network"
    # one host in NCCL's init lines (another only in other events): the GPUs' own link
    one_host = session("o", world_size=2, gpus=H100, backend="nccl",
                       events=event_rows(init("a"), init("b", kind="other")))
    assert session_link(one_host) == link_for("NVIDIA H100 80GB HBM3", "nccl")
    assert session_link(session("c", world_size=2, mode="multi-cpu", backend="gloo", gpus=H100)) == CPU_LINK
    assert session_link(session("c", world_size=2, mode="CPU", gpus=H100)) == CPU_LINK
    assert session_link(session("c", world_size=2, mode="MULTI-GPU", backend="GLOO")) == CPU_LINK  # gloo, no GPU
    assert session_link(session("c", world_size=2, mode="MULTI-GPU", backend="Gloo", gpus=H100)) == GLOO_LINK
    assert session_link(session("c", world_size=2, mode="MULTI-GPU")) is None
    # a session of one rank: a group of one, whatever its GPUs
    assert session_link(session("c", world_size=1, mode="SINGLE-GPU", gpus=H100))["link"] == "none (a group of one rank)"
    # through the table: a link without a peak gives no reference, with the link's reason
    t = communication_table(session("n", world_size=4, gpus=H100, backend="nccl", comm=comm_rows([1e6], [1.0]),
                                    events=event_rows(init("a"), init("b"))))
    assert t["verdict"].tolist() == ["no reference"] and np.isnan(t["peak_busbw_gb_s"].iloc[0])
    assert t["note"].iloc[0] == "several hosts: the network, not the GPUs' link, bounds the collectives"
    assert np.isnan(t["half_peak_bytes"].iloc[0]) and np.isnan(t["pct_of_peak"].iloc[0])
    assert pd.isna(t["latency_bound"].iloc[0])  # no peak: not known


def test_verdict_at_its_edges():
    from logkit.analysis.kernels.communication import verdict

    link = link_for("NVIDIA H100 80GB HBM3", "nccl")  # 370 GB/s, half the peak at 20 us x 370 GB/s = 7.4 MB
    at = NEAR_PEAK * H100_PEAK * 1000  # MB/s at exactly 60% of the peak
    v, note = verdict(50e6, at, link)
    assert v == "bandwidth-bound" and note == ("bandwidth-bound: 60% of the NVLink 4 (H100 SXM) peak of 370 GB/s at "
                                               "50 MB messages: the link is the limit")
    assert verdict(50e6, np.nextafter(at, 0), link)[0] == "below peak"
    v, note = verdict(7.4e6, 3700.0, link)  # exactly half-peak messages are not smaller than it
    assert v == "below peak" and note == (
        "below peak at large messages: 1.0% of the NVLink 4 (H100 SXM) peak of 370 GB/s at 7.4 MB messages: check the "
        "topology (nvidia-smi topo -m), PCIe generation and width, peer-to-peer access and NCCL settings "
        "(NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_ALGO)")
    v, note = verdict(2e6, 3700.0, link)
    assert v == "latency-bound" and note == ("latency-bound: mean message 2 MB < 7.4 MB needed for half of the NVLink "
                                             "4 (H100 SXM) peak, and 1.0% of its 370 GB/s: per-call latency dominates")
    assert verdict(None, 3700.0, link)[1].startswith("below peak at large messages: 1.0% of the NVLink 4 (H100 SXM) "
                                                     "peak of 370 GB/s: check")  # no message size: none said
    assert verdict(float("nan"), 3700.0, link)[0] == "below peak"
    assert verdict(2e6, float("nan"), link) == (
        "unknown", "no bus bandwidth logged or derivable (size, duration or ranks missing)")
    assert verdict(2e6, None, link)[0] == "unknown"
    assert verdict(2e6, 4500.0, None) == ("unknown", "GPU model unknown: no reference peak")


def test_summary_totals_only_on_the_lowest_rank_and_the_mean_as_written():
    comm = (comm_rows([1000] * 2, [0.1] * 2, rank=0, op="broadcast")
            + comm_rows([4_000_000] * 3, [1.0] * 3, rank=0) + comm_rows([4_000_000] * 3, [1.0] * 3, rank=1))
    s = session("t", world_size=2, gpus=H100, backend="nccl", comm=comm,
                summary={"communication": {"gradient_sync": {"count": 3, "total_mb": 12.0, "avg_mb": 3.5}}})
    t = communication_table(s).set_index(["rank", "op"])
    g0 = t.loc[(0, "gradient_sync")]
    # the run's count equals the logged one: not sampled; avg_mb as the run wrote it, not total / count
    assert g0["sampled"] is False or g0["sampled"] == False  # noqa: E712 (numpy bool)
    assert (g0["summary_count"], g0["summary_total_bytes"], g0["summary_mean_bytes"]) == (3.0, 12e6, 3.5e6)
    assert np.isnan(t.loc[(1, "gradient_sync"), "summary_count"])  # rank 1: the summary is rank 0's
    assert np.isnan(t.loc[(0, "broadcast"), "summary_count"])  # an op the summary does not name
    assert not t["sampled"].any()


def test_sources_from_the_first_and_last_records_that_have_one():
    from logkit.analysis.kernels.comm_records import file_line

    rows = comm_rows([1000] * 4, [1.0] * 4)
    for row, src in zip(rows, [None, "r0.jsonl:7", "r0.jsonl:8", None], strict=True):
        row["source"] = src
    one = comm_rows([1000] * 2, [1.0] * 2, op="broadcast")
    one[1]["source"] = "r0.jsonl:12"
    t = communication_table(session("s", world_size=2, comm=rows + one)).set_index("op")
    assert t.loc["gradient_sync", "sources"] == "r0.jsonl:7 .. r0.jsonl:8"
    assert t.loc["broadcast", "sources"] == "r0.jsonl:12"
    # the file:line column: source where it reads as one, else origin (older nccl-tests frames)
    frame = pd.DataFrame({"source": ["not a place", None], "origin": ["a.log:3", "junk"]}, index=[5, 6])
    got = file_line(frame)
    assert got.tolist() == ["a.log:3", None] and list(got.index) == [5, 6]
    only_origin = file_line(pd.DataFrame({"source": [None, None], "origin": ["a.log:3", "b.log:4"]}))
    assert only_origin.tolist() == ["a.log:3", "b.log:4"]  # an empty source column: origin is read next
    none = file_line(pd.DataFrame({"source": ["x", None]}, index=[3, 4]))
    assert none.tolist() == [None, None] and list(none.index) == [3, 4] and none.dtype == object


def test_sources_of_interleaved_ops_are_each_ops_own_first_and_last():
    rows = []
    for _ in range(3):  # gradient_sync and broadcast records alternate in the stream
        rows += comm_rows([1000], [1.0], op="gradient_sync") + comm_rows([10], [0.1], op="broadcast")
    for i, row in enumerate(rows):
        row["source"] = f"r0.jsonl:{10 + i}"
    tail = comm_rows([1000] * 3, [1.0] * 3, op="allgather")
    for row, src in zip(tail, ["r0.jsonl:30", "r0.jsonl:31", None], strict=True):
        row["source"] = src  # the last record without a place: the range ends at a place the op has
    t = communication_table(session("i", world_size=2, comm=rows + tail)).set_index("op")
    assert t.loc["gradient_sync", "sources"] == "r0.jsonl:10 .. r0.jsonl:14"
    assert t.loc["broadcast", "sources"] == "r0.jsonl:11 .. r0.jsonl:15"
    assert t.loc["allgather", "sources"] in ("r0.jsonl:30", "r0.jsonl:30 .. r0.jsonl:31")


def test_rank_counts_of_one_and_unknown():
    # one rank (the meta's world size, no group size): all-reduce moves nothing over the bus, a
    # broadcast's busbw is its algbw; a group of 0 ranks or no count at all gives no busbw
    one = comm_rows([4_000_000], [2.0], op="allreduce") + comm_rows([4_000_000], [2.0], op="broadcast")
    for row in one:
        row["group_size"] = row["busbw_mb_s"] = None
    t = communication_table(session("one", world_size=1, comm=one)).set_index("op")
    assert t.loc["allreduce", "busbw_mb_s"] == 0.0 and t.loc["broadcast", "busbw_mb_s"] == 2000.0
    assert t.loc["broadcast", "busbw_from"] == "derived: algbw x 1 (n = 1)"
    unknown = session("none", comm=one)
    unknown.meta["world_size"] = None  # no count of ranks anywhere
    t = communication_table(unknown).set_index("op")
    assert t["busbw_mb_s"].isna().all() and t["algbw_mb_s"].tolist() == [2000.0, 2000.0]
    zero = comm_rows([4_000_000], [2.0], op="allreduce")
    zero[0]["group_size"], zero[0]["busbw_mb_s"] = 0, None
    t = communication_table(session("zero", comm=zero))
    assert np.isnan(t["busbw_mb_s"].iloc[0]) and pd.isna(t["busbw_from"].iloc[0])
    # a world size of 0 in the meta is no rank count either: nothing derived from it
    t = communication_table(session("ws0", world_size=0, comm=[dict(r) for r in unknown.comm.to_dict("records")]))
    assert t["busbw_mb_s"].isna().all() and t["busbw_from"].isna().all()


def test_timing_source_is_none_when_no_record_says_it():
    rows = comm_rows([1000] * 2, [1.0] * 2)
    t = communication_table(session("n", world_size=2, comm=rows))
    assert t["timing_source"].tolist() == [None]
    for row, ts in zip(rows, ["wall", "cuda_event"], strict=True):
        row["timing_source"] = ts
    assert communication_table(session("w", world_size=2, comm=rows))["timing_source"].tolist() == ["cuda_event,wall"]


def test_sync_share_with_rankless_steps_a_step_logged_twice_and_records_without_duration():
    steps = step_rows([0.1, 0.1], rank=None) + step_rows([0.5, 0.5], rank=1)  # rank-less rows are rank 0's
    steps += step_rows([0.4], rank=1, start_step=2)  # rank 1's step 2 logged again: the last one counts
    comm = comm_rows([1000] * 2, [10.0] * 2, rank=0) + comm_rows([1000] * 2, [10.0] * 2, rank=1)
    comm += [dict(comm_rows([1000], [1.0], rank=0)[0], duration_ms=None, algbw_mb_s=None, step=2)]
    comm += [dict(comm_rows([1000], [7.0], rank=0)[0], step=None)]
    comm += [dict(r, rank=None) for r in comm_rows([1000] * 2, [10.0] * 2, op="allgather")]  # rank 0's
    t = communication_table(session("r", world_size=2, comm=comm, steps=steps))
    rankless = t[t["rank"].isna()].iloc[0]
    assert rankless["op"] == "allgather" and rankless["sync_share_of_step_time"] == pytest.approx(0.020 / 0.2)
    t = t[t["rank"].notna()].set_index("rank")
    assert t.loc[0, "sync_share_of_step_time"] == pytest.approx(0.020 / 0.2) and t.loc[0, "matched_steps"] == 2
    assert t.loc[1, "sync_share_of_step_time"] == pytest.approx(0.020 / 0.9) and t.loc[1, "matched_steps"] == 2


def test_summary_totals_of_any_shape():
    comm = comm_rows([2_000_000] * 2, [1.0] * 2)
    for row in comm:
        row["rank"] = None  # text logs: no rank on the records, the summary still applies
    t = communication_table(session("a", comm=comm, summary={"communication": {"gradient_sync": {"count": 5}}}))
    assert t["summary_count"].tolist() == [5.0] and bool(t["sampled"].iloc[0])
    assert np.isnan(t["summary_mean_bytes"].iloc[0]) and np.isnan(t["summary_total_bytes"].iloc[0])
    t = communication_table(session("b", comm=comm, summary={"communication": {"gradient_sync": {"total_mb": 8.0}}}))
    assert t["summary_total_bytes"].tolist() == [8e6] and np.isnan(t["summary_mean_bytes"].iloc[0])
    assert np.isnan(t["summary_count"].iloc[0]) and not bool(t["sampled"].iloc[0])
    t = communication_table(session("c", comm=comm, summary={"communication": ["not", "a", "table"]}))
    assert np.isnan(t["summary_count"].iloc[0])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # np.where computes size / 0 it then drops
def test_sync_share_keys_stay_apart_with_many_ranks_and_few_steps():
    # 4 ranks x 2 ops over 2 steps: 8 (rank, op) keys, each with its own durations; rank 3 logged
    # no steps and the lowest rank with steps is 1 (rank 0 logged none either)
    steps = step_rows([1.0, 1.0], rank=1) + step_rows([2.0, 2.0], rank=2)
    comm, expected = [], {}
    for rank in range(4):
        for j, op in enumerate(("gradient_sync", "broadcast")):
            d = 10.0 * (rank + 1) + j
            comm += comm_rows([1000, 1000], [d, d], rank=rank, op=op)
            own = 2.0 if rank == 2 else 1.0  # ranks 0 and 3 take rank 1's steps
            expected[(rank, op)] = 2 * d / 1000 / (2 * own)
    rankless = comm_rows([1000, 1000], [5.0, 5.0], op="allgather")
    for row in rankless:
        row["rank"] = None
    expected[(None, "allgather")] = 0.010 / 2.0  # a record without rank is rank 0's: rank 1's steps here
    comm += rankless
    t = communication_table(session("k", world_size=4, comm=comm, steps=steps))
    got = {(None if pd.isna(r) else int(r), op): x for r, op, x in
           zip(t["rank"], t["op"], t["sync_share_of_step_time"], strict=True)}
    assert got == pytest.approx(expected)
    # a record of 0 ms has no algbw (not an infinite one): the median is the other record's
    zero = [dict(comm_rows([1000], [4.0], op="reduce")[0], algbw_mb_s=None),
            dict(comm_rows([1000], [1.0], op="reduce")[0], duration_ms=0.0, algbw_mb_s=None)]
    row = communication_table(session("z", comm=zero)).iloc[0]
    assert row["count"] == 2 and row["algbw_mb_s"] == pytest.approx(1000 / 1e6 / 0.004)


def test_a_session_over_several_hosts_is_judged_against_the_network_its_logs_name():
    """Two hosts in the NCCL init lines: the reference is what the NICs the log names achieve (4 x 200 Gb/s
    HDR: 91 GB/s, the busbw nccl-tests measured over 4 HDR NICs between 2 HGX A100 nodes in
    NVIDIA/nccl-tests#100, 91% of the 4 x 25 GB/s line rate), not the GPUs' NVLink; without a rate the
    peak is unknown and the verdict says so."""
    events = [{"kind": "nccl_init", "host": h, "network": "IB", "time_s": float(i)} for i, h in enumerate("ab")]
    nics = [{"name": f"mlx5_{i}", "link": "IB"} for i in range(4)]
    comm = comm_rows([64e6] * 3, [10.0] * 3, group=16)
    rated = session("ib", world_size=16, gpus=H100, backend="nccl", comm=comm, events=events, network="IB",
                    nics=nics, link_speed_gbps=200.0)
    row = communication_table(rated).iloc[0]
    assert row["peak_busbw_gb_s"] == pytest.approx(91.0) and "4 NIC(s) at 200 Gb/s" in row["link"]
    assert (row["scope"], row["transport"]) == ("inter-node", "IB") and "nccl-tests#100" in row["peak_source"]
    busbw = 64e6 / 1e6 / 0.010 * 2 * 15 / 16
    assert row["pct_of_peak"] == pytest.approx(busbw / (91.0 * 1000) * 100)
    unrated = session("ib2", world_size=16, gpus=H100, backend="nccl", comm=comm, events=events, network="IB",
                      nics=nics)
    row = communication_table(unrated).iloc[0]
    assert pd.isna(row["peak_busbw_gb_s"]) and row["verdict"] == "no reference" and "no rate" in row["note"]


def test_run_links_are_the_links_the_sessions_were_judged_against():
    """``run_links``: one row per link of the sessions with communication or nccl-tests rows, those
    sessions listed; a session without such rows adds none, a session whose GPU is unknown adds none."""
    from logkit.analysis.analyze import analyze
    from logkit.run.load import load_sessions

    rows = comm_rows([1e6, 2e6], [1.0, 2.0])
    h100 = session("h", world_size=2, comm=rows, gpus=H100, backend="nccl", mode="MULTI-GPU")
    unknown = session("u", world_size=2, comm=rows, gpus=[{"index": 0, "name": "mystery"}], backend="nccl")
    quiet = session("q", gpus=[{"index": 0, "name": "Tesla T4"}])  # no communication: judged against nothing
    sessions = [h100, unknown, quiet, load_session(NCCL_TESTS), *load_sessions(SAMPLES / "why_slow" / "logs")]
    a = analyze(sessions)
    links = {r.link: r for r in a.rows("run_links")}
    judged = set(a.communication["link"].dropna()) | set(a.nccl_tests["link"].dropna())
    assert set(links) == judged == {"NVLink 4 (H100 SXM)", "NVLink 3 (A100 SXM)", "loopback/gloo (CPU)"}
    nv = links["NVLink 4 (H100 SXM)"]
    assert nv.session_ids == ["h"] and nv.peak_busbw_gb_s == H100_PEAK and nv.gpu_model == "H100 SXM"
    assert nv.half_peak_bytes == pytest.approx(20e-6 * 370e9) and "nccl-tests#212" in nv.source
    assert links["NVLink 3 (A100 SXM)"].session_ids == [load_session(NCCL_TESTS).session_id]
    cpu = links["loopback/gloo (CPU)"]
    assert cpu.peak_busbw_gb_s is None and cpu.session_ids == sorted(set(a.communication["session_id"]) - {"h", "u"})
    assert "run_links" in a.to_dict()
