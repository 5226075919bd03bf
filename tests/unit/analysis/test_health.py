"""Training health: NaN/Inf, divergence, loss parity aligned by samples seen."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logkit.analysis.kernels.health import divergence, loss_parity, session_health
from logkit.run.load import load_session
from tests.support.analysis_synth import event_rows, session, step_rows
from tests.support.launch import fixture_session


def test_nan_steps_from_inf_and_events():
    losses = [3.0, 2.9, math.inf, 2.7]
    s = session("n", steps=step_rows([0.5] * 4, losses=losses),
                events=event_rows({"kind": "nan_detected", "rank": 1, "step": 7, "source": "x.log:3"}))
    h = session_health(s)
    assert [(n.step, n.rank) for n in h.nan_steps] == [(3, 0), (7, 1)]
    assert h.final_loss == 2.7


def test_gpu_prefixed_nan_report():
    h = session_health(load_session("sample_logs/console/stdout_gpu_prefixed.log"))
    assert [n.step for n in h.nan_steps] == [21]


def test_divergence_found_and_not_on_a_healthy_curve():
    x = np.arange(200)
    healthy = 3 * np.exp(-x / 50) + 1 + 0.01 * np.random.default_rng(0).standard_normal(200)
    assert divergence(healthy) is None
    diverging = np.concatenate([healthy[:120], healthy[119] + 0.05 * np.arange(80)])
    d = divergence(diverging)
    assert d is not None and d.final_loss_smoothed > d.min_loss
    assert divergence(healthy[:5]) is None  # too short


def test_loss_parity_aligned_by_samples():
    # baseline: batch 8, 40 steps; candidate: batch 16, 20 steps: the same samples seen
    base_loss = [3.0 - 0.05 * i for i in range(40)]  # loss as a function of samples: 3 - 0.05 * samples / 8
    cand_loss = [3.0 - 0.05 * (2 * (i + 1) - 1) + 0.01 for i in range(20)]
    base = session("b", steps=step_rows([0.5] * 40, batch=8, losses=base_loss))
    cand = session("c", world_size=2, steps=step_rows([0.5] * 20, batch=16, losses=cand_loss))
    p = loss_parity(base, cand)
    assert p.aligned_by == "samples seen"
    assert p.final_loss_diff == pytest.approx(cand_loss[-1] - base_loss[-1])
    assert p.final_loss_rel_diff == pytest.approx((cand_loss[-1] - base_loss[-1]) / base_loss[-1])
    # independent alignment: baseline points at samples 16..320, candidate interpolated there
    bx = 8 * np.arange(1, 41)
    cx = 16 * np.arange(1, 21)
    grid = (bx >= 16) & (bx <= 320)
    diff = np.interp(bx[grid], cx, cand_loss) - np.array(base_loss)[grid]
    assert p.points == grid.sum()
    assert p.max_abs_diff_aligned == pytest.approx(np.abs(diff).max())
    assert p.max_abs_diff_aligned == pytest.approx(0.01)


def test_real_fixture_parity():
    b = load_session(fixture_session(1))
    c = load_session(fixture_session(2))
    p = loss_parity(b, c)
    bl = b.steps.sort_values("step")["loss"].to_numpy()
    c0 = c.steps[c.steps["rank"] == 0].sort_values("step")["loss"].to_numpy()
    assert p.final_loss_diff == pytest.approx(c0[-1] - bl[-1])
    bx, cx = 16 * np.arange(1, len(bl) + 1), 32 * np.arange(1, len(c0) + 1)
    grid = (bx >= cx[0]) & (bx <= min(bx[-1], cx[-1]))
    diff = np.interp(bx[grid], cx, c0) - bl[grid]
    assert p.points == grid.sum() and p.max_abs_diff_aligned == pytest.approx(np.abs(diff).max())


def test_parity_and_health_use_the_runs_final_loss_when_lines_are_sampled():
    from logkit.analysis.analyze import analyze

    def sampled(sid, ws, final, start):
        rows = step_rows([0.5] * 4, batch=8 * ws, losses=[3.0, 2.5, 2.2, 2.0])
        for r, step in zip(rows, (25, 50, 75, 100), strict=True):
            r["step"] = step
        return session(sid, world_size=ws, steps=rows, total_steps=1000, final_loss=final, steps_per_second=2.0,
                       samples_per_second=16.0 * ws, model="m", start_time=start)

    a = analyze([sampled("b", 1, 1.25, "2026-01-01T00:00:00+00:00"), sampled("c", 2, 1.20, "2026-01-01T01:00:00+00:00")])
    (p,) = a.loss_parity
    assert p.final_loss_diff == pytest.approx(1.20 - 1.25)  # not the last sampled line's 2.0 - 2.0
    assert a.health["b"].final_loss == 1.25 and "sampled" in a.health["b"].final_loss_from
