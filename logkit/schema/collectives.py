"""Collectives: bytes per second and the bus-bandwidth factor of each operation (nccl-tests'
convention), in one op table that the emitter and the analysis both use.

``algbw`` = bytes moved by one rank / duration; ``busbw`` = algbw x the op's factor over the
``n`` ranks of the collective: 2(n-1)/n for all-reduce (a gradient sync is one), (n-1)/n for
all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/receive. An op
outside the table has no factor (None): its busbw is not known, never algbw in disguise.

    >>> busbw_factor("allreduce", 2), busbw_factor("allgather", 4), busbw_factor("broadcast", 8)
    (1.0, 0.75, 1.0)
    >>> busbw_factor("all_reduce", 3), busbw_factor("my_op", 4)
    (1.3333333333333333, None)
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MB", "BUS_FACTORS", "bus_factor_rule", "busbw_factor", "bus_factor_text", "bandwidth_mb_s"]

# SI megabyte: text lines say MB and MB/s in 10^6 bytes, as nccl-tests does.
MB = 1_000_000


def _all_reduce(n):
    return 2 * (n - 1) / n


def _n_minus_1(n):
    return (n - 1) / n


def _one(n):
    return n * 0 + 1.0  # 1 for any n; NaN stays NaN (works on numpy arrays too)


# op name (lower case) -> (rule, how the rule is written)
BUS_FACTORS: dict[str, tuple[Callable, str]] = {
    **dict.fromkeys(("gradient_sync", "allreduce", "all_reduce"), (_all_reduce, "2(n-1)/n")),
    **dict.fromkeys(("allgather", "all_gather", "reduce_scatter", "reducescatter", "alltoall", "all_to_all"),
                    (_n_minus_1, "(n-1)/n")),
    **dict.fromkeys(("broadcast", "reduce", "sendrecv", "send_recv", "hypercube"), (_one, "1")),
}


def bus_factor_rule(op: str | None) -> Callable | None:
    """The factor of ``op`` as a function of n (scalars or numpy arrays), or None for an op outside the table."""
    entry = BUS_FACTORS.get(str(op).lower()) if op is not None else None
    return entry[0] if entry else None


def busbw_factor(op: str | None, n) -> float | None:
    """busbw / algbw of ``op`` over ``n`` ranks; None when the op is not in the table or n is not a
    positive count."""
    rule = bus_factor_rule(op)
    if rule is None or n is None or isinstance(n, bool):
        return None
    try:
        n = float(n)
    except (TypeError, ValueError):
        return None
    if not n > 0:  # also NaN
        return None
    return float(rule(n))


def bus_factor_text(op: str | None, n: int | None) -> str:
    """The factor as written in a definition: "2(n-1)/n = 1.5" ("1" for the ops of factor one; the
    rule alone, "2(n-1)/n", when the rank count is unknown)."""
    entry = BUS_FACTORS.get(str(op).lower()) if op is not None else None
    if entry is None:
        return "unknown"
    if entry[1] == "1" or not n:
        return entry[1]
    return f"{entry[1]} = {entry[0](n):g}"


def algbw_mb_s(size_bytes, duration_s):
    """algbw in MB/s (10^6 bytes/s): the one formula, for scalars or numpy arrays (the caller keeps
    durations that are not positive out)."""
    return size_bytes / MB / duration_s


def bandwidth_mb_s(size_bytes: float, duration_s: float) -> float:
    """algbw in MB/s (``algbw_mb_s``) of one record; NaN when the duration is not positive."""
    if duration_s <= 0:
        return float("nan")
    return algbw_mb_s(size_bytes, duration_s)
