"""Shares of a step's wall time and the judgements made of them (``kernels/shares.py``), on both sides
of every edge, and the gradient-sync share that overlapping buckets cannot push above the step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logkit.analysis.kernels.communication import communication_table
from logkit.analysis.kernels.shares import comm_bound, data_heavy, of_step
from logkit.analysis.thresholds import COMM_BOUND_SHARE, DATA_HEAVY
from tests.support.analysis_synth import comm_rows, session, step_rows

EPS = 1e-9


def test_a_share_is_of_wall_time_clipped_and_unknown_without_a_step():
    assert of_step(0.25, 1.0) == 0.25
    assert of_step(1.5, 1.0) == 1.0  # a part longer than its step counts as the whole step
    assert math.isnan(of_step(0.1, 0.0)) and math.isnan(of_step(0.1, float("nan")))
    got = of_step(np.array([0.1, 3.0, np.nan, 0.2]), np.array([0.4, 2.0, 1.0, -1.0]))
    np.testing.assert_array_equal(np.isnan(got), [False, False, True, True])
    np.testing.assert_allclose(got[:2], [0.25, 1.0])


@pytest.mark.parametrize(("judge", "edge"), [(comm_bound, COMM_BOUND_SHARE), (data_heavy, DATA_HEAVY)])
def test_each_judgement_flips_at_its_threshold(judge, edge):
    assert judge(edge) and judge(edge + EPS) and not judge(edge - EPS)
    assert not judge(float("nan"))
    np.testing.assert_array_equal(judge(np.array([edge - EPS, edge, np.nan])), [False, True, False])


def test_overlapping_buckets_never_make_the_sync_share_exceed_the_step():
    # three buckets of 40 ms each in flight together within steps of 100 ms: summed 120 ms per step
    steps = step_rows([0.1] * 4)
    comm = []
    for b in range(3):
        rows = comm_rows([4e6] * 4, [40.0] * 4)
        comm += [dict(r, bucket=b) for r in rows]
    t = communication_table(session("o", world_size=2, steps=steps, comm=comm)).iloc[0]
    assert t["count"] == 12 and t["matched_steps"] == 4
    assert t["sync_share_of_step_time"] == pytest.approx(1.0)  # not 1.2: at most the step itself
    # below the step time, nothing is cut: 20 ms + 20 ms per 100 ms step
    half = [dict(r, bucket=b) for b in range(2) for r in comm_rows([4e6] * 4, [20.0] * 4)]
    t = communication_table(session("h", world_size=2, steps=steps, comm=half)).iloc[0]
    assert t["sync_share_of_step_time"] == pytest.approx(0.4)
