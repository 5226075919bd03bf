"""The performance tables row by row, with every column: step statistics, the slowest steps,
stragglers and GPUs, each expected value computed here from the rows the test gives, and the
thresholds on the side their definitions give."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from logkit.analysis.kernels import straggler as kernel
from logkit.analysis.kernels.performance import (
    busy_gpu,
    gpu_table,
    slow_step_list,
    step_samples,
    step_stats,
    stragglers,
)
from tests.support.analysis_synth import session, step_rows

STEP_COLUMNS = ["session_id", "rank", "steps", "step_p50_s", "step_p95_s", "step_max_s", "step_mean_s", "slow_steps",
                "slow_threshold_s", "data_share", "step_p5_s", "step_p25_s", "step_p75_s", "samples_per_s"]
STRAGGLER_COLUMNS = ["session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler", "p_value"]
GPU_COLUMNS = ["session_id", "host", "gpu", "name", "avg_util", "peak_util", "avg_memory_pct", "samples", "source"]


def unranked(times, **kw):
    rows = step_rows(times, **kw)
    for r in rows:
        r["rank"] = None
    return rows


def test_empty_tables_have_their_columns():
    empty = session("e")
    assert list(step_stats(empty).columns) == STEP_COLUMNS
    assert list(stragglers(step_samples(empty)).columns) == STRAGGLER_COLUMNS
    assert list(gpu_table(empty).columns) == GPU_COLUMNS
    assert slow_step_list(empty) == []


def test_step_statistics_row_by_row_in_rank_order():
    t1, t0 = [0.5, 0.7, 0.6, 1.9], [1.0, 1.0, 3.0, 3.01, 1.0]
    s = session("s", world_size=2, steps=step_rows(t1, rank=1, data=[0.1] * 4) + step_rows(t0, rank=0))
    stats = step_stats(s)
    assert list(stats.columns) == STEP_COLUMNS and list(stats["rank"]) == [0, 1]
    row = stats.iloc[0].to_dict()
    assert row["session_id"] == "s" and row["steps"] == 5
    assert row["slow_steps"] == 1  # 3.0 is exactly 3x the median (1.0): not above it; 3.01 is
    assert row["slow_threshold_s"] == 3.0 and math.isnan(row["data_share"])
    expected = {"step_p50_s": 0.5, "step_p95_s": 0.95, "step_max_s": 1.0, "step_mean_s": 0.25, "step_p5_s": 0.05,
                "step_p25_s": 0.25, "step_p75_s": 0.75}
    for col, q in expected.items():
        want = np.mean(t0) if col == "step_mean_s" else np.max(t0) if col == "step_max_s" else np.quantile(t0, q)
        assert row[col] == pytest.approx(want), col
    row = stats.iloc[1].to_dict()
    assert row["steps"] == 4 and row["slow_steps"] == 0 and row["slow_threshold_s"] == pytest.approx(3 * 0.65)
    assert row["data_share"] == pytest.approx(0.4 / 3.7)


def test_steps_without_a_rank_are_rank_0s():
    s = session("s", world_size=2, steps=unranked([1.0, 1.0, 1.0, 1.0, 10.0]) + step_rows([5.0] * 5, rank=1))
    stats = step_stats(s)
    assert list(stats["rank"]) == [0, 1] and list(stats["steps"]) == [5, 5]
    assert list(stats["slow_steps"]) == [1, 0]
    assert slow_step_list(s) == [{"rank": None, "step": 5, "step_time_s": 10.0, "x_median": 10.0}]


def test_the_slowest_steps_are_above_three_medians_at_most_ten():
    times = [1.0] * 30 + [3.0] + [3.5 + i for i in range(12)]
    s = session("s", steps=step_rows(times))
    worst = slow_step_list(s)
    assert len(worst) == 10
    assert worst[0] == {"rank": 0, "step": 43, "step_time_s": 14.5, "x_median": 14.5}
    assert [w["step"] for w in worst] == list(range(43, 33, -1))
    assert len(slow_step_list(s, limit=20)) == 12  # 3.0 s (exactly 3x) is not slow
    rows = step_rows([1.0, 1.0, 1.0, 5.0])
    rows[3]["step"] = None
    assert slow_step_list(session("s", steps=rows)) == [{"rank": 0, "step": None, "step_time_s": 5.0,
                                                         "x_median": 5.0}]


def per_step(sessions: list, ranks: list, medians: list, steps: int = 12) -> pd.DataFrame:
    """``step_samples`` rows: each (session, rank) at its median step time in every one of ``steps`` steps."""
    rows = [{"session_id": sid, "rank": r, "step": k + 1, "step_time_s": t}
            for sid, r, t in zip(sessions, ranks, medians, strict=True) for k in range(steps)]
    return pd.DataFrame(rows)


def test_a_straggler_is_the_slowest_rank_more_than_5_percent_behind():
    out = stragglers(per_step(["a", "a", "a", "b", "b", None, None], [0, 1, 2, 0, 1, 0, 1],
                              [1.0, 1.02, 1.2, 1.0, 1.03, 2.0, 2.4]))
    assert list(out.columns) == STRAGGLER_COLUMNS and list(out.index) == list(range(7))
    assert list(out["vs_fastest"]) == pytest.approx([1.0, 1.02, 1.2, 1.0, 1.03, 1.0, 1.2])
    assert list(out["score"]) == pytest.approx([0.0, 0.02, 0.2, 0.0, 0.03, 0.0, 0.2])
    # b's slowest rank is 3% behind: not a straggler; a session without an id is scored on its own
    assert list(out["is_straggler"]) == [False, False, True, False, False, False, True]
    assert list(out["median_step_s"]) == [1.0, 1.02, 1.2, 1.0, 1.03, 2.0, 2.4]
    # the slowest rank of every step: 3 ranks (a), 2 ranks (b: 1.03 - 1.0 is above 2% of a step too)
    assert list(out["p_value"]) == pytest.approx([1.0, 1.0, 3 * (1 / 3) ** 12, 1.0, 2 * 0.5 ** 12, 1.0, 2 * 0.5 ** 12])


def test_a_straggler_score_on_the_threshold_is_not_one(monkeypatch):
    monkeypatch.setattr(kernel, "STRAGGLER_SCORE", 0.25)  # 1.25 / 1.0 - 1 = 0.25 exactly
    out = stragglers(per_step(["a", "a"], [0, 1], [1.0, 1.25]))
    assert list(out["is_straggler"]) == [False, False]
    out = stragglers(per_step(["a"], [0], [1.0]))
    assert list(out["is_straggler"]) == [False]  # one rank is never a straggler


def test_a_rank_slower_on_average_but_not_step_after_step_is_not_a_straggler():
    # rank 1's median step is 10% above rank 0's, but it is the slower one (by 2% of a step) in 4 of 12 steps
    t0 = [1.0, 1.2, 1.0, 1.2, 1.0, 1.2, 1.0, 1.2, 1.0, 1.2, 1.0, 1.2]
    t1 = [1.21, 1.21, 1.21, 1.21, 1.21, 1.21, 1.21, 1.0, 1.0, 1.0, 1.0, 1.0]
    rows = pd.DataFrame({"session_id": "a", "rank": [0] * 12 + [1] * 12, "step": list(range(1, 13)) * 2,
                         "step_time_s": t0 + t1})
    out = stragglers(rows)
    assert out["score"].iloc[1] == pytest.approx(np.median(t1) / np.median(t0) - 1)
    assert out["score"].iloc[1] > 0.05 and not out["is_straggler"].any()


def snap(gpu, util, *, host="h", used=40000.0, total=80000.0, pct=None, name=None):
    return {"time_s": 0.0, "host": host, "gpu": gpu, "utilization_pct": util, "memory_used_mb": used,
            "memory_total_mb": total, "memory_usage_pct": pct, "gpu_name": name}


def test_gpu_rows_from_snapshots():
    rows = [snap(1, 20.0, used=10.0, total=40.0), snap(0, 90.0, pct=70.0), snap(0, 80.0, total=0.0),
            snap(1, 30.0, used=0.5, total=1.0), snap(2, math.nan, host=None, used=math.nan, total=math.nan),
            snap(3, math.inf, pct=math.inf)]
    s = session("s", gpu=rows, gpus=[{"index": 0, "name": "NVIDIA H100"}, {"index": 1, "name": "NVIDIA A100"}])
    table = gpu_table(s)
    assert list(table.columns) == GPU_COLUMNS
    got = table.to_dict("records")
    assert got[0] == {"session_id": "s", "host": "h", "gpu": 0, "name": "NVIDIA H100", "avg_util": 85.0,
                      "peak_util": 90.0, "avg_memory_pct": 70.0, "samples": 2, "source": "gpu_snapshot"}
    # the reported percentage first, else used / total (a total of 0 MB says nothing)
    assert got[1] == {"session_id": "s", "host": "h", "gpu": 1, "name": "NVIDIA A100", "avg_util": 25.0,
                      "peak_util": 30.0, "avg_memory_pct": 37.5, "samples": 2, "source": "gpu_snapshot"}
    # a GPU of no host and no readings is kept, its figures unknown; readings that are not finite say nothing
    assert got[2]["gpu"] == 3 and got[2]["host"] == "h" and got[2]["samples"] == 1
    assert all(pd.isna(got[2][k]) for k in ("avg_util", "peak_util", "avg_memory_pct", "name"))
    assert got[3]["gpu"] == 2 and pd.isna(got[3]["host"]) and got[3]["samples"] == 1
    assert all(pd.isna(got[3][k]) for k in ("avg_util", "peak_util", "avg_memory_pct", "name"))


def test_gpu_names_from_a_capture():
    from logkit.ingest.session import make_frame

    s = session("s", gpus=[{"index": 1, "name": "NVIDIA A100"}])
    s.gpu = make_frame("gpu", [snap(0, 50.0, name="Tesla T4"), snap(1, 50.0), snap(2, 40.0, name="Tesla V100"),
                               snap(2, 40.0)], extra_columns=True)
    assert list(gpu_table(s)["name"]) == ["Tesla T4", "NVIDIA A100", "Tesla V100"]  # the run's own names first


def test_gpu_rows_from_summary_json_without_snapshots():
    gpus = ["not a gpu", {"index": 0, "name": "NVIDIA L4", "avg_util": None, "peak_util": None},
            {"index": 1, "name": "NVIDIA L4", "avg_util": 61.5, "peak_util": math.inf, "avg_memory_pct": math.nan}]
    # snapshots that name no GPU leave the summary's figures in place
    table = gpu_table(session("s", summary={"gpus": gpus}, gpu=[snap(None, 55.0)]))
    assert table.to_dict("records") == [{"session_id": "s", "host": "", "gpu": 1, "name": "NVIDIA L4",
                                         "avg_util": 61.5, "peak_util": None, "avg_memory_pct": None,
                                         "samples": None, "source": "summary.json"}]


@pytest.mark.parametrize(("utils", "expected"), [
    ([50.0, 10.0, 10.0], {"busy": 0, "idle": [1, 2], "busy_util": 50.0}),  # both thresholds inclusive
    ([49.9, 0.0], None), ([90.0, 10.1], None), ([90.0, 95.0, 0.0], None), ([90.0], None),
])
def test_one_busy_gpu(utils, expected):
    table = pd.DataFrame({"gpu": range(len(utils)), "avg_util": utils})
    assert busy_gpu(table) == expected
