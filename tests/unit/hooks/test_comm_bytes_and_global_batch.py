"""Two figures of the emitter that only the slow multi-process tests reached, here in-process and fast:

- the DDP communication hook's byte count (``trainer_hooks/commhook.py``): each bucket's bytes are its
  flat gradient buffer's elements x their size. Checked on a stand-in bucket of half-precision values
  and on a real ``DistributedDataParallel`` (a single-process gloo group in this process, torn down
  after) whose buckets are computed here from the model's layers (float64, so that a size taken as 4
  bytes shows), the hook's items and the ``communication`` records the logger writes from them;
- the global batch of a multi-rank run: per-device batch x gradient accumulation x world size, where
  the logger (``SessionLogger.start``), the loop helper (``TrainingLogger`` with a fake accelerator)
  and the transformers callback (``LogkitCallback.on_train_begin`` with the Trainer's arguments)
  compute it, on a fake world of 4 ranks: the ``session_start`` record, every step record's
  ``total_batch_size`` and its samples/s (the batch over the step time, read from the same record).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tests.support.launch import read_jsonl
from trainer_hooks import session_logger as session_mod
from trainer_hooks.commhook import CommTimer, install_comm_hook
from trainer_hooks.distributed import RankInfo

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

WORLD, PER_DEVICE, ACCUMULATION = 4, 3, 5
GLOBAL_BATCH = PER_DEVICE * ACCUMULATION * WORLD  # 60


@pytest.fixture
def gloo(tmp_path):
    """A process group of one gloo rank in this process (file store), destroyed after the test."""
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable, or a process group is already up")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class FakeBucket:
    def __init__(self, buffer, index):
        self._buffer, self._index = buffer, index

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index


@pytest.mark.parametrize(("dtype", "numel"), [(torch.float16, 7), (torch.float64, 5), (torch.float32, 9)])
def test_a_buckets_bytes_are_its_elements_times_their_size(gloo, dtype, numel):
    timer = CommTimer()
    timer.step_begin()
    out = timer.hook(None, FakeBucket(torch.ones(numel, dtype=dtype), 3)).wait()
    assert out.dtype == dtype
    ((step, bucket, size, seconds),), _ = timer.collect(1, wait=True)
    width = {torch.float16: 2, torch.float64: 8, torch.float32: 4}[dtype]
    assert (step, bucket, size) == (1, 3, numel * width) and seconds >= 0


def _layer_bytes(layer) -> int:
    return sum(p.numel() * 8 for p in layer.parameters())  # float64


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(300, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 50)).double()


def test_ddp_buckets_carry_the_gradients_bytes(gloo):
    model = _model()
    first, last = _layer_bytes(model[0]), _layer_bytes(model[2])  # 2 408 000 and 400 400 bytes
    assert (first, last) == ((300 * 1000 + 1000) * 8, (1000 * 50 + 50) * 8)
    # buckets of 0.25 MB: after the first step (one bucket of everything), one bucket per layer
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    timer = CommTimer()
    assert install_comm_hook(ddp, timer) is None and timer.group_size == 1
    sizes = {}
    for step in (1, 2, 3):
        timer.step_begin()
        ddp(torch.randn(4, 300, dtype=torch.float64)).sum().backward()
        ready, _ = timer.collect(step, wait=True)
        sizes[step] = sorted(size for _, _, size, _ in ready)
        assert {s for s, *_ in ready} == {step}
    assert sum(sizes[1]) == first + last
    assert sizes[2] == sizes[3] == sorted([first, last])


def test_the_loggers_communication_records_carry_the_hooks_bytes(tmp_path, monkeypatch):
    # the logger believes it is rank 0 of 2 (its start makes no collective); the hook then runs on a
    # real DDP model in a one-rank gloo group
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 2, 0, "gloo", "cpu", "testhost"))
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0)
    log.start(per_device_batch_size=2, max_steps=3)
    if dist.is_initialized():
        pytest.skip("a process group is already up")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = _model()
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
        assert log.attach_model(ddp) is True
        for step in (1, 2, 3):
            log.step_begin()
            ddp(torch.randn(4, 300, dtype=torch.float64)).sum().backward()
            log.step_end(step, loss=1.0)
        log.end()
    finally:
        dist.destroy_process_group()
    records = read_jsonl(tmp_path / log.session_id / f"{log.session_id}_rank0.jsonl")
    comm = [r for r in records if r["type"] == "communication"]
    by_step = {}
    for r in comm:
        by_step.setdefault(r["step"], []).append(r["size_bytes"])
        assert r["algbw_mb_s"] == pytest.approx(r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3), rel=1e-3)
    total = _layer_bytes(model[0]) + _layer_bytes(model[2])
    assert sorted(by_step) == [1, 2, 3] and all(sum(v) == total for v in by_step.values())
    assert sorted(by_step[3]) == sorted([_layer_bytes(model[0]), _layer_bytes(model[2])])


# -- the global batch of a multi-rank run --------------------------------------------------------------


@pytest.fixture
def four_ranks(monkeypatch):
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, WORLD, 0, "gloo", "cpu", "testhost"))


def _check_stream(folder, session_id, steps=3):
    records = read_jsonl(folder / f"{session_id}_rank0.jsonl")
    (start,) = [r for r in records if r["type"] == "session_start"]
    assert (start["world_size"], start["total_batch_size"]) == (WORLD, GLOBAL_BATCH)
    step_records = [r for r in records if r["type"] == "training_step_complete"]
    assert len(step_records) == steps
    for r in step_records:
        batch = r["metrics"]["total_batch_size"]
        assert batch == GLOBAL_BATCH
        t = r["timing"]["step_time_seconds"]
        assert r["metrics"]["samples_per_second"] == pytest.approx(GLOBAL_BATCH / t, rel=1e-3, abs=1e-3)
    (end,) = [r for r in records if r["type"] == "session_end"]
    return start, end


def test_the_logger_computes_the_global_batch(tmp_path, four_ranks):
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0)
    log.start(per_device_batch_size=PER_DEVICE, gradient_accumulation_steps=ACCUMULATION, max_steps=3)
    for step in (1, 2, 3):
        log.step_begin()
        time.sleep(0.002)  # step times well above their 6-digit rounding
        log.step_end(step, loss=1.0)
    log.end()
    start, _ = _check_stream(tmp_path / log.session_id, log.session_id)
    assert (start["per_device_batch_size"], start["gradient_accumulation_steps"]) == (PER_DEVICE, ACCUMULATION)


def test_a_given_global_batch_is_kept(tmp_path, four_ranks):
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0)
    log.start(per_device_batch_size=PER_DEVICE, gradient_accumulation_steps=ACCUMULATION, total_batch_size=7,
              max_steps=1)
    log.end()
    records = read_jsonl(tmp_path / log.session_id / f"{log.session_id}_rank0.jsonl")
    assert [r["total_batch_size"] for r in records if r["type"] == "session_start"] == [7]


def test_the_loop_helper_with_an_accelerator_computes_the_global_batch(tmp_path, four_ranks):
    from trainer_hooks import TrainingLogger

    accelerator = SimpleNamespace(gradient_accumulation_steps=ACCUMULATION, num_processes=WORLD,
                                  mixed_precision="bf16", process_index=0, is_main_process=True)
    with TrainingLogger(tmp_path, "high", accelerator=accelerator, per_device_batch_size=PER_DEVICE, max_steps=3,
                        gpu_snapshot_interval=0, stall_min_s=0) as tlog:
        for _ in range(3):
            with tlog.step() as step:
                time.sleep(0.002)
                step.loss = 1.0
    start, _ = _check_stream(tlog.session_dir, tlog.session_dir.name)
    assert start["gradient_accumulation_steps"] == ACCUMULATION and start["mixed_precision"] == "bf16"


def test_the_callback_computes_the_global_batch_from_the_trainers_arguments(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from trainer_hooks import LogkitCallback

    # the Trainer's arguments on rank 0 of 4; the process itself is alone (rank_info: 1 rank)
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 1, 0, None, "cpu", "testhost"))
    args = SimpleNamespace(world_size=WORLD, per_device_train_batch_size=PER_DEVICE,
                           gradient_accumulation_steps=ACCUMULATION, learning_rate=1e-4, logging_steps=1,
                           num_train_epochs=1, seed=0, output_dir=str(tmp_path / "out"), bf16=False, fp16=False)
    state = SimpleNamespace(max_steps=3, global_step=0, epoch=0.0, num_input_tokens_seen=0)
    control = SimpleNamespace()
    cb = LogkitCallback(log_dir=str(tmp_path), gpu_snapshot_interval=0, stall_min_s=0, time_communication=False)
    cb.on_train_begin(args, state, control)
    for step in (1, 2, 3):
        cb.on_step_begin(args, state, control)
        state.global_step = step
        cb.on_step_end(args, state, control)
    cb.on_train_end(args, state, control)
    folder = cb.session_dir
    records = read_jsonl(folder / f"{folder.name}_rank0.jsonl")
    (start,) = [r for r in records if r["type"] == "session_start"]
    assert start["total_batch_size"] == GLOBAL_BATCH
    assert [r["metrics"]["total_batch_size"] for r in records if r["type"] == "training_step_complete"] == \
        [GLOBAL_BATCH] * 3
