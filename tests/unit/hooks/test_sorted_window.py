"""The detectors' running median (``SortedWindow``) against ``statistics.median`` of the same last values."""

from __future__ import annotations

import random
import statistics
from collections import deque

import pytest

from trainer_hooks.findings import SortedWindow


@pytest.mark.parametrize("size", [1, 2, 5, 20, 50])
def test_the_running_median_is_the_median_of_the_last_values(size):
    rng = random.Random(size)
    window, last = SortedWindow(size), deque(maxlen=size)
    for _ in range(400):
        # repeated values too (a clock's equal step times, a flat loss)
        value = rng.choice([0.5, 1.0, rng.uniform(0, 2), rng.expovariate(1.0)])
        window.append(value)
        last.append(value)
        assert list(window) == list(last)
        assert window.median() == statistics.median(last)
        assert window.sorted == sorted(last)


def test_an_empty_window_has_no_median():
    with pytest.raises(ValueError):
        SortedWindow(3).median()
