"""A trainer doing real work on CPU ranks: what the forecast is validated against where each rank has cores.

    accelerate launch --num_processes 4 --multi_gpu benchmarks/real_compute_trainer.py \
        --regime strong --grad-mb 16 --log-dir logs

A small token model (an embedding, ``--layers`` residual MLP blocks over ``--seq-len`` tokens of width
``--hidden``, a classifier on the mean token) trained with AdamW: real forward, backward and optimizer
steps, torch on ``--threads`` threads per rank. The embedding's rows set the gradient's size
(``--grad-mb``, the whole model's float32 bytes): its lookup costs next to nothing, so small and large
gradients cost the same compute and differ in what DDP all-reduces (gloo, timed by logkit's comm hook)
and in the optimizer's work. Each step's batch (random tokens, labels a function of them) is made
before the step, as a DataLoader hands one over. Strong regime: a global batch of ``--global-batch``
split over the ranks (24 splits over 1, 2, 3, 4, 6 and 8); weak: ``--per-rank-batch`` on every rank.
Logged with ``TrainingLogger``.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchmarks.scaling_regime import add_regime_args, rank_batch


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", default="logs")
    add_regime_args(p, global_batch=24, per_rank_batch=8)
    p.add_argument("--grad-mb", type=float, default=2.0, help="the model's size in MB (10^6 bytes, float32)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)

    import torch
    from accelerate import Accelerator

    from trainer_hooks import TrainingLogger

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    n = accelerator.num_processes
    batch = rank_batch(args, n)
    vocab = vocab_for(args.grad_mb, args.hidden, args.layers)
    if vocab is None:
        raise SystemExit(f"--grad-mb {args.grad_mb:g} is below the blocks' own size "
                         f"({block_params(args.hidden, args.layers) * 4 / 1e6:.2f} MB at --hidden {args.hidden}, "
                         f"--layers {args.layers})")
    model = token_model(vocab, args.hidden, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    # each rank its own stream of batches (as a distributed sampler gives each its shard)
    gen = torch.Generator().manual_seed(1000 + accelerator.process_index)
    name = f"real-compute-{args.regime}-{args.grad_mb:g}mb"
    with TrainingLogger(args.log_dir, accelerator=accelerator, model=model, per_device_batch_size=batch,
                        max_steps=args.steps, model_name=name,
                        config={"seq_len": args.seq_len, "hidden": args.hidden, "layers": args.layers,
                                "threads": args.threads}) as tlog:
        for _ in range(args.steps):
            ids = torch.randint(0, vocab, (batch, args.seq_len), generator=gen)  # the batch, before the step
            labels = ids[:, 0] % CLASSES
            with tlog.step() as step:
                loss = torch.nn.functional.cross_entropy(model(ids), labels)
                accelerator.backward(loss)  # DDP's reducer all-reduces the gradient in backward
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
                step.log(loss=float(loss), learning_rate=1e-3)
    if accelerator.is_main_process:
        print(f"logkit session: {tlog.session_dir}")
    accelerator.free_memory()
    accelerator.end_training()
    return 0


CLASSES = 16


def block_params(hidden: int, layers: int) -> int:
    """Parameters of the blocks and the classifier (all but the embedding)."""
    block = 2 * hidden + (hidden * 2 * hidden + 2 * hidden) + (2 * hidden * hidden + hidden)  # norm, up, down
    return layers * block + hidden * CLASSES + CLASSES


def vocab_for(grad_mb: float, hidden: int, layers: int) -> int | None:
    """The embedding's rows that make the model ``grad_mb`` MB of float32 (None: the blocks alone are more)."""
    rows = int((grad_mb * 1e6 / 4 - block_params(hidden, layers)) // hidden)
    return rows if rows >= CLASSES else None


def token_model(vocab: int, hidden: int, layers: int):
    import torch
    from torch import nn

    class TokenModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 2 * hidden), nn.GELU(),
                              nn.Linear(2 * hidden, hidden)) for _ in range(layers))
            self.head = nn.Linear(hidden, CLASSES)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for block in self.blocks:
                x = x + block(x)
            return self.head(x.mean(dim=1))

    return TokenModel()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
