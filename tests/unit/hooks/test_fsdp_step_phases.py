"""An FSDP2 step's collectives read in one pass on CPU (``FsdpCommTimer.absorb``): each collective's
duration and the step's phases (compute, first gradient ready, time in collectives, reduce-scatters in
flight), against figures worked out by hand and against the per-collective tracker it replaces."""

from __future__ import annotations

import random

import pytest

from trainer_hooks.builder import RecordBuilder
from trainer_hooks.fsdp_comm import FsdpCommTimer
from trainer_hooks.settings import resolve_settings

T0 = 100.0  # the step's start (perf_counter seconds)
MS = 1e-3

# (unit, bytes, start, end, seq, op, phase) as the wrappers append them, in completion order: the
# backward all-gather of unit 0 (seq 4) completes before the reduce-scatter of unit 1 (seq 3)
STEP = [
    (0, 4096, T0 + 1 * MS, T0 + 3 * MS, 0, "all_gather", "forward"),
    (1, 2048, T0 + 4 * MS, T0 + 5 * MS, 1, "all_gather", "forward"),
    (1, 2048, T0 + 10 * MS, T0 + 12 * MS, 2, "all_gather", "backward"),
    (0, 4096, T0 + 16 * MS, T0 + 18 * MS, 4, "all_gather", "backward"),
    (1, 2048, T0 + 15 * MS, T0 + 20 * MS, 3, "reduce_scatter", "backward"),
    (0, 4096, T0 + 22 * MS, T0 + 25 * MS, 5, "reduce_scatter", "backward"),
]


def _timer(one_pass: bool = True) -> FsdpCommTimer:
    timer = FsdpCommTimer()
    timer.one_pass = one_pass
    return timer


def test_one_pass_figures_match_the_hand_count():
    ready, phases = _timer().absorb(7, list(STEP), T0, T0)
    # durations: each end minus its start
    assert [(r[2], r[3], r[4]) for r in ready] == [(op, phase, size) for _, size, _, _, _, op, phase in STEP]
    assert [r[5] for r in ready] == pytest.approx([2 * MS, 1 * MS, 2 * MS, 2 * MS, 5 * MS, 3 * MS])
    ((step, begin, compute, first_ready, sync, count, in_flight),) = phases
    assert (step, begin, count) == (7, T0, 2)
    # in collectives: [1,3] [4,5] [10,12] [15,20]+[16,18] [22,25] ms -> 2+1+2+5+3 = 13 ms
    assert sync == pytest.approx(13 * MS)
    # the last reduce-scatter launched at 22 ms, 10 ms of it in collectives before: 12 ms of compute
    assert compute == pytest.approx(12 * MS)
    assert first_ready == pytest.approx(15 * MS)  # the first reduce-scatter's launch
    assert in_flight == pytest.approx(8 * MS)  # the reduce-scatters' spans [15,20] and [22,25]


def test_a_step_without_reduce_scatters_has_no_phases():
    ready, phases = _timer().absorb(1, [s for s in STEP if s[5] == "all_gather"], T0, T0)
    assert len(ready) == 4 and phases == []


@pytest.mark.parametrize("seed", range(20))
def test_one_pass_reads_what_the_tracker_reads(seed):
    """Random overlapping collectives: the one pass and the per-collective tracker give the same figures."""
    rng = random.Random(seed)
    items = []
    for seq in range(rng.randint(1, 12)):
        start = T0 + rng.uniform(0, 30) * MS
        op = rng.choice(("all_gather", "reduce_scatter"))
        items.append((seq % 3, rng.randint(1, 10**6), start, start + rng.uniform(0, 8) * MS, seq, op,
                      "backward" if op == "reduce_scatter" else "forward"))
    rng.shuffle(items)  # completion order
    anchor = None if seed % 5 == 0 else T0
    fast = _timer(True).absorb(3, list(items), anchor, T0)
    slow = _timer(False).absorb(3, list(items), anchor, T0)
    assert [r[:5] for r in fast[0]] == [r[:5] for r in slow[0]]
    assert [r[5] for r in fast[0]] == pytest.approx([r[5] for r in slow[0]])
    assert len(fast[1]) == len(slow[1])
    for a, b in zip(fast[1], slow[1], strict=True):
        assert a[:2] == b[:2] and a[5] == b[5]
        assert [x for x in a[2:] if x is not None] == pytest.approx([x for x in b[2:] if x is not None], abs=1e-12)
        assert [x is None for x in a] == [x is None for x in b]


def test_the_summary_totals_from_the_inline_bandwidths():
    """``RecordBuilder.collectives`` at ``low`` (no records): per op the count, bytes, seconds and mean
    algbw / busbw (bus factor (n-1)/n = 0.5 on 2 ranks), computed here from the step above."""
    builder = RecordBuilder(resolve_settings("low"), dict(session_id="s", rank=0, world_size=2, local_rank=0),
                            None, None)
    ready, _ = _timer().absorb(1, list(STEP), T0, T0)
    assert builder.collectives(0.0, 0.0, ready, "wall", 2) == []
    ag = builder.comm_stats["all_gather"]
    rs = builder.comm_stats["reduce_scatter"]
    assert (ag.count, ag.bytes, rs.count, rs.bytes) == (4, 4096 + 2048 + 2048 + 4096, 2, 2048 + 4096)
    assert ag.seconds == pytest.approx(7 * MS)
    # algbw MB/s = bytes / 1e6 / seconds
    expected = [4096 / 1e6 / (2 * MS), 2048 / 1e6 / (1 * MS), 2048 / 1e6 / (2 * MS), 4096 / 1e6 / (2 * MS)]
    assert ag.algbw_sum / ag.algbw_n == pytest.approx(sum(expected) / 4)
    assert ag.busbw_sum / ag.busbw_n == pytest.approx(sum(expected) / 4 * 0.5)
    assert rs.algbw_sum == pytest.approx(2048 / 1e6 / (5 * MS) + 4096 / 1e6 / (3 * MS))
