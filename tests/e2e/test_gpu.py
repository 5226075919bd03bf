"""The GPU path on a real GPU: NVML sampling and CUDA-event timing of an NCCL all-reduce.

Skipped where torch sees no CUDA device (CI, CPU machines). The logs such a machine produced
with the whole training path are fixtures under sample_logs/gpu/ (tests/test_fixtures_gpu.py).
Imports trainer_hooks only, so it runs where logkit's parsing dependencies are not installed.
"""

from __future__ import annotations

import socket
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sampler_reads_the_gpu_through_nvml():
    pytest.importorskip("pynvml")
    from trainer_hooks.sampling import ResourceSampler

    block = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")  # 2 GiB held while sampling
    sampler = ResourceSampler(interval_s=None, sample_every_s=0.05).start()
    try:
        assert sampler.wait_ready()
        time.sleep(0.5)
        snap = sampler.take_interval()
    finally:
        sampler.stop(final=False)
        del block
    assert sampler.gpu_available, sampler.notes
    dev = snap["devices"][0]
    props = torch.cuda.get_device_properties(0)
    assert dev["name"] == torch.cuda.get_device_name(0)
    # NVML's total is the board's memory; torch's is what the context can use: within 3%
    assert dev["memory_total_mb"] == pytest.approx(props.total_memory / 1e6, rel=0.03)
    assert dev["memory_used_mb_min"] >= 2 * 1024**3 / 1e6  # the 2 GiB block is seen
    assert 0 <= dev["utilization_percent"] <= 100
    assert dev["temperature_c"] > 0 and dev["power_w"] > 0 and dev["sm_clock_mhz"] > 0
    assert snap["samples"] >= 5


def test_comm_hook_times_a_real_nccl_allreduce_with_cuda_events(monkeypatch):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer_hooks.commhook import CommTimer, install_comm_hook

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
        ddp = DDP(model, device_ids=[0], bucket_cap_mb=4)
        timer = CommTimer()
        assert install_comm_hook(ddp, timer) is None
        x = torch.randn(64, 1024, device="cuda")
        steps, ready = 5, []
        for step in range(1, steps + 1):
            ddp(x).square().mean().backward()
            ddp.zero_grad(set_to_none=False)
            ready += timer.collect(step)  # never waits: what is not finished is read at a later step
        left, dropped = timer.finish(steps, wait=True)
        ready += left
    finally:
        dist.destroy_process_group()
    assert timer.timing_source == "cuda_event" and dropped == 0
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    per_step = {}
    for step, _bucket, size, seconds in ready:
        per_step[step] = per_step.get(step, 0) + size
        assert 0 < seconds < 1.0
    assert per_step == {s: grad_bytes for s in range(1, steps + 1)}  # every bucket of every step, exactly once
    assert len({b for _, b, _, _ in ready}) >= 2  # 4 MB buckets over 33.6 MB of gradients
    seconds = sorted(s for *_, s in ready)
    print(f"\n{len(ready)} bucket all-reduces, CUDA-event durations: median {seconds[len(seconds) // 2] * 1e6:.0f} us, "
          f"max {seconds[-1] * 1e6:.0f} us")
