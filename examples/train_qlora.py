"""QLoRA fine-tuning with logkit: 4-bit NF4 base (bitsandbytes), LoRA adapters (peft),
transformers' Trainer, and ``LogkitCallback`` writing the session logs.

Real models and data:
    accelerate launch examples/train_qlora.py --model meta-llama/Llama-3.2-1B \
        --dataset tatsu-lab/alpaca --text-field text --max-steps 500

No hub, no GPU (a tiny Llama built from a LlamaConfig, a word-level tokenizer and a
synthetic corpus, saved locally and then loaded through the same code as a real model):
    accelerate launch --num_processes 2 --multi_gpu examples/train_qlora.py --tiny

``--force-single-gpu`` pins the run to GPU 0, whatever the machine has.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model name on the hub, or a local folder")
    src.add_argument("--tiny", action="store_true", help="build a tiny Llama locally and train that")
    p.add_argument("--tiny-dir", default=".cache/logkit-tiny-llama", help="where --tiny saves its model")
    p.add_argument("--tiny-hidden", type=int, default=64,
                   help="hidden size of the --tiny model (64: CPU-sized; 1024 keeps a GPU busy)")
    p.add_argument("--tiny-layers", type=int, default=2, help="decoder layers of the --tiny model")
    p.add_argument("--dataset", help="dataset name on the hub, or a local .json/.jsonl/.txt file")
    p.add_argument("--text-field", default="text")
    p.add_argument("--log-dir", default="logs")
    p.add_argument("--verbosity", default="high", choices=["low", "medium", "high", "ultra"])
    p.add_argument("--output-dir", default="outputs/qlora")
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=4, help="per-device batch size")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process on CPU")
    p.add_argument("--trainer", default="hf", choices=["hf", "sft"],
                   help="transformers' Trainer, or TRL's SFTTrainer")
    p.add_argument("--force-single-gpu", action="store_true", help="use GPU 0 only")
    p.add_argument("--session-name", default=None, help="recorded as config.session (and in results.json)")
    p.add_argument("--config-name", default=None,
                   help="the configuration's name in results.json: small, medium, large")
    # fault injection, to see what logkit reports when a run goes wrong
    p.add_argument("--fail-at", type=int, default=None, help="raise an exception at the start of this step")
    p.add_argument("--catch-failure", action="store_true",
                   help="catch the training's exception, print it and exit with status 1 (a script's usual handler)")
    p.add_argument("--own-token-average", action="store_true",
                   help="average the loss over each rank's own tokens (average_tokens_across_devices=False): no "
                        "cross-rank gather before each step, so a rank's data time is its own")
    p.add_argument("--slow-rank", type=int, default=None, help="the rank --slow-data applies to")
    p.add_argument("--slow-data", type=float, default=0.0,
                   help="extra seconds of data loading per batch on --slow-rank (a slow collator)")
    return p.parse_args(argv)


def slow_collator(seconds: float):
    """transformers' default collator, ``seconds`` slower per batch (an injected slow data pipeline)."""
    from transformers import default_data_collator

    def collate(features):
        time.sleep(seconds)
        return default_data_collator(features)

    return collate


def fail_at_callback(step: int):
    """A callback raising at the start of ``step`` on every rank (before its collectives)."""
    from transformers import TrainerCallback

    class FailAt(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step + 1 == step:
                raise RuntimeError(f"injected failure at step {step}")

    return FailAt()


# -- the tiny local model ------------------------------------------------------------------
_WORDS = {
    "det": ["the", "a", "every", "one"],
    "noun": ["cat", "dog", "model", "gpu", "rank", "kernel", "batch", "token", "layer", "tensor"],
    "verb": ["sees", "trains", "syncs", "loads", "reduces", "gathers", "scales", "logs"],
    "adj": ["fast", "slow", "quantized", "sharded", "idle", "busy", "large", "small"],
}


def synthetic_corpus(n: int, seed: int = 0) -> list[str]:
    """Sentences from a small grammar: structured enough that the loss falls."""
    rng = random.Random(seed)
    w = _WORDS
    out = []
    for _ in range(n):
        s = (f"{rng.choice(w['det'])} {rng.choice(w['adj'])} {rng.choice(w['noun'])} {rng.choice(w['verb'])} "
             f"{rng.choice(w['det'])} {rng.choice(w['noun'])} .")
        out.append(s)
    return out


def build_tiny_model(folder: Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Save a tiny Llama (random weights), a word-level tokenizer and a corpus into ``folder``.

    Every rank calls it; a file lock lets the first build it and the others wait.
    """
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / (folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "tokenizer.json").exists():
            _build_tiny_model(folder, seed, hidden, layers)
        corpus = folder / "corpus.jsonl"
        if not corpus.exists():
            corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in synthetic_corpus(4000, seed + 1)))
    return folder


def _build_tiny_model(folder: Path, seed: int, hidden: int, layers: int) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(synthetic_corpus(2000, seed),
                            trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "<s>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


# -- loading, as for a real model -------------------------------------------------------------
def load_qlora_model(name: str, lora_r: int, on_cuda: bool, gradient_checkpointing: bool = False):
    """4-bit NF4 base with LoRA adapters on every linear projection."""
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute_dtype = torch.bfloat16 if on_cuda and torch.cuda.is_bf16_supported() else torch.float32
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=compute_dtype)
    device_map = {"": int(os.environ.get("LOCAL_RANK", 0))} if on_cuda else {"": "cpu"}
    model = AutoModelForCausalLM.from_pretrained(name, quantization_config=bnb, device_map=device_map,
                                                 dtype=compute_dtype)
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    lora = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.05, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return get_peft_model(model, lora), compute_dtype


def load_lm_dataset(dataset: str, tokenizer, text_field: str, seq_len: int):
    """Tokenize, concatenate and cut into ``seq_len`` blocks (labels = inputs)."""
    def group(batch):
        ids = [t for seq in batch["input_ids"] for t in seq + [tokenizer.eos_token_id]]
        n = len(ids) // seq_len * seq_len
        blocks = [ids[i:i + seq_len] for i in range(0, n, seq_len)]
        return {"input_ids": blocks, "labels": [b[:] for b in blocks], "attention_mask": [[1] * seq_len for _ in blocks]}

    try:
        from datasets import load_dataset
    except ImportError:  # datasets is optional (the qlora extra): a local file is read without it
        if not Path(dataset).exists():
            raise
        blocks = group(tokenizer(_local_texts(Path(dataset), text_field)))
        return [dict(zip(blocks, row, strict=True)) for row in zip(*blocks.values(), strict=True)]
    if Path(dataset).exists():
        kind = "text" if dataset.endswith(".txt") else "json"
        raw = load_dataset(kind, data_files=dataset, split="train")
    else:
        raw = load_dataset(dataset, split="train")

    def tokenize(batch):
        return tokenizer(batch[text_field])

    tokenized = raw.map(tokenize, batched=True, remove_columns=raw.column_names)
    return tokenized.map(group, batched=True, remove_columns=tokenized.column_names)


def _local_texts(path: Path, text_field: str) -> list[str]:
    """The texts of a local ``.txt`` (a line each) or JSON Lines file (``text_field`` of each record)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines if path.suffix == ".txt" else [json.loads(line)[text_field] for line in lines]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.force_single_gpu:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            print("--force-single-gpu: launch one process (python or accelerate launch --num_processes 1)",
                  file=sys.stderr)
            return 2
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # before torch sees the devices
    if args.tiny:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    import torch
    from transformers import AutoTokenizer, Trainer, TrainingArguments

    from trainer_hooks import LogkitCallback

    on_cuda = torch.cuda.is_available()
    if not on_cuda:
        torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))

    if args.tiny:
        model_name = str(build_tiny_model(Path(args.tiny_dir), hidden=args.tiny_hidden, layers=args.tiny_layers))
        dataset = args.dataset or str(Path(model_name) / "corpus.jsonl")
    else:
        model_name, dataset = args.model, args.dataset
        if dataset is None:
            print("--dataset is needed with --model", file=sys.stderr)
            return 2

    tokenizer = AutoTokenizer.from_pretrained(model_name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model, compute_dtype = load_qlora_model(model_name, args.lora_r, on_cuda)
    train_data = load_lm_dataset(dataset, tokenizer, args.text_field, args.seq_len)

    bf16 = compute_dtype == torch.bfloat16
    common = dict(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        lr_scheduler_type="linear",
        warmup_steps=0,
        logging_steps=1,
        include_num_input_tokens_seen=True,  # tokens/s in the step records, hence MFU in the report
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        bf16=bf16,
        use_cpu=not on_cuda,
        ddp_backend=None if on_cuda else ("gloo" if world > 1 else None),
        ddp_find_unused_parameters=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        average_tokens_across_devices=not args.own_token_average,
    )
    callback = LogkitCallback(
        log_dir=args.log_dir, verbosity=args.verbosity, model_name=args.model or "tiny-llama (local)",
        config={"force_single_gpu": args.force_single_gpu, "session": args.session_name, "lora_r": args.lora_r,
                "seq_len": args.seq_len, "quantization": "nf4-4bit", "tiny": args.tiny, "trainer": args.trainer},
    )
    callbacks = [callback] + ([fail_at_callback(args.fail_at)] if args.fail_at else [])
    if args.trainer == "sft":
        from trl import SFTConfig, SFTTrainer

        trainer = SFTTrainer(model=model, args=SFTConfig(**common, max_length=args.seq_len, packing=False),
                             train_dataset=train_data, processing_class=tokenizer, callbacks=callbacks)
    else:
        slow = args.slow_data and rank == args.slow_rank
        trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=train_data,
                          callbacks=callbacks, data_collator=slow_collator(args.slow_data) if slow else None)
    t0 = time.perf_counter()
    try:
        result = trainer.train()
    except Exception as exc:
        if not args.catch_failure:
            raise
        print(f"training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    duration = time.perf_counter() - t0

    if rank == 0:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        trainer.state.save_to_json(str(out / "trainer_state.json"))
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        results = {  # the pipeline's results.json
            "mode": "multi-gpu" if world > 1 else "single-gpu",
            "device": "cuda" if on_cuda else "cpu",
            "session": args.session_name,
            "config": args.config_name or ("tiny" if args.tiny else args.model),
            "model_source": "tiny" if args.tiny else args.model,
            "duration_seconds": round(duration, 3),
            "final_loss": losses[-1] if losses else None,
            "steps_per_second": result.metrics.get("train_steps_per_second"),
            "samples_per_second": result.metrics.get("train_samples_per_second"),
            "total_steps": trainer.state.global_step,
            "num_gpus": world if on_cuda else 0,
            "num_processes": world,
            "model_name": args.model or "tiny-llama (local)",
            "optimizations": f"qlora-nf4, lora_r={args.lora_r}",
            "logkit_session": str(callback.session_dir) if callback.session_dir else None,
        }
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(f"logkit session: {callback.session_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
