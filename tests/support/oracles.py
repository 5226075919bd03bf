"""Definitions written out here, plainly and independently of logkit's (vectorised) code, so that a
test's expected value never comes from the code under test."""

from __future__ import annotations

import statistics


def warmup_oracle(times) -> int:
    """Warm-up steps by the definition: the reference is the median step time of the run's second
    half, the tolerance max(5% of it, 3 x 1.4826 x the median absolute deviation of that half), the
    window w = clip(n // 50, 1, 10); warm-up ends at the first step that is within reference +
    tolerance and whose window of w steps has its median within it too; at most half the run, none
    when the run has fewer than 4 steps."""
    times = [float(t) for t in times]
    n = len(times)
    if n < 4:
        return 0
    second = times[n // 2:]
    ref = statistics.median(second)
    mad = statistics.median(abs(t - ref) for t in second)
    limit = ref + max(0.05 * ref, 3 * 1.4826 * mad)
    w = min(10, max(1, n // 50))
    for i in range(n // 2 + 1):
        if times[i] <= limit and statistics.median(times[i:i + w]) <= limit:
            return i
    return n // 2


def regime(base_batch, base_ranks, cand_batch, cand_ranks) -> str:
    """strong: the same global batch; weak: the same per-rank batch; mixed: neither."""
    if base_batch == cand_batch:
        return "strong"
    if base_batch / base_ranks == cand_batch / cand_ranks:
        return "weak"
    return "mixed"
