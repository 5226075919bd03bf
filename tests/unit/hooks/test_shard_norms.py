"""``ShardNorms``: a sharded model's whole gradient norms read on the writer thread from the all-reduce of
its shards' squared norms (the root of the sum), and a read that gives up when the collective never ends."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from trainer_hooks.nonfinite import ShardNorms  # noqa: E402


class _Never:
    """A collective another rank never entered (it stopped before it)."""

    def is_completed(self) -> bool:
        return False


def test_the_whole_norms_are_the_root_of_the_summed_squares(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        squares = torch.tensor([9.0, 16.0, 0.25])  # one rank: the sum is these; roots 3, 4, 0.5
        shards = ShardNorms(dist.all_reduce(squares, async_op=True), squares)
        assert shards.result() == [3.0, 4.0, 0.5]
        assert shards.result() == [3.0, 4.0, 0.5]  # read once, kept
    finally:
        dist.destroy_process_group()


def test_a_collective_that_never_ends_gives_none_once_then_at_once():
    shards = ShardNorms(_Never(), torch.tensor([1.0]))
    began = time.monotonic()
    assert shards.result(timeout=0.05) is None
    assert shards.result(timeout=5.0) is None  # given up for good: no second wait
    assert time.monotonic() - began < 1.0
