"""The torch_distributed timing source on a real one-rank gloo group in this process: each collective is
counted once with nccl-tests' bytes whether its arguments come by position or by name, a collective that
calls another (all_gather_into_tensor -> all_gather_single) or one a comm hook already times is not counted
again, nothing is counted outside a step, a bound reference (as deepspeed's TorchBackend keeps) is timed
too, and every original is back after uninstall."""

from __future__ import annotations

import sys
import types

import pytest

from trainer_hooks import dist_timing
from trainer_hooks.commhook import outer_call

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


@pytest.fixture
def group(tmp_path):
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable, or a process group is already up")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _installed(model=None):
    timer = dist_timing.DistTimer()
    done, why = dist_timing.install(timer, model)
    assert why is None
    return timer, done


def _ops(timer):
    return [(item[5], item[1], item[7]) for item in timer.pending]  # (op, bytes, group size)


def test_each_collective_once_with_its_bytes_by_position_or_name(group):
    originals = {n: getattr(dist, n) for n in dist_timing.FUNCTIONS if hasattr(dist, n)}
    timer, done = _installed()
    try:
        timer.step_begin()
        out, x = torch.zeros(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
        dist.all_gather_into_tensor(out, x)  # calls all_gather_single inside: counted once
        dist.all_reduce(tensor=torch.ones(5, dtype=torch.float16))  # by keyword
        dist.reduce_scatter_tensor(torch.zeros(3), torch.ones(3))
        dist.broadcast(torch.ones(2, 2), 0)
        dist.all_gather([torch.zeros(4)], torch.ones(4))
        assert _ops(timer) == [("all_gather", 6 * 8, 1), ("all_reduce", 5 * 2, 1), ("reduce_scatter", 3 * 4, 1),
                               ("broadcast", 4 * 4, 1), ("all_gather", 4 * 4, 1)]
    finally:
        dist_timing.uninstall(done)
    assert {n: getattr(dist, n) for n in originals} == originals
    from torch.distributed import distributed_c10d

    assert distributed_c10d.all_gather_into_tensor is originals["all_gather_into_tensor"]


def test_a_call_timed_elsewhere_or_outside_a_step_is_not_counted(group):
    timer, done = _installed()
    try:
        dist.all_reduce(torch.ones(3))  # before any step
        timer.step_begin()
        with outer_call():  # what the DDP comm hook and FSDP2's comm objects do around their collective
            dist.all_reduce(torch.ones(3))
        assert timer.pending == []
        dist.all_reduce(torch.ones(3))
        assert len(timer.pending) == 1
        timer.collect(1)
        dist.all_reduce(torch.ones(3))  # after the step's end, before the next begins
        assert timer.pending == []
    finally:
        dist_timing.uninstall(done)


def test_an_async_call_is_timed_at_its_completion(group):
    timer, done = _installed()
    try:
        timer.step_begin()
        work = dist.all_reduce(torch.ones(7), async_op=True)
        work.wait()
        ((op, size, n),) = _ops(timer)
        assert (op, size, n) == ("all_reduce", 28, 1) and timer.done == 1
    finally:
        dist_timing.uninstall(done)


def test_deepspeeds_bound_functions_are_timed_and_put_back(group, monkeypatch):
    # deepspeed.comm.comm's cdb, as TorchBackend.__init__ binds it (deepspeed/comm/torch.py)
    cdb = types.SimpleNamespace(all_gather_function=dist.all_gather_into_tensor,
                                reduce_scatter_function=dist.reduce_scatter_tensor)
    monkeypatch.setitem(sys.modules, "deepspeed.comm.comm", types.SimpleNamespace(cdb=cdb))
    original = cdb.all_gather_function
    timer, done = _installed()
    try:
        timer.step_begin()
        cdb.all_gather_function(output_tensor=torch.zeros(2), input_tensor=torch.ones(2), group=None, async_op=False)
        assert _ops(timer) == [("all_gather", 8, 1)]
    finally:
        dist_timing.uninstall(done)
    assert cdb.all_gather_function is original


def test_phases_from_the_models_hooks_and_the_optimizer_step(group):
    model = torch.nn.Linear(3, 1)
    timer, done = _installed(model)
    try:
        timer.step_begin()
        dist.all_reduce(torch.ones(1))  # before the forward: forward
        loss = model(torch.ones(2, 3)).sum()
        dist.all_reduce(torch.ones(1))  # after the forward, outside autograd: backward (DeepSpeed's reduction)
        loss.backward()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.step()
        dist.all_reduce(torch.ones(1))  # after the optimizer step began: optimizer
        assert [item[6] for item in timer.pending] == ["forward", "backward", "optimizer"]
    finally:
        dist_timing.uninstall(done)
    assert not model._forward_hooks and not model._forward_pre_hooks
