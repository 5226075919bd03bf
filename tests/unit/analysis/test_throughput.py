"""Throughput, warm-up and the bootstrap interval, against expectations built by hand or simulated."""

from __future__ import annotations

import numpy as np
import pytest

from logkit.analysis.kernels.scaling import scaling_analysis
from logkit.analysis.kernels.throughput import step_throughput, throughput, warmup_count
from tests.support.analysis_synth import session, step_rows
from tests.support.oracles import warmup_oracle


def test_warmup_tolerance_is_five_percent_of_the_reference():
    # steady at exactly 1.0 s: 1.2, 1.10 and 1.06 s are above 1.05 (warm-up), 1.04 s is within it
    times = [1.2, 1.10, 1.06, 1.04] + [1.0] * 96
    assert warmup_count(np.array(times)) == 3 == warmup_oracle(times)
    assert warmup_count(np.array([1.06] + [1.0] * 99)) == 1  # 6% above: warm-up
    assert warmup_count(np.array([1.049] + [1.0] * 99)) == 0  # 4.9% above: steady


def test_warmup_reference_is_the_median_of_the_second_half():
    # the first half at 1.08 s, the second at 1.0 s: the whole run's median (1.04) would call the
    # first half steady; the second half's (1.0) makes it warm-up, up to the half-run cap
    times = [1.08] * 50 + [1.0] * 50
    assert warmup_count(np.array(times)) == 50 == warmup_oracle(times)


def test_warmup_tolerance_widens_with_the_spread_of_the_second_half():
    # a noisy steady state: 3 robust SD of it, not 5%, is the tolerance
    rng = np.random.default_rng(3)
    steady = list(1.0 + 0.05 * rng.standard_normal(190))
    times = [1.5, 1.3, 1.12] + steady
    assert warmup_count(np.array(times)) == warmup_oracle(times)


@pytest.mark.parametrize("seed", range(20))
def test_warmup_matches_the_definition_on_random_runs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 400))
    warm = list(rng.uniform(1.0, 4.0, int(rng.integers(0, 6))))
    times = warm + list(rng.uniform(0.4, 0.6) + rng.uniform(0, 0.05) * rng.standard_normal(n))
    assert warmup_count(np.array(times)) == warmup_oracle(times)


def test_throughput_is_samples_over_time_not_a_mean_of_rates():
    batch, time = [8, 8, 16], [1.0, 1.0, 4.0]
    assert throughput(batch, time) == pytest.approx(32 / 6.0)  # a mean of the rates would say 6.0
    assert throughput([8, None], [1.0, 1.0]) is None  # an unknown batch: no figure
    rows = step_rows([0.5, 0.25], batch=8)
    rows[1]["samples_per_s"] = 30.0  # a logged rate wins over the derived one
    s = session("t", steps=rows)
    assert list(step_throughput(s.steps)) == [16.0, 30.0]


def test_the_95_percent_interval_covers_the_true_speedup_about_95_percent_of_the_time():
    """Simulated pairs of runs with a known speedup: i.i.d. step times, so the steady throughput's
    true value is batch / mean step time and the true speedup their ratio."""
    true_base, true_cand = 8 / 0.50, 8 / 0.30  # batch 8, mean step times 0.50 s and 0.30 s
    truth = true_cand / true_base
    covered, widths = 0, []
    trials = 200
    for k in range(trials):
        rng = np.random.default_rng(10_000 + k)
        bt = list(rng.gamma(25.0, 0.50 / 25.0, 120))  # mean 0.50 s, sd 0.10 s
        ct = list(rng.gamma(25.0, 0.30 / 25.0, 120))
        base = session("b", steps=step_rows(bt, batch=8), start_time="2026-01-01T00:00:00+00:00")
        cand = session("c", world_size=2, steps=step_rows(ct, batch=8), start_time="2026-01-01T01:00:00+00:00")
        (c,) = scaling_analysis([base, cand]).comparisons
        lo, hi = c.speedup_ci
        covered += lo <= truth <= hi
        widths.append(hi - lo)
    coverage = covered / trials
    # binomial sd at 95% over 200 trials is 1.5%: [88%, 99%] fails a 50% (quartile) interval for sure
    assert 0.88 <= coverage <= 0.99, coverage
    assert np.median(widths) > 0


def test_the_bootstrap_resamples_whole_blocks_and_is_reproducible():
    from logkit.analysis.kernels.throughput import SteadyState, bootstrap_throughput

    rng = np.random.default_rng(3)
    time = rng.uniform(0.5, 1.5, 500)
    batch = np.full(500, 8.0)
    state = SteadyState(batch=batch, time=time)
    draws = bootstrap_throughput(state, n_boot=400, seed=11)
    assert draws.shape == (400,)
    np.testing.assert_array_equal(draws, bootstrap_throughput(state, n_boot=400, seed=11))  # same seed, same draws
    assert not np.array_equal(draws, bootstrap_throughput(state, n_boot=400, seed=12))
    # 500 steps in 200 blocks (of 2 or 3 steps); the resampled throughput spreads around the
    # whole run's (sum of batches / sum of times), by about its block standard error
    blocks = np.add.reduceat(time, (np.arange(200) * 500) // 200)
    sizes = np.add.reduceat(batch, (np.arange(200) * 500) // 200)
    whole = batch.sum() / time.sum()
    assert np.median(draws) == pytest.approx(whole, rel=0.01)
    ratio_se = whole * np.std(blocks / blocks.mean() - sizes / sizes.mean(), ddof=1) / np.sqrt(200)
    assert np.std(draws) == pytest.approx(ratio_se, rel=0.2)
    # each draw is a sum over 200 whole blocks drawn from all of them: the first block included
    lone = SteadyState(batch=np.array([1.0, 1.0, 1.0]), time=np.array([100.0, 1.0, 1.0]))
    assert min(bootstrap_throughput(lone, n_boot=200, seed=0)) == pytest.approx(3 / 300)
    assert bootstrap_throughput(SteadyState(batch=np.array([8.0]), time=np.array([1.0]))) is None
    assert bootstrap_throughput(SteadyState()) is None
    two = bootstrap_throughput(SteadyState(batch=np.array([8.0, 8.0]), time=np.array([1.0, 2.0])), n_boot=50)
    assert set(np.round(two, 9)) <= {8.0, 4.0, round(16 / 3, 9)}


# The warm-up rule's edges, each where the definition says which side wins; every expected count
# is the oracle's too.


def test_warmup_needs_four_steps():
    assert warmup_count(np.array([3.0, 1.0, 1.0])) == 0 == warmup_oracle([3.0, 1.0, 1.0])
    assert warmup_count(np.array([3.0, 1.0, 1.0, 1.0])) == 1 == warmup_oracle([3.0, 1.0, 1.0, 1.0])


def test_a_step_exactly_at_the_tolerance_is_steady():
    ref = 2.0
    edge = ref + 0.05 * ref  # "within" the tolerance: at it counts
    times = [edge] + [ref] * 49  # w = 1: the step alone decides
    assert warmup_count(np.array(times)) == 0 == warmup_oracle(times)
    assert warmup_count(np.array([np.nextafter(edge, 3.0)] + [ref] * 49)) == 1


def test_the_robust_tolerance_is_three_scaled_mads():
    # the second half alternates 0.98 / 1.02 (25 of each): median 1.0, MAD 0.02, so the tolerance
    # is 3 x 1.4826 x 0.02 = 0.089 (above 5%): 1.10 s is warm-up, 1.08 s is steady
    steady = [0.98, 1.02] * 49 + [0.98]
    assert warmup_count(np.array([1.10] + steady)) == 1 == warmup_oracle([1.10] + steady)
    assert warmup_count(np.array([1.08] + steady)) == 0 == warmup_oracle([1.08] + steady)


def test_the_window_grows_with_the_run():
    # one steady-looking step between slow ones: steady for a window of 1 (n < 100), not for a
    # window of 2 (n = 100: the median of 1.0 and 2.0 is 1.5)
    short = [2.0, 1.0, 2.0] + [1.0] * 97
    assert len(short) == 100 and warmup_count(np.array(short)) == 3 == warmup_oracle(short)
    assert warmup_count(np.array(short[:99])) == 1 == warmup_oracle(short[:99])
    # the window stops at 10 steps (n >= 550): a window of 10 with five slow steps has median 1.5,
    # one of 11 would end on a fast step and pass
    long = [2.0] + [1.0] * 5 + [2.0] * 5 + [1.0] * 589
    assert warmup_count(np.array(long)) == 11 == warmup_oracle(long)


def test_the_reference_is_the_second_half_not_the_last_two_thirds():
    # slow steps (2.0 s) in the third sixth of the run would raise a reference taken from the last
    # two thirds to 1.03 s, and its tolerance with it, making the 1.1 s start steady
    second_half = [1.0, 1.03] * 29 + [1.0, 1.0]
    times = [1.1] * 10 + [1.0] * 30 + [2.0] * 20 + second_half
    assert len(times) == 120 and warmup_count(np.array(times)) == 10 == warmup_oracle(times)


def test_warmup_is_at_most_half_the_run_even_when_nothing_settles_in_it():
    # nothing in the first half is steady: the count is n // 2 (50 of 101), an integer
    times = [2.0] * 61 + [1.0] * 40
    k = warmup_count(np.array(times))
    assert k == 50 == warmup_oracle(times) and isinstance(k, int)
    # the first steady step at the middle itself is found
    times = [2.0] * 49 + [1.0] * 51
    assert warmup_count(np.array(times)) == 49 == warmup_oracle(times)


def test_a_step_of_zero_seconds_has_no_derived_rate():
    s = session("t", steps=step_rows([0.0, 0.5], batch=8))
    rates = step_throughput(s.steps)
    assert np.isnan(rates.iloc[0]) and rates.iloc[1] == 16.0


def test_an_unknown_batch_in_any_column_type_gives_no_throughput():
    import pandas as pd

    for batch in ([8, None], [8, pd.NA], pd.Series([8, pd.NA], dtype=object), pd.Series([8, None], dtype="Int64")):
        assert throughput(batch, [1.0, 1.0]) is None
    assert throughput(pd.Series([8, 16], dtype="Int64"), np.array([1.0, 3.0])) == 6.0


def test_steady_state_of_four_steps_and_its_counts():
    from logkit.analysis.kernels.throughput import steady_state

    st = steady_state(session("t", steps=step_rows([3.0, 1.0, 1.0, 1.0], batch=8)))
    assert (st.warmup_steps, st.steady_steps) == (1, 3)
    assert st.samples_per_second == 24 / 3.0 and st.steps_per_second == 3 / 3.0
    assert steady_state(session("t", steps=step_rows([3.0, 1.0, 1.0], batch=8))).steady_steps == 0


def test_steady_state_without_a_logged_batch():
    from logkit.analysis.kernels.throughput import steady_state

    rows = step_rows([3.0, 0.5, 0.5, 0.5, 0.5], batch=None)
    st = steady_state(session("t", steps=rows))  # no batch anywhere: a step rate, no samples/s
    assert (st.warmup_steps, st.steady_steps, st.samples_per_second) == (1, 4, None)
    assert st.steps_per_second == 4 / 2.0 and st.batch is None
    st = steady_state(session("t", steps=rows), default_batch=16)  # the run's batch fills in
    assert (st.warmup_steps, st.steady_steps) == (1, 4)
    assert st.samples_per_second == 16 * 4 / 2.0 and list(st.batch) == [16.0] * 4


def test_the_half_run_cap_is_an_integer_count_for_an_even_run_too():
    # 100 steps, none of the first 50 steady: the count is 50, an int (not 50.0)
    times = [2.0] * 60 + [1.0] * 40
    k = warmup_count(np.array(times))
    assert k == 50 == warmup_oracle(times) and type(k) is int
