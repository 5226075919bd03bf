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


def steady_bootstrap_interval(base, cand, base_seed, cand_seed, n_boot=1000, level=0.95):
    """The speedup interval by its definition: each run's steady steps (``(batch, time)`` pairs in
    step order, warm-up left out) cut into min(n, 200) consecutive blocks; ``n_boot`` draws of
    each run's blocks with replacement, each run from its own seed (numpy's default generator);
    each draw's throughput is its samples over its time; the interval is the (1 - level) / 2 and
    (1 + level) / 2 quantiles of candidate draw / baseline draw."""
    import numpy as np

    def draws(pairs, seed):
        n = len(pairs)
        m = min(n, 200)
        edges = [k * n // m for k in range(m)] + [n]
        blocks = [pairs[edges[k]:edges[k + 1]] for k in range(m)]
        samples = np.array([sum(b for b, _ in block) for block in blocks], dtype=float)
        seconds = np.array([sum(t for _, t in block) for block in blocks], dtype=float)
        idx = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))
        return samples[idx].sum(axis=1) / seconds[idx].sum(axis=1)

    ratio = draws(cand, cand_seed) / draws(base, base_seed)
    lo, hi = np.quantile(ratio, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
