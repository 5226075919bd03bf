"""The bus-bandwidth factors against nccl-tests' table, written out by hand for each op and n."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logkit.schema.collectives import bandwidth_mb_s, bus_factor_rule, bus_factor_text, busbw_factor

# nccl-tests' PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
# broadcast, reduce, send/receive 1
BY_HAND = {
    ("allreduce", 2): 1.0, ("all_reduce", 3): 4 / 3, ("gradient_sync", 4): 1.5, ("AllReduce", 8): 1.75,
    ("allgather", 4): 0.75, ("all_gather", 2): 0.5, ("reduce_scatter", 8): 0.875, ("ReduceScatter", 4): 0.75,
    ("alltoall", 3): 2 / 3, ("all_to_all", 5): 0.8,
    ("broadcast", 8): 1.0, ("reduce", 3): 1.0, ("sendrecv", 2): 1.0, ("send_recv", 7): 1.0, ("hypercube", 4): 1.0,
    ("allreduce", 1): 0.0, ("allgather", 1): 0.0,
}


@pytest.mark.parametrize("op, n", list(BY_HAND))
def test_factor_by_hand(op, n):
    assert busbw_factor(op, n) == pytest.approx(BY_HAND[op, n], rel=1e-15)
    assert busbw_factor(op, str(n)) == pytest.approx(BY_HAND[op, n], rel=1e-15)  # a count read as text


@pytest.mark.parametrize("op, n", [
    ("my_op", 4), (None, 4), ("allreduce", None), ("allreduce", True), ("allreduce", 0), ("allreduce", -2),
    ("allreduce", float("nan")), ("allreduce", "four"), ("allreduce", [2]),
])
def test_no_factor_where_it_is_not_known(op, n):
    assert busbw_factor(op, n) is None


def test_the_rule_works_on_arrays():
    n = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    np.testing.assert_allclose(bus_factor_rule("all_reduce")(n), [0, 1, 4 / 3, 1.5, np.nan])
    np.testing.assert_allclose(bus_factor_rule("allgather")(n), [0, 0.5, 2 / 3, 0.75, np.nan])
    np.testing.assert_allclose(bus_factor_rule("broadcast")(n), [1, 1, 1, 1, np.nan])
    assert bus_factor_rule("unknown") is None and bus_factor_rule(None) is None


@pytest.mark.parametrize("op, n, text", [
    ("allreduce", 4, "2(n-1)/n = 1.5"), ("AllReduce", 3, "2(n-1)/n = 1.33333"), ("allgather", 4, "(n-1)/n = 0.75"),
    ("broadcast", 8, "1"), ("Reduce", 2, "1"),
    ("allreduce", None, "2(n-1)/n"), ("allgather", 0, "(n-1)/n"), ("broadcast", None, "1"),
    ("my_op", 4, "unknown"), (None, 4, "unknown"),
])
def test_factor_text(op, n, text):
    assert bus_factor_text(op, n) == text


def test_bandwidth_in_si_megabytes_per_second():
    assert bandwidth_mb_s(4_000_000, 0.002) == pytest.approx(2000.0)
    assert bandwidth_mb_s(1_500_000, 1.5) == pytest.approx(1.0)
    assert math.isnan(bandwidth_mb_s(1_000_000, 0.0)) and math.isnan(bandwidth_mb_s(1_000_000, -1.0))
