"""A tiny Llama (built from a config) trained by transformers' Trainer with ``LogkitCallback`` on 2 gloo CPU
ranks under torchrun: what tests/e2e/test_trainer_fsdp.py launches.

    torchrun --nproc_per_node 2 tests/support/trainer_fsdp_train.py --mode fully_shard --log-dir logs
    --mode fsdp_args    TrainingArguments(fsdp="full_shard auto_wrap", use_cpu=True): on CPU ranks accelerate
                        keeps DistributedType.MULTI_CPU and the Trainer wraps the model in DDP (FSDP is
                        enabled only for the MULTI_<accelerator> types: accelerate/state.py)
    --mode fully_shard  each decoder layer and the whole model fully_shard-ed by hand, the model marked as
                        owning its placement (``_is_distributed_loading_by_transformers``, as
                        ``from_pretrained(distributed_config=...)`` marks it) so that the Trainer does not wrap
                        it in DDP (DDP over DTensor parameters fails: "aten.cat.default got mixed torch.Tensor
                        and DTensor")
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from trainer_hooks import LogkitCallback

CONFIG = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=2, max_position_embeddings=32)
SEQ, BATCH = 16, 4


def make_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**CONFIG))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("fsdp_args", "fully_shard"), required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()
    model = make_model()
    kw: dict = {}
    if a.mode == "fully_shard":
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group("gloo")
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        model._is_distributed_loading_by_transformers = True
    else:
        kw = dict(fsdp="full_shard auto_wrap", fsdp_config={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
    gen = torch.Generator().manual_seed(1)
    data = [{"input_ids": (x := torch.randint(0, CONFIG["vocab_size"], (SEQ,), generator=gen)), "labels": x}
            for _ in range(BATCH * 2 * (a.steps + 1))]
    args = TrainingArguments(output_dir=f"{a.log_dir}_out", per_device_train_batch_size=BATCH, max_steps=a.steps,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             **kw)
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[LogkitCallback(log_dir=a.log_dir, end_verdict=False)])
    trainer.train()
    print(f"distributed_type={trainer.accelerator.state.distributed_type} wrapped={type(trainer.model_wrapped).__name__}")


if __name__ == "__main__":
    main()
