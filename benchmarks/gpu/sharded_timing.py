"""One-GPU check that sharded runs' collectives are timed with CUDA events: a tiny causal LM (built from a
config, nothing downloaded) trained a few steps by each wrapper on one CUDA GPU with NCCL (a process group of
one, every collective still issued; ``fsdp2_two_ranks_gloo``: two processes over gloo), logged with logkit, each
session written under OUT/<part>/.

    python benchmarks/gpu/sharded_timing.py OUT [--parts ddp,fsdp2,fsdp1,fsdp2_two_ranks_gloo,trainer_fsdp2,
                                                 trainer_fsdp1,trainer_deepspeed_zero3,accelerate_deepspeed_zero3]
                                                 [--steps 20] [--device cuda]

Parts (each in a process of its own, so one that fails or crashes leaves the others running):
  ddp, fsdp2, fsdp1       a hand-written loop with ``TrainingLogger`` (DistributedDataParallel; fully_shard on
                          each decoder layer and the root; FullyShardedDataParallel wrapping each decoder layer)
  fsdp2_two_ranks_gloo    fully_shard across two processes that share the one GPU, over gloo (NCCL refuses two
                          ranks on one device; gloo takes CUDA tensors and stages them through host memory):
                          FSDP2 issues its all-gathers and reduce-scatters at world size 2, so this proves its
                          CUDA-event timing path; the times are gloo's host copies, not a GPU link's bandwidth
  trainer_fsdp2/1         transformers' Trainer with ``fsdp="full_shard auto_wrap"`` (fsdp_config version 2 / 1)
                          and ``LogkitCallback``
  trainer_deepspeed_zero3 the Trainer with ``deepspeed=`` a ZeRO-3 config and ``LogkitCallback`` (needs deepspeed)
  accelerate_deepspeed_zero3  a hand-written loop prepared by ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(
                          zero_stage=3))`` (accelerate's DeepSpeed plugin, as ``accelerate launch --use_deepspeed``
                          sets it up) with ``TrainingLogger(accelerator=...)`` (needs deepspeed)
A part's summary line: PART <name> ok|FAILED, the strategy and timing_source its session_start states, its
steps, its communication records by op, phase and timing_source (cuda_event expected on a GPU), and the
allocator peaks its last performance record carries.
``--device cpu`` runs the same on gloo (a smoke test of the script where there is no GPU; the Trainer's FSDP
needs an accelerator and fails there).

What a group of one issues (read in torch and DeepSpeed, seen on CPU): DDP all-reduces every bucket (the comm
hook, timed); FSDP1 switches FULL_SHARD to NO_SHARD and all-reduces the gradients (torch_distributed); FSDP2
issues no collective at all (``_fsdp_param_group.py``: ``if world_size == 1`` skips the all-gather and the
reduce-scatter), so its line shows no communication: proving FSDP2's CUDA events needs two GPUs; DeepSpeed
ZeRO-3 reduce-scatters the gradients and broadcasts, but gathers no parameter.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARTS = ("ddp", "fsdp2", "fsdp1", "fsdp2_two_ranks_gloo", "trainer_fsdp2", "trainer_fsdp1", "trainer_deepspeed_zero3",
         "accelerate_deepspeed_zero3")
RANKS = {"fsdp2_two_ranks_gloo": 2}  # processes per part (the others: a group of one)


def tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    return LlamaForCausalLM(config)


def batches(n: int, batch: int = 4, seq: int = 64):
    import torch

    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 512, (batch, seq), generator=g) for _ in range(n)]


def hand_loop(part: str, out: Path, steps: int, device: str) -> None:
    import torch
    import torch.distributed as dist

    from trainer_hooks import TrainingLogger

    dist.init_process_group("nccl" if device == "cuda" and not part.endswith("_gloo") else "gloo")
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    model = tiny_lm().to(dev)
    layers = model.model.layers
    if part == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[0] if device == "cuda" else None)
    elif part.startswith("fsdp2"):
        from torch.distributed.fsdp import fully_shard

        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
    elif part == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({type(layers[0])}), device_id=dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with TrainingLogger(str(out), "high", model=model, per_device_batch_size=4, max_steps=steps,
                        end_verdict=False) as tlog:
        for ids in batches(steps):
            ids = ids.to(dev)
            with tlog.step() as step:
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                step.log(loss=loss.item(), learning_rate=1e-4)
    dist.destroy_process_group()


def trainer_run(part: str, out: Path, steps: int, device: str) -> None:
    import torch
    from transformers import Trainer, TrainingArguments

    from trainer_hooks import LogkitCallback

    data = [{"input_ids": ids[0], "labels": ids[0]} for ids in batches(steps * 4, batch=1)]
    kwargs = dict(output_dir=str(out / "trainer"), max_steps=steps, per_device_train_batch_size=4, logging_steps=1,
                  report_to=[], save_strategy="no", learning_rate=1e-4, bf16=device == "cuda",
                  use_cpu=device != "cuda", dataloader_num_workers=0)
    if part.startswith("trainer_fsdp"):
        kwargs.update(fsdp="full_shard auto_wrap",
                      fsdp_config={"version": 2 if part == "trainer_fsdp2" else 1,
                                   "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
    else:
        kwargs["deepspeed"] = {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
                               "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                               "bf16": {"enabled": "auto"}, "zero_allow_untested_optimizer": True}
    torch.manual_seed(0)
    trainer = Trainer(model=tiny_lm(), args=TrainingArguments(**kwargs), train_dataset=data,
                      callbacks=[LogkitCallback(log_dir=str(out), end_verdict=False)])
    trainer.train()


def accelerate_deepspeed(part: str, out: Path, steps: int, device: str) -> None:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    from trainer_hooks import TrainingLogger

    plugin = DeepSpeedPlugin(zero_stage=3, gradient_accumulation_steps=1)
    plugin.deepspeed_config.update(train_micro_batch_size_per_gpu=4, zero_allow_untested_optimizer=True)
    plugin.deepspeed_config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16" if device == "cuda" else "no")
    torch.manual_seed(0)
    model = tiny_lm()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    with TrainingLogger(str(out), "high", accelerator=accelerator, model=model, per_device_batch_size=4,
                        max_steps=steps, end_verdict=False) as tlog:
        for ids in batches(steps):
            ids = ids.to(accelerator.device)
            with tlog.step() as step:
                loss = model(input_ids=ids, labels=ids).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                step.log(loss=loss.item(), learning_rate=1e-4)


def summary(part: str, out: Path) -> str:
    """The part's line: what its rank-0 stream says (strategy, timing source, steps, communication records)."""
    streams = sorted(out.glob("*/*_rank0.jsonl"))
    if not streams:
        return "no session stream written"
    records = [json.loads(line) for line in streams[-1].read_text().splitlines() if line.strip()]
    start = next((r for r in records if r.get("type") == "session_start"), {})
    steps = sum(1 for r in records if r.get("type") == "training_step_complete")
    comm = collections.Counter((r.get("op"), r.get("phase"), r.get("timing_source"))
                               for r in records if r.get("type") == "communication")
    ms = [r["duration_ms"] for r in records if r.get("type") == "communication" and r.get("duration_ms") is not None]
    notes = [r.get("message") for r in records if r.get("kind") == "comm_not_timed"]
    perf = [r for r in records if r.get("type") == "performance"]
    peaks = (perf[-1].get("peak_allocated_mb"), perf[-1].get("peak_reserved_mb")) if perf else (None, None)
    median = sorted(ms)[len(ms) // 2] if ms else None
    return (f"strategy={start.get('strategy')} timing_source={start.get('timing_source')} "
            f"note={start.get('timing_note')!r} steps={steps} comm={dict(comm)} median_ms={median} "
            f"not_timed={notes} peak_allocated/reserved_mib={peaks}")


def child(part: str, out: Path, steps: int, device: str) -> None:
    sys.path.insert(0, str(REPO))
    run = trainer_run if part.startswith("trainer") else accelerate_deepspeed if part.startswith("accelerate") \
        else hand_loop
    run(part, out, steps, device)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_part(part: str, out: Path, args) -> tuple[bool, str]:
    """The part's processes (one per rank, on one port), each with its own output file; (ok, why not)."""
    ranks, port = RANKS.get(part, 1), str(free_port())
    (out / part).mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        if args.device == "cpu":
            env.update(DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="")
        output = open(out / part / f"output_rank{rank}.txt", "w")
        procs.append((subprocess.Popen([sys.executable, __file__, str(out), "--child", part, "--steps",
                                        str(args.steps), "--device", args.device], env=env, stdout=output,
                                       stderr=subprocess.STDOUT, text=True), output))
    why = ""
    deadline = time.monotonic() + args.timeout  # one limit for the part, whatever its ranks
    for rank, (proc, output) in enumerate(procs):
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "timeout"
        output.close()
        if code != 0 and not why:
            tail = (out / part / f"output_rank{rank}.txt").read_text(errors="replace").strip().splitlines()[-3:]
            why = f" (rank {rank} exit {code}): " + " | ".join(tail)
    return not why, why


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--timeout", type=int, default=300, help="seconds per part")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    if args.child:
        child(args.child, out / args.child, args.steps, args.device)
        return 0
    failed = 0
    for part in args.parts.split(","):
        ok, why = run_part(part, out, args)
        try:
            line = summary(part, out / part)
        except Exception:
            line = "summary failed: " + traceback.format_exc(limit=1).strip().splitlines()[-1]
        failed += not ok
        print(f"PART {part} {'ok' if ok else 'FAILED' + why} {line}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
