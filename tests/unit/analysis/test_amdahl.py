"""The Amdahl fit against the law and numpy: speedups made from a known serial fraction give
it back; noisy ones give numpy's least-squares answer of 1/S - 1/p = s (1 - 1/p), and R² and
the Karp-Flatt metric computed here from their definitions."""

from __future__ import annotations

import numpy as np
import pytest

from logkit.analysis.kernels.amdahl import amdahl_fit
from logkit.analysis.thresholds import MIN_R2


def _amdahl(s: float, p: float) -> float:
    return 1 / (s + (1 - s) / p)


def test_exact_amdahl_speedups_give_their_serial_fraction_and_predictions():
    s = 0.1
    points = [(ws, float(ws), _amdahl(s, ws)) for ws in (2, 4, 8)]
    fit = amdahl_fit(points, base_ws=1, group="g")
    assert fit.serial_fraction == pytest.approx(s, abs=1e-12) and fit.serial_fraction_raw == pytest.approx(s)
    assert fit.parallel_fraction == pytest.approx(0.9) and fit.r2 == pytest.approx(1.0)
    assert fit.karp_flatt == pytest.approx({2: s, 4: s, 8: s})  # e = (1/S - 1/p) / (1 - 1/p)
    assert fit.predicted == pytest.approx({16: _amdahl(s, 16), 32: _amdahl(s, 32)})
    assert (fit.points, fit.baseline_world_size, fit.group, fit.reliable, fit.note) == (4, 1, "g", True, None)
    assert fit.superlinear_world_sizes == ()


def test_noisy_speedups_give_numpys_least_squares_and_r2():
    points = [(2, 2.0, 1.78), (4, 4.0, 3.05), (8, 8.0, 4.9)]
    fit = amdahl_fit(points, base_ws=1)
    p = np.array([2.0, 4.0, 8.0, 1.0])
    speed = np.array([1.78, 3.05, 4.9, 1.0])
    x, y = 1 - 1 / p, 1 / speed - 1 / p
    (s,), *_ = np.linalg.lstsq(x[:, None], y, rcond=None)  # through the origin: S(1) = 1
    fitted = 1 / (s + (1 - s) / p)
    r2 = 1 - ((speed - fitted) ** 2).sum() / ((speed - speed.mean()) ** 2).sum()
    assert fit.serial_fraction == pytest.approx(s, rel=1e-12) and fit.r2 == pytest.approx(r2, rel=1e-12)
    assert fit.karp_flatt[8] == pytest.approx((1 / 4.9 - 1 / 8) / (1 - 1 / 8))
    assert r2 > MIN_R2 and fit.reliable and fit.predicted[16] == pytest.approx(1 / (s + (1 - s) / 16))


def test_a_baseline_of_two_ranks_scales_by_the_rank_ratio():
    s = 0.2
    points = [(4, 2.0, _amdahl(s, 2)), (8, 4.0, _amdahl(s, 4))]
    fit = amdahl_fit(points, base_ws=2)
    assert fit.serial_fraction == pytest.approx(s) and fit.baseline_world_size == 2
    # 2x and 4x the largest run (8 ranks): 8 and 16 times the 2-rank baseline
    assert fit.predicted == pytest.approx({16: _amdahl(s, 8), 32: _amdahl(s, 16)})


def test_points_without_a_speedup_are_left_out():
    s = 0.1
    points = [(2, 2.0, _amdahl(s, 2)), (4, 4.0, _amdahl(s, 4)), (8, 8.0, 0.0), (16, 0.0, 3.0), (8, 8.0, None)]
    assert amdahl_fit(points, base_ws=1).points == 3  # two usable runs and the baseline
    assert amdahl_fit([(2, 2.0, 1.8), (4, 4.0, 0.0)], base_ws=1) is None  # < 3 world sizes left


def test_a_negative_serial_fraction_is_clipped_and_said():
    # speedups at the rank ratio or above (not superlinear by more than rounding): the raw fit is negative
    fit = amdahl_fit([(2, 2.0, 2.0), (4, 4.0, 4.0 * (1 + 1e-10))], base_ws=1)
    assert fit.serial_fraction_raw < 0 and fit.serial_fraction == 0.0 and not fit.reliable
    assert "the least-squares serial fraction is negative" in fit.note and fit.predicted is None


def test_notes_say_why_a_fit_predicts_nothing():
    # a poor fit says its R² and the threshold; superlinear points say where they are
    fit = amdahl_fit([(2, 2.0, 1.2), (4, 4.0, 3.6), (8, 8.0, 2.0)], base_ws=1)
    assert fit.r2 < MIN_R2 and f"poor fit (R² {fit.r2:.2f} < {MIN_R2:g})" in fit.note
    assert fit.note.endswith(": no prediction")
    superlinear = amdahl_fit([(2, 2.0, 2.3), (4, 4.0, 4.4)], base_ws=1)
    assert superlinear.superlinear_world_sizes == (2, 4)
    assert "superlinear point(s) at 2, 4 ranks (speedup above the rank ratio)" in superlinear.note


def _least_squares(points):
    """Serial fraction, fitted speedups and R² of ``points`` plus the baseline's (1, 1), from the
    definitions with numpy."""
    p = np.array([x[1] for x in points] + [1.0])
    speed = np.array([x[2] for x in points] + [1.0])
    x, y = 1 - 1 / p, 1 / speed - 1 / p
    (raw,), *_ = np.linalg.lstsq(x[:, None], y, rcond=None)
    s = min(max(raw, 0.0), 1.0)
    fitted = 1 / (s + (1 - s) / p)
    ss_tot = ((speed - speed.mean()) ** 2).sum()
    return raw, s, 1 - ((speed - fitted) ** 2).sum() / ss_tot if ss_tot > 0 else None


def test_linear_speedups_fit_a_serial_fraction_of_zero_and_are_reliable(monkeypatch):
    # the raw fraction is exactly 0: not negative, so nothing is said and the fit predicts
    fit = amdahl_fit([(2, 2.0, 2.0), (4, 4.0, 4.0)], base_ws=1)
    assert (fit.serial_fraction_raw, fit.serial_fraction, fit.r2) == (0.0, 0.0, 1.0)
    assert fit.reliable and fit.note is None and fit.predicted == {8: 8.0, 16: 16.0}
    assert fit.superlinear_world_sizes == ()  # speedup = p is linear, not superlinear
    # R² exactly at the threshold is good enough (poor means below it)
    from logkit.analysis.kernels import amdahl

    monkeypatch.setattr(amdahl, "MIN_R2", 1.0)
    assert amdahl_fit([(2, 2.0, 2.0), (4, 4.0, 4.0)], base_ws=1).reliable


def test_a_speedup_within_rounding_of_the_rank_ratio_is_not_superlinear():
    fit = amdahl_fit([(2, 2.0, 1.9), (4, 4.0, 4.0 * (1 + 1e-9))], base_ws=1)  # at the 1e-9 tolerance
    assert fit.superlinear_world_sizes == ()
    fit = amdahl_fit([(2, 2.0, 1.9), (4, 4.0, 4.0 * (1 + 1e-8))], base_ws=1)
    assert fit.superlinear_world_sizes == (4,)


def test_a_strongly_serial_job_still_gets_its_r2():
    # serial fraction 0.5: speedups 1.33, 1.6, 1.78 spread little (total sum of squares < 1)
    points = [(ws, float(ws), _amdahl(0.5, ws)) for ws in (2, 4, 8)]
    fit = amdahl_fit(points, base_ws=1)
    assert fit.serial_fraction == pytest.approx(0.5) and fit.r2 == pytest.approx(1.0) and fit.reliable


def test_no_speedup_at_all_has_no_r2_and_says_so():
    fit = amdahl_fit([(2, 2.0, 1.0), (4, 4.0, 1.0)], base_ws=1)  # every point at 1: R² undefined
    assert fit.r2 is None and fit.serial_fraction == 1.0
    assert fit.note == "poor fit (R² n/a < 0.9): no prediction" and fit.predicted is None


def test_slowdowns_are_fitted_and_clip_the_serial_fraction_at_one():
    points = [(2, 2.0, 0.9), (4, 4.0, 0.8)]
    fit = amdahl_fit(points, base_ws=1)
    raw, s, r2 = _least_squares(points)
    assert raw > 1 and fit.serial_fraction_raw == pytest.approx(raw) and fit.serial_fraction == s == 1.0
    assert fit.points == 3 and fit.r2 == pytest.approx(r2) and fit.karp_flatt == pytest.approx(
        {2: (1 / 0.9 - 1 / 2) / (1 - 1 / 2), 4: (1 / 0.8 - 1 / 4) / (1 - 1 / 4)})


def test_a_run_with_the_baselines_rank_count_is_a_point_but_has_no_karp_flatt():
    points = [(1, 1.0, 0.95), (2, 2.0, 1.8), (4, 4.0, 3.2)]  # an A/B run at p = 1 counts in R²
    fit = amdahl_fit(points, base_ws=1)
    raw, s, r2 = _least_squares(points)
    assert fit.points == 4 and fit.serial_fraction == pytest.approx(s) and fit.r2 == pytest.approx(r2)
    assert set(fit.karp_flatt) == {2, 4}  # e(p) is undefined at p = 1


def test_every_reason_is_in_the_note():
    points = [(2, 2.0, 2.3), (4, 4.0, 2.0)]
    fit = amdahl_fit(points, base_ws=1)
    _, _, r2 = _least_squares(points)
    assert fit.note == ("superlinear point(s) at 2 ranks (speedup above the rank ratio): Amdahl's law cannot "
                        f"describe them; poor fit (R² {r2:.2f} < 0.9): no prediction")
