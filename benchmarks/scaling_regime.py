"""The scaling regime both forecast-validation trainers take (``known_cost_trainer.py``,
``real_compute_trainer.py``): strong, a global batch of ``--global-batch`` split over the ranks (per-rank
compute and data shrink as 1/n); weak, ``--per-rank-batch`` on every rank. ``forecast_validation.py``'s
strong-* and weak-* workloads rely on both trainers splitting the batch this one way."""

from __future__ import annotations

import argparse


def add_regime_args(p: argparse.ArgumentParser, *, global_batch: int, per_rank_batch: int) -> None:
    p.add_argument("--regime", choices=["strong", "weak"], default="strong")
    p.add_argument("--global-batch", type=int, default=global_batch, help="strong regime: samples per step over all ranks")
    p.add_argument("--per-rank-batch", type=int, default=per_rank_batch, help="weak regime: samples per step on each rank")


def rank_batch(args: argparse.Namespace, ranks: int) -> int:
    """Each rank's samples per step; exits where a strong global batch does not split over ``ranks``."""
    if args.regime == "weak":
        return args.per_rank_batch
    if args.global_batch % ranks:
        raise SystemExit(f"--global-batch {args.global_batch} does not split over {ranks} ranks")
    return args.global_batch // ranks
