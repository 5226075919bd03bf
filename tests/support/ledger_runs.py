"""Training runs of known cost for the ledger's tests, each in a process of its own (the ledger's start-up
counts from the process's start):

    python -m tests.support.ledger_runs loop|trainer LOG_DIR FACTS_JSON
    torchrun --nproc_per_node 2 tests/support/ledger_runs.py ddp LOG_DIR FACTS_JSON

``loop``: a hand-written loop (``TrainingLogger``) with a known sleep before the logger exists, a known
data wait and compute per step, evaluations and a save timed by ``tlog.phase`` with known sleeps, and a
phase of another name. ``trainer``: a real ``Trainer`` run (a tiny Llama built from a config) with
evaluation and checkpoint saving by steps, a known sleep before it and in each save. ``ddp``: two
gloo ranks of a DDP model, rank 1 starting its logger ``LATE_START`` s after rank 0 and computing
``SLOW_COMPUTE`` s longer each step (rank 0 waits for it at the start and at each gradient sync).

FACTS_JSON receives what the run knows on its own clock: when its first line ran and when training
ended, before the logger's end (``time.time()``), and (trainer) the Trainer's own ``eval_runtime`` of each evaluation and the
checkpoints it wrote; ``ddp``: one file per rank, FACTS_JSON with ``.rank<R>`` before its suffix.
"""

from __future__ import annotations

import time

BEGUN = time.time()  # the script's first line: the process started before it

import json  # noqa: E402 - after the clock reading
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

STARTUP_SLEEP = 1.0  # before the logger exists
# loop
STEPS, DATA_SLEEP, COMPUTE_SLEEP = 8, 0.03, 0.06
EVAL_EVERY, EVAL_SLEEP = 2, 0.25  # after steps 2, 4, 6, 8: four evaluations (the last after the last step)
SAVE_AFTER, SAVE_SLEEP = 5, 0.2
OTHER_AFTER, OTHER_NAME, OTHER_SLEEP = 3, "generate_samples", 0.15
# ddp
DDP_STEPS, LATE_START, SLOW_COMPUTE, DDP_COMPUTE = 10, 1.0, 0.08, 0.02
# trainer
TRAINER_STEPS, TRAINER_EVAL_STEPS, TRAINER_SAVE_STEPS, TRAINER_SAVE_SLEEP = 6, 2, 3, 0.3


def loop(log_dir: str) -> dict:
    time.sleep(STARTUP_SLEEP)
    from trainer_hooks.loop import TrainingLogger

    with TrainingLogger(log_dir, per_device_batch_size=2, max_steps=STEPS, end_verdict=False,
                        gpu_snapshot_interval=0) as tlog:
        for i in range(1, STEPS + 1):
            time.sleep(DATA_SLEEP)
            with tlog.step() as step:
                time.sleep(COMPUTE_SLEEP)
                step.log(loss=1.0 / i)
            if i % EVAL_EVERY == 0:
                with tlog.phase("eval"):
                    time.sleep(EVAL_SLEEP)
            if i == SAVE_AFTER:
                with tlog.phase("save"):
                    time.sleep(SAVE_SLEEP)
            if i == OTHER_AFTER:
                with tlog.phase(OTHER_NAME):
                    time.sleep(OTHER_SLEEP)
    return {"ended": time.time()}


def trainer(log_dir: str) -> dict:
    time.sleep(STARTUP_SLEEP)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from trainer_hooks import LogkitCallback

    class SlowSaveTrainer(Trainer):
        def _save_checkpoint(self, model, trial):
            time.sleep(TRAINER_SAVE_SLEEP)  # a known part of each save
            return super()._save_checkpoint(model, trial)

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    data = [{"input_ids": torch.arange(i, i + 16) % 64, "labels": torch.arange(i, i + 16) % 64} for i in range(64)]
    out = Path(log_dir).parent / "out"
    args = TrainingArguments(output_dir=str(out), max_steps=TRAINER_STEPS, per_device_train_batch_size=2,
                             logging_steps=1, save_strategy="steps", save_steps=TRAINER_SAVE_STEPS,
                             eval_strategy="steps", eval_steps=TRAINER_EVAL_STEPS, per_device_eval_batch_size=4,
                             report_to=[], use_cpu=True, disable_tqdm=True)
    class EndClock(TrainerCallback):
        """Before the logger's on_train_end (callbacks run in their order): training ended by now."""

        def on_train_end(self, args, state, control, **kwargs):
            self.ended = time.time()

    clock = EndClock()
    callback = LogkitCallback(log_dir=log_dir, end_verdict=False)
    run = SlowSaveTrainer(model=model, args=args, train_dataset=data, eval_dataset=data[:32],
                          callbacks=[clock, callback])
    run.train()
    ended = clock.ended
    evals = [e["eval_runtime"] for e in run.state.log_history if "eval_runtime" in e]
    return {"ended": ended, "eval_runtimes": evals,
            "checkpoints": sorted(p.name for p in out.glob("checkpoint-*"))}


def ddp(log_dir: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch import nn

    from trainer_hooks.loop import TrainingLogger

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if rank == 1:
        time.sleep(LATE_START)  # rank 1's start-up is longer: rank 0 waits for it in the logger's start
    with TrainingLogger(log_dir, model=model, per_device_batch_size=4, max_steps=DDP_STEPS, end_verdict=False,
                        gpu_snapshot_interval=0) as tlog:
        for _ in range(DDP_STEPS):
            x = torch.randn(4, 64)
            with tlog.step() as step:
                time.sleep(DDP_COMPUTE + (SLOW_COMPUTE if rank == 1 else 0.0))  # rank 1 computes longer
                loss = model(x).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                step.log(loss=loss.item())
    ended = time.time()
    dist.destroy_process_group()
    return {"ended": ended, "rank": rank}


if __name__ == "__main__":
    mode, log_dir, facts = sys.argv[1:4]
    result = {"loop": loop, "trainer": trainer, "ddp": ddp}[mode](log_dir)
    if "RANK" in os.environ:
        facts = str(Path(facts).with_suffix(f".rank{os.environ['RANK']}.json"))
    Path(facts).write_text(json.dumps({"begun": BEGUN, **result}))
