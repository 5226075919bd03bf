"""The emitter's cost through a real transformers ``Trainer`` (``LogkitCallback``), per verbosity level
(part 5 of ``emitter_overhead.py``, also run alone).

A tiny causal LM built from a config (``LlamaConfig``: no download), a batch sized so that a step takes
about ``--step-ms`` on one CPU thread, ``logging_steps=1`` (``on_log`` every step: the callback's
busiest case). One Trainer run without the callback (the reference step time, in this same invocation),
then one per level (low, medium, high, ultra), then the reference again. In the logged runs the CPU time
is counted where it is spent:

- the training thread: ``time.thread_time()`` around every per-step method of the callback
  (``on_step_begin``, ``on_substep_end``, ``on_pre_optimizer_step``, ``on_optimizer_step``,
  ``on_step_end``, ``on_log``, and the loss forward hook), wrapped on the instance;
- the logger's own threads (every thread named ``logkit-*``: writer, sampler, stall watch): their CPU
  time (``/proc/self/task/<tid>/schedstat``) between the first measured step and the end of training.

Per step, over the steps after the warm-up; the share is of the reference run's median step (measured
here, on this machine, in this invocation) and of the nominal ``--step-ms`` step. The start and end of a
session (``on_train_begin`` / ``on_train_end``: once per run) are given apart.

``--sharded``: the same count at each ``--level`` on 2 gloo CPU ranks under torchrun, the Trainer's DDP
(``use_cpu=True``) against a model ``fully_shard``-ed by hand (FSDP2, the Trainer told the model owns its
placement), alternated (FSDP1 wrapped by hand does not train through this Trainer on CPU: its
``_sync_replicated_trainable_parameters`` broadcasts the flat-sharded parameters, whose sizes differ
by rank, and gloo aborts; accelerate's FSDP plugin needs an accelerator); per rank the callback's training-thread time and the logger threads' CPU per step
(the timing at the collectives themselves, DDP's comm hook and FSDP2's wrappers, runs inside torch's
code, outside both figures; what they record is the writer's work, inside).

    python benchmarks/trainer_overhead.py              # ~2 minutes
    python benchmarks/trainer_overhead.py --steps 60   # shorter, noisier
    python benchmarks/trainer_overhead.py --sharded    # DDP against FSDP2 through the Trainer, ~3 minutes
    python benchmarks/trainer_overhead.py --sharded --level low,medium,high,ultra   # a row per level
    python benchmarks/trainer_overhead.py --sharded --level low --repeats 3          # 3 rounds of each
    python benchmarks/trainer_overhead.py --sharded --batch ddp=8,fsdp2=2            # at equal steps

A strategy is compared with DDP only where their steps are about as long (``EQUAL_STEPS``): the same
emitter work costs more CPU on a longer step (its compute leaves the caches colder; the writer's wake-ups
and the sampler's readings are paid per second), so at one batch FSDP2's longer step would read higher
for that reason alone; ``--batch`` gives each strategy its own batch (here DDP 8 and FSDP2 2 take
about 33 ms a step).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LEVELS = ("low", "medium", "high", "ultra")
PER_STEP = ("on_step_begin", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end",
            "on_log", "_note_loss")
ONCE = ("on_train_begin", "on_train_end")
WARMUP = 5
# two strategies' steps this close (relative) are compared: the emitter's cost per step grows with the step's
# compute (the same work on caches a longer step left colder), so only equal steps compare
EQUAL_STEPS = 0.25
# the emitter's budget per level, % of a step (issue 25: a fifth of what the verbose-logging document claims)
BUDGET_PCT = {"low": 0.2, "medium": 0.4, "high": 0.5, "ultra": 1.0}


def thread_cpu_s(native_id: int | None) -> float | None:
    """CPU seconds a thread of this process has run: schedstat (ns), else stat (clock ticks); None where
    neither can be read (the one reading of every benchmark here)."""
    if native_id is None:
        return None
    base = Path(f"/proc/self/task/{native_id}")
    try:
        return int((base / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, ValueError, IndexError):
        return None


def logger_threads() -> dict[str, int]:
    """The logger's threads now alive: name -> native id."""
    return {t.name: t.native_id for t in threading.enumerate() if t.name.startswith("logkit-") and t.native_id}


class _Steps:
    """A callback that keeps when each step began: the step time of both variants, measured alike."""

    def __init__(self) -> None:
        self.begins: list[float] = []

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_step_begin(self, *args, **kwargs):
        self.begins.append(time.perf_counter())

    def step_times(self) -> list[float]:
        b = self.begins[WARMUP:]
        return [y - x for x, y in zip(b, b[1:], strict=False)]


class _Counted:
    """Wraps a ``LogkitCallback``'s methods on the instance: training-thread CPU per method group, and
    the logger threads' CPU from the first measured step to the end of training."""

    def __init__(self, callback) -> None:
        self.callback, self.per_step, self.once = callback, 0.0, 0.0
        self.by_method: dict[str, float] = {}
        self.steps = 0
        self.threads0: dict[str, float] = {}
        self.threads1: dict[str, float] = {}
        self.ids: dict[str, int] = {}
        from transformers import TrainerCallback

        for name in PER_STEP + ONCE:
            original = getattr(callback, name, None)
            # the callback's own methods: an event it leaves to TrainerCallback's no-op (at this
            # verbosity) runs no emitter code; the Trainer calls that no-op for any callback
            if original is not None and getattr(original, "__func__", None) is not getattr(TrainerCallback, name, None):
                setattr(callback, name, self._wrap(name, original))

    def _wrap(self, name: str, original):
        clock = time.thread_time

        def wrapped(*args, **kwargs):
            if name == "on_train_end":  # the threads' CPU before end() stops them
                self.threads1 = {n: thread_cpu_s(i) for n, i in self.ids.items()}
            if name == "on_step_begin":
                self.steps += 1
                if self.steps == WARMUP + 1:
                    self.ids = logger_threads()
                    self.threads0 = {n: thread_cpu_s(i) for n, i in self.ids.items()}
            t0 = clock()
            try:
                return original(*args, **kwargs)
            finally:
                spent = clock() - t0
                if name in ONCE:
                    self.once += spent
                elif self.steps > WARMUP:
                    self.per_step += spent
                    self.by_method[name] = self.by_method.get(name, 0.0) + spent
        return wrapped

    def result(self) -> dict:
        measured = max(self.steps - WARMUP, 1)
        threads = {n: (self.threads1.get(n) - self.threads0[n]) / measured
                   for n in self.threads0 if self.threads0[n] is not None and self.threads1.get(n) is not None}
        return {"steps": measured, "training_thread_s": self.per_step / measured, "threads_s": threads,
                "by_method_s": {n: v / measured for n, v in sorted(self.by_method.items())}, "once_s": self.once}


def _model_and_data(step_ms: float, steps: int, batch: int | None = None):
    """A tiny Llama from a config and a batch size that makes a training step about ``step_ms`` (or ``batch``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    seq = 64

    def model():
        torch.manual_seed(0)
        return LlamaForCausalLM(config)

    probe = model() if batch is None else None
    batch = batch or 2
    opt = torch.optim.AdamW(probe.parameters(), lr=1e-4) if probe is not None else None
    while probe is not None:  # grow the batch until a step (forward, backward, AdamW) takes step_ms
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        t0 = time.perf_counter()
        for _ in range(3):
            probe(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
        if (time.perf_counter() - t0) / 3 >= step_ms / 1e3 or batch >= 256:
            break
        batch *= 2
    gen = torch.Generator().manual_seed(1)
    data = [{"input_ids": (x := torch.randint(0, config.vocab_size, (seq,), generator=gen)), "labels": x}
            for _ in range(batch * (steps + 1))]
    return model, data, batch


def _run(model_fn, data, batch: int, steps: int, tmp: str, callback=None) -> _Steps:
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(Path(tmp) / "out"), per_device_train_batch_size=batch, max_steps=steps,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, learning_rate=1e-4, seed=0, log_level="error")
    clock = _Steps()
    trainer = Trainer(model=model_fn(), args=args, train_dataset=data,
                      callbacks=[clock] + ([callback] if callback is not None else []))
    with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints each step's log dict
        trainer.train()
    return clock


def _written(folder: Path) -> tuple[int, int]:
    """(records in the rank streams, bytes of every file) of a session folder."""
    records = sum(p.read_bytes().count(b"\n") for p in folder.rglob("*_rank*.jsonl"))
    return records, sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(step_ms: float = 50.0, steps: int = 120, levels=LEVELS, repeats: int = 1) -> dict:
    """The reference runs and ``repeats`` runs per level, the levels alternated (see module doc); per
    level the median of the repeats' figures and their range."""
    from trainer_hooks import LogkitCallback

    model_fn, data, batch = _model_and_data(step_ms, steps)
    out: dict = {"batch": batch, "steps": steps, "repeats": repeats, "levels": {}}
    runs: dict = {level: [] for level in levels}
    reference: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        clock = _run(model_fn, data, batch, steps, tmp)
        reference += clock.step_times()
        for i in range(repeats):
            for level in (levels if i % 2 == 0 else tuple(reversed(levels))):
                folder = Path(tmp) / f"{level}{i}"
                cb = LogkitCallback(log_dir=str(folder), verbosity=level, end_verdict=False)
                counted = _Counted(cb)
                clock = _run(model_fn, data, batch, steps, tmp, cb)
                r = counted.result()
                r["step_s"] = statistics.median(clock.step_times())
                r["total_s"] = r["training_thread_s"] + sum(r["threads_s"].values())
                records, size = _written(folder)
                r["records_per_step"], r["bytes_per_step"] = records / steps, size / steps
                runs[level].append(r)
        clock = _run(model_fn, data, batch, steps, tmp)
        reference += clock.step_times()
    ref = out["reference_step_s"] = statistics.median(reference)
    for level, rs in runs.items():
        totals = [r["total_s"] for r in rs]
        mid = statistics.median(totals)
        out["levels"][level] = {
            "runs": rs, "total_s": mid, "range_s": [min(totals), max(totals)],
            "training_thread_s": statistics.median(r["training_thread_s"] for r in rs),
            "threads_s": {n: statistics.median(r["threads_s"].get(n, 0.0) for r in rs)
                          for n in sorted({n for r in rs for n in r["threads_s"]})},
            "by_method_s": {n: statistics.median(r["by_method_s"].get(n, 0.0) for r in rs)
                            for n in sorted({n for r in rs for n in r["by_method_s"]})},
            "once_s": statistics.median(r["once_s"] for r in rs),
            "records_per_step": statistics.median(r["records_per_step"] for r in rs),
            "bytes_per_step": statistics.median(r["bytes_per_step"] for r in rs),
            "share_of_reference": mid / ref, "share_of_nominal": mid / (step_ms / 1e3),
            "budget_s": BUDGET_PCT[level] / 100 * step_ms / 1e3}
    out["step_ms_nominal"] = step_ms
    return out


def show(m: dict) -> list[str]:
    lines = [f"trainer      : a tiny Llama through transformers' Trainer + LogkitCallback, batch {m['batch']}, "
             f"{m['steps']} steps a run (the first {WARMUP} left out), logging_steps=1, {m['repeats']} run(s) a level "
             f"(median, range); reference step {m['reference_step_s'] * 1e3:.1f} ms (median of the runs without the "
             f"callback, this invocation)"]
    for level, r in m["levels"].items():
        threads = ", ".join(f"{n.removeprefix('logkit-')} {v * 1e6:.0f}" for n, v in sorted(r["threads_s"].items()))
        lo, hi = r["range_s"]
        budget = r["budget_s"]
        lines.append(f"  {level:<7}: training thread {r['training_thread_s'] * 1e6:.0f} us + threads ({threads}) us "
                     f"= {r['total_s'] * 1e6:.0f} us a step ({lo * 1e6:.0f}-{hi * 1e6:.0f}): "
                     f"{r['share_of_nominal'] * 100:.2f}% of a {m['step_ms_nominal']:g} ms step "
                     f"({r['share_of_reference'] * 100:.2f}% of the reference step)  budget {budget * 1e6:.0f} us "
                     f"({BUDGET_PCT[level]:g}%) -> {'OK' if r['total_s'] <= budget else 'ABOVE'}; "
                     f"{r['records_per_step']:.2f} records, {r['bytes_per_step']:.0f} bytes a step; once per run "
                     f"{r['once_s'] * 1e3:.0f} ms")
        lines.append("           training thread by method: " + ", ".join(
            f"{n} {v * 1e6:.0f} us" for n, v in r["by_method_s"].items()))
    return lines


def sharded_worker(strategy: str, level: str, steps: int, out: str, batch: int) -> None:
    """One rank of ``--sharded`` (under torchrun): a tiny Llama through the Trainer, DDP or FSDP2."""
    import torch.distributed as dist
    from transformers import Trainer, TrainingArguments

    from trainer_hooks import LogkitCallback

    model_fn, data, batch = _model_and_data(0.0, steps, batch)
    model = model_fn()
    if strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group("gloo")
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        model._is_distributed_loading_by_transformers = True  # no DDP around a sharded model
    with tempfile.TemporaryDirectory() as tmp:
        cb = LogkitCallback(log_dir=str(Path(tmp) / "logs"), verbosity=level, end_verdict=False)
        counted = _Counted(cb)
        args = TrainingArguments(output_dir=str(Path(tmp) / "out"), per_device_train_batch_size=batch,
                                 max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                                 disable_tqdm=True, dataloader_num_workers=0, seed=0, log_level="error")
        clock = _Steps()
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[clock, cb])
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        r = counted.result()
        r["step_s"] = statistics.median(clock.step_times())
        rank = int(os.environ.get("RANK", "0"))
        (stream,) = Path(tmp, "logs").glob(f"*/*_rank{rank}.jsonl")
        r["recorded_strategy"] = json.loads(stream.read_text().split("\n", 1)[0]).get("strategy")  # session_start
    Path(f"{out}.{strategy}.rank{rank}.json").write_text(json.dumps(r))


def sharded(level: str = "high", steps: int = 80, rounds: int = 2, strategies=("ddp", "fsdp2"),
            step_ms: float = 50.0, batch: dict | None = None) -> dict:
    """DDP and the sharded strategies through the Trainer on 2 ranks at ``level``, alternated ``rounds``
    times, each rank's batch the one that makes a step about ``step_ms`` on one thread, or ``batch``'s
    (strategy -> batch; see module doc)."""
    import subprocess

    sized = None if batch and all(s in batch for s in strategies) else _model_and_data(step_ms, 0)[2]
    batch = {s: (batch or {}).get(s, sized) for s in strategies}  # measured once: each strategy's runs alike

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(root)}
    runs: dict = {s: [] for s in strategies}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for j, strategy in enumerate(strategies if i % 2 == 0 else tuple(reversed(strategies))):
                out = str(Path(tmp) / f"r{i}")
                cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port",
                       str(29650 + 4 * i + j), __file__, "--sharded-worker", strategy, "--level", level,
                       "--steps", str(steps), "--out", out, "--batch", str(batch[strategy])]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-3000:])
                runs[strategy] += [json.loads(Path(f"{out}.{strategy}.rank{r}.json").read_text()) for r in range(2)]
    _check(runs)  # each run measured what it says: the callback recorded its strategy
    out = {"level": level, "steps": steps, "rounds": rounds, "strategies": list(strategies), "batch": batch,
           "batch_sized_for_step_ms": step_ms if sized is not None else None}
    for strategy, docs in runs.items():
        totals = [d["training_thread_s"] + sum(d["threads_s"].values()) for d in docs]
        out[strategy] = {"per_step_us": statistics.median(totals) * 1e6, "range_us": [min(totals) * 1e6,
                                                                                     max(totals) * 1e6],
                         "training_thread_us": statistics.median(d["training_thread_s"] for d in docs) * 1e6,
                         "threads_us": {n: statistics.median(d["threads_s"].get(n, 0.0) for d in docs) * 1e6
                                        for n in sorted({n for d in docs for n in d["threads_s"]})},
                         "by_method_us": {n: statistics.median(d["by_method_s"].get(n, 0.0) for d in docs) * 1e6
                                          for n in sorted({n for d in docs for n in d["by_method_s"]})},
                         "step_ms": statistics.median(d["step_s"] for d in docs) * 1e3,
                         "budget_us": BUDGET_PCT[level] / 100 * 50e3}
    return out


def _batches(text: str | None, strategies: list[str]) -> dict | None:
    """``--batch``: "N" (every strategy) or "ddp=N,fsdp2=M"."""
    if not text:
        return None
    if "=" not in text:
        return dict.fromkeys(strategies, int(text))
    out = {k.strip(): int(v) for k, v in (part.split("=", 1) for part in text.split(","))}
    unknown = sorted(set(out) - set(strategies))
    if unknown:
        raise SystemExit(f"--batch names {', '.join(unknown)}, not one of --strategies {','.join(strategies)}")
    return out


def _check(runs: dict) -> None:
    for strategy, docs in runs.items():
        said = {d["recorded_strategy"] for d in docs}
        if said != {strategy}:
            raise RuntimeError(f"the {strategy} runs recorded {said}")


def show_sharded(m: dict) -> list[str]:
    d = m["ddp"]
    lines = [f"sharded      : 2 gloo ranks through the Trainer at {m['level']!r}, {m['steps']} steps, {m['rounds']} rounds "
             f"alternated, batch a rank {m.get('batch')}; callback + logger threads per step, median over ranks and "
             "rounds (range)"]
    for strategy in m["strategies"]:
        r = m[strategy]
        parts = f"training thread {r['training_thread_us']:.0f} + " + ", ".join(
            f"{n.removeprefix('logkit-')} {u:.0f}" for n, u in r["threads_us"].items())
        verdict = (f"budget {r['budget_us']:.0f} us ({BUDGET_PCT[m['level']]:g}% of a 50 ms step) -> "
                   f"{'OK' if r['per_step_us'] <= r['budget_us'] else 'ABOVE'}")
        if strategy != "ddp" and abs(r["step_ms"] / d["step_ms"] - 1) <= EQUAL_STEPS:
            verdict += f"; within the DDP figure -> {'OK' if r['per_step_us'] <= d['range_us'][1] else 'ABOVE'}"
        elif strategy != "ddp":  # the same work costs more CPU on caches a longer step's compute left colder
            verdict += (f"; against DDP: steps differ ({r['step_ms']:.0f} vs {d['step_ms']:.0f} ms), compare at "
                        "equal steps (--batch ddp=N,fsdp2=M)")
        lines.append(f"  {strategy:<6}: {r['per_step_us']:.0f} us ({r['range_us'][0]:.0f}-{r['range_us'][1]:.0f}; step "
                     f"{r['step_ms']:.1f} ms): {parts} us  {verdict}")
        lines.append("          training thread by method: " + ", ".join(
            f"{n} {u:.0f}" for n, u in r.get("by_method_us", {}).items() if u >= 0.5) + " us")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-ms", type=float, default=None,
                   help="the step on one thread the batch is sized for (default 50; --sharded: the smallest batch, "
                        "where the collectives' share is largest)")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--levels", default=",".join(LEVELS))
    p.add_argument("--repeats", type=int, default=None,
                   help="runs per level, alternated (median and range); --sharded: rounds of DDP and FSDP2 (default 3; "
                        "--sharded 2)")
    p.add_argument("--json", default=None)
    p.add_argument("--sharded", action="store_true", help="DDP against FSDP2 through the Trainer, 2 ranks")
    p.add_argument("--level", default="high", help="--sharded's verbosity levels (comma-separated)")
    p.add_argument("--strategies", default="ddp,fsdp2", help="--sharded's strategies (ddp among them: the reference)")
    p.add_argument("--sharded-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", default=None,
                   help="--sharded: each rank's batch, N or per strategy ddp=N,fsdp2=M (else sized by --step-ms)")
    args = p.parse_args(argv)
    if args.sharded_worker:
        sharded_worker(args.sharded_worker, args.level, args.steps, args.out, int(args.batch))
        return 0
    if args.sharded:
        if "ddp" not in args.strategies.split(","):
            p.error("--sharded compares with DDP: --strategies must name ddp")
        m = {}
        for level in args.level.split(","):
            m[level] = sharded(level, min(args.steps, 80), rounds=args.repeats or 2,
                               strategies=tuple(args.strategies.split(",")),
                               step_ms=1.0 if args.step_ms is None else args.step_ms,
                               batch=_batches(args.batch, args.strategies.split(",")))
            print("\n".join(show_sharded(m[level])), flush=True)
    else:
        m = measure(args.step_ms or 50.0, args.steps, tuple(args.levels.split(",")), args.repeats or 3)
        print("\n".join(show(m)))
    if args.json:
        Path(args.json).write_text(json.dumps(m, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
