"""The forecast's arithmetic against hand computations, and the runs it refuses to forecast from."""

from __future__ import annotations

import math

import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels.forecast import Point, expected_max_normal, fit, z_of
from logkit.schema.vocab import Regime
from tests.support.analysis_synth import gpu_rows, session, step_rows


def test_expected_max_of_normal_draws_has_its_closed_forms():
    # E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)); of 4: 1.029375 (tables of normal order statistics)
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-6)
    assert expected_max_normal(4) == pytest.approx(1.029375, abs=1e-5)


def test_the_80_percent_quantile():
    assert z_of(0.80) == pytest.approx(1.2815516, abs=1e-6)
    assert z_of(0.95) == pytest.approx(1.9599640, abs=1e-6)


# Two measured points of a strong-scaling group (global batch 12):
# 1 rank: step 0.300 s = data 0.048 + the rest 0.252 (compute and host work, not told apart);
# 2 ranks: data 0.024, compute 0.120, exposed sync 0.020, wait 0.002, host 0.006 (sum 0.172).
# Their steps vary by 2% and 1% (relative standard deviation).
ONE = Point("one", 1, 12.0, 0.300, 0.01, 20, data_s=0.048, compute_s=0.252, variation=0.02)
TWO = Point("two", 2, 6.0, 0.172, 0.01, 20, data_s=0.024, compute_s=0.120, comm_s=0.020, wait_s=0.002, other_s=0.006,
            variation=0.01)


def test_strong_forecast_by_hand():
    model = fit([ONE, TWO], Regime.STRONG)
    # host work: the 2-rank point's 6 ms; per sample per rank: data 0.048/12 = 0.024/6 = 4 ms,
    # compute ((0.252 - 0.006)/12 + 0.120/6) / 2 = (0.0205 + 0.020) / 2 = 0.02025
    assert model.other_s == pytest.approx(0.006)
    assert model.k_data == pytest.approx(0.004)
    assert model.k_compute == pytest.approx(0.02025)
    p = model.predict(4)
    # at 4 ranks, per-rank batch 3: data 0.012, compute 0.06075, sync 0.020 x 1.5 (2(n-1)/n at 4 over 1 at 2),
    # wait 0.002 x 1.029375 / 0.5641896, host 0.006
    wait = 0.002 * 1.029375 / 0.5641896
    step = 0.012 + 0.06075 + 0.030 + wait + 0.006
    assert p["comm"] == pytest.approx(0.030)
    assert p["wait"] == pytest.approx(wait, rel=1e-5)
    assert p["step_s"] == pytest.approx(step, rel=1e-6)
    assert p["samples_per_s"] == pytest.approx(12 / step, rel=1e-6)
    # the interval: variation 2% (the larger of the points'), fit uncertainties: compute and data 3% (their
    # estimates agree within it), wait 50%, host 3%; the sync: 25% of 0.030 (one multi-rank size) is 0.0075,
    # less than the way to its latency-bound value, 0.020 x (4-1)/(2-1) = 0.060: (0.060 - 0.030) / z
    sigma = math.sqrt((0.02 * step) ** 2 + (0.03 * 0.012) ** 2 + (0.03 * 0.06075) ** 2 + (0.030 / 1.2815516) ** 2
                      + (0.5 * wait) ** 2 + (0.03 * 0.006) ** 2)
    assert p["step_hi_s"] == pytest.approx(step + 1.2815516 * sigma, rel=1e-5)
    assert p["lo"] == pytest.approx(12 / (step + 1.2815516 * sigma), rel=1e-5)
    assert p["hi"] == pytest.approx(12 / (step - 1.2815516 * sigma), rel=1e-5)


def test_weak_forecast_keeps_the_per_rank_work():
    # weak: 4 samples per rank at every size; 1 rank: data 0.016 + rest 0.086; 2 ranks as below
    one = Point("one", 1, 4.0, 0.102, 0.01, 20, data_s=0.016, compute_s=0.086)
    two = Point("two", 2, 4.0, 0.110, 0.01, 20, data_s=0.016, compute_s=0.080, comm_s=0.010, wait_s=0.0,
                other_s=0.004)
    p = fit([one, two], Regime.WEAK).predict(8)
    # data 0.016, compute ((0.086 - 0.004) + 0.080) / 2 = 0.081, sync 0.010 x 2(7)/8 = 0.0175, host 0.004
    assert p["step_s"] == pytest.approx(0.016 + 0.081 + 0.0175 + 0.004)
    assert p["samples_per_s"] == pytest.approx(32 / 0.1185)


def _group(*runs, steps=20):
    return [session(sid, world_size=n, steps=[r for rank in range(n) for r in step_rows(times, rank=rank, batch=batch)],
                    model="m") for sid, n, times, batch in runs]


def test_without_phases_the_multi_rank_rest_is_communication():
    # 1 rank: 0.4 s for 8 samples (0.05 s each); 2 ranks: 0.25 s of which 4 x 0.05 = 0.2 is work, 0.05 the rest;
    # at 4 ranks: 2 x 0.05 + 0.05 x 1.5 = 0.175 s, 8 / 0.175 samples/s
    a = analyze(_group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8)), forecast_sizes=(4,))
    (row,) = a.rows("forecast")
    assert row.step_s == pytest.approx(0.175)
    assert row.samples_per_s == pytest.approx(8 / 0.175)
    assert row.scaling_efficiency == pytest.approx((8 / 0.175) / (8 / 0.4) / 4)
    assert row.dominant == "compute" and "communication and waiting" in row.note


def test_default_sizes_are_twice_and_four_times_the_largest():
    a = analyze(_group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8)))
    assert [r.world_size for r in a.rows("forecast")] == [4, 8]


@pytest.mark.parametrize("runs, words", [
    ((("one", 1, [0.4] * 6, 8), ("two", 2, [0.25] * 6, 8)), "too short"),
    ((("one", 1, [0.4, 0.2, 0.6, 0.3, 0.5] * 4, 8), ("two", 2, [0.25] * 20, 8)), "too noisy"),
    ((("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 12)), "the regime is mixed"),
    ((("one", 1, [0.4] * 20, 8),), "one world size measured"),
])
def test_a_run_that_cannot_be_forecast_from_says_why(runs, words):
    a = analyze(_group(*runs), forecast_sizes=(4,))
    (row,) = a.rows("forecast")
    assert row.samples_per_s is None and words in row.basis and row.basis.startswith("no forecast")


def test_a_global_batch_that_does_not_split_is_no_forecast():
    a = analyze(_group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8)), forecast_sizes=(16,))
    (row,) = a.rows("forecast")
    assert row.samples_per_s is None and "does not split over 16 ranks" in row.basis


def test_a_gpu_run_stops_at_one_node():
    sessions = _group(("one", 1, [0.4] * 20, 16), ("two", 2, [0.25] * 20, 16))
    for s in sessions:
        s.meta.gpu_count, s.meta.nproc_per_node = s.meta.world_size, 8
    rows = analyze(sessions, forecast_sizes=(8, 16)).rows("forecast")
    assert rows[0].samples_per_s is not None
    assert rows[1].samples_per_s is None and "stops at one node" in rows[1].basis and "8 GPUs a node" in rows[1].basis


def test_the_counterfactual_in_hours_gpu_hours_and_money():
    # 20 steps of 8 samples: 160 samples; the 1-rank run does 8 / 0.4 = 20 samples/s, the 2-rank 8 / 0.25 = 32:
    # 8 s on 1, 5 s on 2 (2 x 5 s = 0.0027778 GPU-hours), 3 s saved; at 3 a GPU-hour 0.0083333 against 0.0066667
    a = analyze(_group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8)), forecast_sizes=(4,), gpu_hour_price=3.0)
    run, four = a.rows("counterfactual")
    assert run.measured and run.session_id == "two" and run.samples == 160
    assert run.hours == pytest.approx(5 / 3600) and run.baseline_hours == pytest.approx(8 / 3600)
    assert run.gpu_hours == pytest.approx(10 / 3600) and run.saved_hours == pytest.approx(3 / 3600)
    assert run.cost == pytest.approx(30 / 3600) and run.baseline_cost == pytest.approx(24 / 3600)
    assert run.sentence == ("On 1 GPU this run would have taken 8 s; on 2 it took 5 s: 0.00278 GPU-hours for 3 s saved "
                            "(0.00833 at 3 a GPU-hour, against 0.00667 on 1).")
    assert a.verdict[0] == run.sentence and a.verdict[1].startswith("Multi-GPU paid off")  # first, then the pay-off
    # the forecast at 4 ranks: 8 / 0.175 samples/s (test above): 3.5 s, 4 x 3.5 s = 0.0038889 GPU-hours,
    # 1.4x the 2-rank run's GPU-hours for 5 / 3.5 = 1.43x its speed
    assert not four.measured and four.hours == pytest.approx(3.5 / 3600)
    assert four.gpu_hours_ratio == pytest.approx(1.4) and four.speed_ratio == pytest.approx(5 / 3.5)
    assert four.sentence == "4 GPUs (forecast): 3.5 s, 0.00389 GPU-hours, 1.4x the GPU-hours of 2 for 1.4x the speed, 0.0117."


def test_without_a_scaling_comparison_there_is_no_counterfactual():
    a = analyze(_group(("one", 1, [0.4] * 20, 8)))
    assert a.rows("counterfactual") == [] and not any("would have taken" in v for v in a.verdict)


def test_the_gpus_a_host_samples_bound_the_node():
    # a 1-GPU and a 2-GPU run on a host whose samples list 4 GPUs (launched with nproc_per_node 1 and 2)
    sessions = _group(("one", 1, [0.4] * 20, 16), ("two", 2, [0.25] * 20, 16))
    for s, gpus in zip(sessions, (1, 2), strict=True):
        s.meta.gpu_count, s.meta.nproc_per_node = gpus, gpus
    sessions[1].gpu = session("x", gpu=gpu_rows({g: [50.0] for g in range(4)})).gpu
    rows = analyze(sessions, forecast_sizes=(4, 8)).rows("forecast")
    assert rows[0].samples_per_s is not None
    assert rows[1].samples_per_s is None and "(4 GPUs a node)" in rows[1].basis


Z80 = 1.2815516  # the 80% interval's half-width in standard deviations


def _work_floor(work_s: float, spread: float) -> float:
    """The step's lower bound when the interval reaches past it: the work alone at its own lower bound, its
    variation ``spread`` and the compute's fit uncertainty of at least 3%."""
    return work_s - Z80 * math.sqrt((spread * work_s) ** 2 + (0.03 * work_s) ** 2)


def _two_weak_points(compute_s, sync_s, variation_one, spread):
    """A 1-rank and a 2-rank run of 4 samples per rank: compute only, then the same compute and a sync."""
    one = Point("one", 1, 4.0, compute_s, spread, 20, data_s=0.0, compute_s=compute_s, variation=variation_one)
    two = Point("two", 2, 4.0, compute_s + sync_s, spread, 20, data_s=0.0, compute_s=compute_s, comm_s=sync_s,
                wait_s=0.0, other_s=0.0, variation=spread)
    return fit([one, two], Regime.WEAK)


def test_a_wide_interval_never_forecasts_a_step_shorter_than_its_work():
    # 2 ranks: 10 ms of compute and a 90 ms sync; at 8 ranks the latency-bound sync (x 7) makes sigma larger
    # than the step: the step's lower bound is its work alone, 4 x 0.0025 + 0 data + 0 host = 0.010 s, at its
    # own lower bound: 0.010 - 1.2815516 x sqrt((1% x 0.010)^2 + (3% x 0.010)^2)
    p = _two_weak_points(0.010, 0.090, 0.01, 0.01).predict(8)
    low = _work_floor(0.010, 0.01)
    assert p["step_lo_s"] == pytest.approx(low, rel=1e-6) and p["hi"] == pytest.approx(32 / low, rel=1e-6)


def test_one_stalled_step_does_not_unbound_the_interval():
    # a 1-rank run of 100 ms steps with one stall: robust spread 5%, SD 190% (the variation); weak, 4 per rank;
    # at 4 ranks: compute 0.100, sync 0.010 x 1.5 = 0.015, step 0.115; the SD's half-width exceeds the step,
    # so the lower bound is the work's: 0.100 - z sqrt((5% x 0.100)^2 + (3% x 0.100)^2), 5% the robust spread
    # (with the SD, 190%, it would be below zero: hi unbounded)
    p = _two_weak_points(0.100, 0.010, 1.9, 0.05).predict(4)
    low = _work_floor(0.100, 0.05)
    assert p["step_s"] == pytest.approx(0.115)
    assert p["step_lo_s"] == pytest.approx(low, rel=1e-6) and p["hi"] == pytest.approx(16 / low, rel=1e-6)
    assert p["step_hi_s"] > 0.115 + Z80 * 1.9 * 0.115  # the slow side keeps the SD

def test_cpu_ranks_past_the_hosts_cores_are_said_to_share_them():
    # CPU runs on a host of 8 cores, 2 torch threads a rank (their system_info): 4 ranks need 8 cores (fits),
    # 8 ranks need 16 (they would share); the forecast itself is the same as without the host's facts
    sessions = _group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8))
    plain = analyze(_group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8)), forecast_sizes=(4, 8))
    for s in sessions:  # runs that count no GPU, and their host's facts
        s.meta.gpu_count, s.meta.system_info = 0, {"cpu_count": 8, "torch_threads": 2}
    four, eight = analyze(sessions, forecast_sizes=(4, 8)).rows("forecast")
    assert "cores" not in four.note
    assert eight.note.endswith("; 8 CPU ranks x 2 threads need 16 cores, the host has 8: they would share them, "
                               "and the forecast gives each its own")
    assert [four.samples_per_s, eight.samples_per_s] == [r.samples_per_s for r in plain.rows("forecast")]


def test_a_one_rank_runs_default_threads_do_not_stand_for_the_ranks_of_a_launcher():
    # 16 cores; the 1-rank run started with plain python has torch's default, 16 threads; the 2-rank run's ranks
    # 1 each: 4 ranks need 4 x 1 = 4 cores (fit), not 4 x 16 (global batch 64: 32 ranks split it)
    sessions = _group(("one", 1, [0.4] * 20, 64), ("two", 2, [0.25] * 20, 64))
    for s, threads in zip(sessions, (16, 1), strict=True):
        s.meta.gpu_count, s.meta.system_info = 0, {"cpu_count": 16, "torch_threads": threads}
    four, thirty_two = analyze(sessions, forecast_sizes=(4, 32)).rows("forecast")
    assert "cores" not in four.note
    assert thirty_two.note.endswith("; 32 CPU ranks x 1 thread need 32 cores, the host has 16: they would share "
                                    "them, and the forecast gives each its own")


def test_gpu_runs_say_nothing_of_the_hosts_cores():
    sessions = _group(("one", 1, [0.4] * 20, 8), ("two", 2, [0.25] * 20, 8))
    for s in sessions:
        s.meta.gpu_count, s.meta.nproc_per_node, s.meta.system_info = s.meta.world_size, 8, {"cpu_count": 2}
    (row,) = analyze(sessions, forecast_sizes=(4,)).rows("forecast")
    assert row.samples_per_s is not None and "cores" not in row.note
