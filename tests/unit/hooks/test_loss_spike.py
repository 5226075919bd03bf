"""The loss-spike rule against its definition, computed here with numpy: a loss is a spike when
its log is above the log of the window's median by more than 3 robust deviations (1.4826 x the
median absolute deviation of the logs from that centre, floored at log 1.05). The spike used sits at 10
deviations: a factor of 3 finds it, a factor of 30 would not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logkit.schema import SessionFiles
from tests.support.launch import read_jsonl
from trainer_hooks.findings import LossSpikeDetector
from trainer_hooks.session_logger import SessionLogger

FACTOR = 3.0  # the README's "median x e^(3 robust SD)"
WINDOW = 20
# a healthy noisy loss: log-normal around 2.0 with a spread of 0.1 on the log scale, well above
# the floor (log 1.05 = 0.049), so the threshold is set by the MAD, not by the floor
HEALTHY = [float(x) for x in 2.0 * np.exp(0.1 * np.random.default_rng(4).standard_normal(WINDOW))]


def _threshold(window, factor=FACTOR) -> tuple[float, float, float]:
    """(median, robust deviation on the log scale, threshold on the loss scale), from the definition."""
    median = float(np.median(window))
    # deviations from the log of the median (README: "median x e^(3 robust SD)")
    logs = np.log(np.asarray(window, dtype=float))
    deviation = max(1.4826 * float(np.median(np.abs(logs - math.log(median)))), math.log(1.05))
    return median, deviation, median * math.exp(factor * deviation)


MEDIAN, DEVIATION, THRESHOLD = _threshold(HEALTHY)
# 10 deviations above the median: between 3 and 30 of them
SPIKE = MEDIAN * math.exp(10 * DEVIATION)


def test_the_window_is_set_by_its_mad_not_by_the_floor():
    assert DEVIATION > 1.5 * math.log(1.05)
    assert MEDIAN * math.exp(3 * DEVIATION) < SPIKE < MEDIAN * math.exp(30 * DEVIATION)


def _feed(detector, losses):
    return [detector.check(x) for x in losses]


def test_a_spike_of_ten_deviations_is_found_at_the_default_factor():
    d = LossSpikeDetector()  # the emitter's defaults: factor 3, a window of 20
    assert _feed(d, HEALTHY) == [None] * WINDOW  # the healthy curve itself has no spike
    finding = d.check(SPIKE)
    assert finding is not None and finding["kind"] == "loss_spike" and finding["value"] == SPIKE
    assert finding["threshold"] == pytest.approx(THRESHOLD, rel=1e-9)
    assert finding["median"] == pytest.approx(MEDIAN, rel=1e-12)


def test_the_threshold_moves_with_the_factor():
    # just above and just below the threshold computed here
    above, below = LossSpikeDetector(), LossSpikeDetector()
    _feed(above, HEALTHY)
    _feed(below, HEALTHY)
    assert above.check(THRESHOLD * 1.001) is not None
    assert below.check(THRESHOLD * 0.999) is None
    lax = LossSpikeDetector(factor=30.0)
    _feed(lax, HEALTHY)
    assert lax.check(SPIKE) is None  # a factor of 30 misses a 10-deviation spike


def test_only_the_last_window_of_losses_counts():
    # 20 much higher losses first, then the healthy window: the old ones have left the window
    d = LossSpikeDetector()
    _feed(d, [x * 50 for x in HEALTHY] + HEALTHY)
    assert d.check(SPIKE) is not None


def test_a_flat_window_uses_the_floor():
    flat = [2.0] * WINDOW
    median, deviation, threshold = _threshold(flat)
    assert deviation == math.log(1.05) and threshold == pytest.approx(2.0 * 1.05**3)
    d = LossSpikeDetector()
    _feed(d, flat)
    assert d.check(threshold * 0.999) is None
    assert d.check(threshold * 1.001) is not None


def test_a_moderate_spike_through_the_session_logger(tmp_path):
    """The emitter in-process with its default settings: the healthy window, then the spike at
    step 21; the anomaly record in the JSONL stream has the value, median and threshold above."""
    log = SessionLogger(log_dir=tmp_path, gpu_snapshot_interval=0)
    log.start(per_device_batch_size=4, max_steps=WINDOW + 2)
    losses = HEALTHY + [SPIKE, MEDIAN]
    for step, loss in enumerate(losses, start=1):
        log.step_begin()
        log.step_end(step, loss=loss, learning_rate=1e-4)
    log.end()
    records = read_jsonl(tmp_path / log.session_id / SessionFiles(log.session_id).rank_jsonl(0))
    spikes = [r for r in records if r["type"] == "anomaly" and r["kind"] == "loss_spike"]
    assert [r["step"] for r in spikes] == [WINDOW + 1]
    (spike,) = spikes
    assert spike["value"] == SPIKE and spike["level"] == "WARNING"
    assert spike["threshold"] == pytest.approx(THRESHOLD, rel=1e-9)
    assert spike["median"] == pytest.approx(MEDIAN, rel=1e-12)
    assert f"Loss spike at step {WINDOW + 1}: {SPIKE:.4f}" in spike["message"]
