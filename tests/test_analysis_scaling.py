"""Scaling section: steady state, bootstrap interval, flags, Amdahl / Karp-Flatt fit."""

from __future__ import annotations

import numpy as np
import pytest

from logkit.analysis.analyze import analyze
from logkit.analysis.scaling_report import amdahl_fit, scaling_analysis
from logkit.analysis.steady import warmup_count
from logkit.ingest import load_sessions
from tests.analysis_synth import noisy, session, step_rows

FIXTURES = "sample_logs/qlora_tiny_cpu/logs"


def test_seed_example_from_summary_figures():
    # seed 000: 1200.5 s against 650.2 s for the same samples (1000 steps x batch 8) on 2 GPUs
    single = session("single", world_size=1, duration_s=1200.5, total_steps=1000, total_batch_size=8,
                     start_time="2024-12-06T14:00:00")
    multi = session("multi", world_size=2, duration_s=650.2, total_steps=1000, total_batch_size=8,
                    start_time="2024-12-06T14:30:22")
    (c,) = scaling_analysis([multi, single])["comparisons"]
    assert c["baseline"] == "single"
    assert round(c["speedup"], 2) == 1.85 and c["speedup"] == pytest.approx(1200.5 / 650.2)
    assert round(c["scaling_efficiency"] * 100, 1) == 92.3
    assert c["steady_state"] is False and c["speedup_ci"] is None and c["steady_speedup"] is None
    assert c["flags"] == []


def test_warmup_found_and_left_out():
    times = noisy(200, 0.5, 0.005, warm=(3.0, 1.5, 0.9))
    assert warmup_count(np.array(times)) == 3
    assert warmup_count(np.array(noisy(200, 0.5, 0.005))) == 0
    assert warmup_count(np.array([0.5, 0.5, 0.5])) == 0  # too short to tell


def test_steady_speedup_and_ci():
    bt = noisy(300, 0.50, 0.01, seed=1, warm=(5.0, 2.0))
    ct = noisy(300, 0.30, 0.01, seed=2, warm=(6.0,))
    base = session("b", steps=step_rows(bt, batch=8), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows(ct, batch=8), start_time="2026-01-01T01:00:00+00:00")
    out = scaling_analysis([base, cand])
    rows = {r["session_id"]: r for r in out["sessions"]}
    assert (rows["b"]["warmup_steps"], rows["c"]["warmup_steps"]) == (2, 1)
    steady_b, steady_c = 8 * 298 / sum(bt[2:]), 8 * 299 / sum(ct[1:])
    assert rows["b"]["steady_samples_per_second"] == pytest.approx(steady_b)
    (c,) = out["comparisons"]
    assert c["speedup"] == pytest.approx((8 * 300 / sum(ct)) / (8 * 300 / sum(bt)))  # skeleton basis kept
    assert c["steady_speedup"] == pytest.approx(steady_c / steady_b)
    assert c["steady_scaling_efficiency"] == pytest.approx(steady_c / steady_b / 2)
    lo, hi = c["speedup_ci"]
    assert lo < c["steady_speedup"] < hi and hi - lo < 0.1
    assert c["ci_level"] == 0.95 and c["steady_state"] is True
    assert [f["kind"] for f in c["flags"]] == []  # 1.67x on 2 ranks


def test_slowdown_flag_names_communication():
    base = session("b", steps=step_rows([0.5] * 50), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows([1.2] * 50), start_time="2026-01-01T01:00:00+00:00")
    (c,) = scaling_analysis([base, cand], {"c": {"sync_share": 0.6}})["comparisons"]
    (flag,) = c["flags"]
    assert flag["kind"] == "slowdown" and "communication-bound" in flag["cause"]


def test_superlinear_flag_names_batch_mismatch():
    base = session("b", steps=step_rows([0.5] * 50, batch=8), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows([0.5] * 50, batch=24), start_time="2026-01-01T01:00:00+00:00")
    (c,) = scaling_analysis([base, cand])["comparisons"]
    assert c["regime"] == "mixed" and c["speedup"] == pytest.approx(3.0)
    (flag,) = c["flags"]
    assert flag["kind"] == "superlinear" and "not comparable" in flag["cause"]


def test_amdahl_fit_recovers_serial_fraction():
    s = 0.1
    sp = {n: 1 / (s + (1 - s) / n) for n in (2, 4, 8)}
    fit = amdahl_fit([(n, float(n), v) for n, v in sp.items()], base_ws=1)
    assert fit["serial_fraction"] == pytest.approx(s)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["karp_flatt"] == {n: pytest.approx(s) for n in (2, 4, 8)}
    assert fit["predicted"] == {16: pytest.approx(1 / (s + (1 - s) / 16)), 32: pytest.approx(1 / (s + (1 - s) / 32))}
    assert amdahl_fit([(2, 2.0, 1.8)], base_ws=1) is None  # two world sizes: no fit


def test_fit_from_sessions_and_karp_flatt():
    sessions = [session("w1", steps=step_rows([1.0] * 20, batch=8), start_time="2026-01-01T00:00:00+00:00")]
    for n, t in ((2, 0.55), (4, 0.30)):
        sessions.append(session(f"w{n}", world_size=n, steps=step_rows([t] * 20, batch=8),
                                start_time=f"2026-01-01T0{n}:00:00+00:00"))
    out = scaling_analysis(sessions)
    fit = out["fit"]
    # Karp-Flatt computed here from the speedups 1/0.55 and 1/0.30
    for n, t in ((2, 0.55), (4, 0.30)):
        assert fit["karp_flatt"][n] == pytest.approx((t - 1 / n) / (1 - 1 / n))
    x = np.array([0.5, 0.75])
    y = np.array([0.55 - 0.5, 0.30 - 0.25])
    assert fit["serial_fraction"] == pytest.approx((x * y).sum() / (x * x).sum())
    assert set(fit["predicted"]) == {8, 16}


def test_real_fixture_comparison():
    sessions = load_sessions(FIXTURES)
    a = analyze(sessions)
    (c,) = a.scaling["comparisons"]
    steps = {s.session_id: s.steps for s in sessions}
    single, multi = (steps[c["baseline"]], steps[c["candidate"]])
    base = 16 * len(single) / single["step_time_s"].sum()
    m0 = multi[multi["rank"] == 0]
    cand = 32 * len(m0) / m0["step_time_s"].sum()
    assert c["speedup"] == pytest.approx(cand / base)
    assert c["regime"] == "weak" and c["samples_ratio"] == pytest.approx(2.0)
    assert c["speedup_ci"][0] < c["steady_speedup"] < c["speedup_ci"][1]
    assert a.scaling["definitions"]["steady_speedup"]
