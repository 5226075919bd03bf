"""A training framework's own per-step line that no other reader knows: a step counter, then
``key: value`` fields, one of them a loss. The class, as the frameworks write it:

- torchtune: ``Step 1 | loss:2.17 lr:2e-05 tokens_per_second_per_gpu:8.86``
- litgpt / nanoGPT: ``iter 0: loss 3.5421, time: 174.07ms``
- nanotron: ``iteration: 327281 / 378950 | elapsed_time_per_iteration_ms: 11.5K | global_batch_size: 64 | lm_loss: 2.38``
- NeMo: ``Training epoch 0, iteration 120/149 | global_batch_size: 1 | reduced_train_loss: 1.233 | train_step_timing in s: 0.031``
- ArcticTraining: ``iter:  130/3000   4% | loss: 16.5469 | iter time: 1.038s | iter tflops: 909.8 | lr: 8.667E-04 | ...``
  (the counter followed by how far it is in percent; each process may print its own line, untagged)
- key=value records: NeMo Automodel's EAGLE recipe ``epoch=0 step=1070 loss=2.5004 acc=0.32 lr=2.61109e-05
  grad_norm=0.123 hidden_loss=1.805``, ezpz/wordplay's trainer ``step=5 loss=3.6606 dt=108.1 ... train_loss=4.29
  val_loss=4.29`` (the first loss the step's: a later ``train_loss`` is a running estimate)

Read: the step (and its total, the run's progress), the training loss (never a validation loss), the
step's time (ms or s, with nanotron's K/M suffixes), the global batch, the learning rate and the gradient
norm. Megatron's own iteration line is ``torch_lines.parse_megatron``'s and is tried before this one."""

from __future__ import annotations

import re

from logkit.schema.values import to_float

# the counter: "Step 1 |", "iter 0:", "iteration: 327281 / 378950 |", "iteration 120/149 |", "iter:  130/3000   4% |"
# (a percentage of the total after it, as ArcticTraining prints)
# or a record of key=value fields ("epoch=0 step=1070 loss=2.5004 lr=2.61109e-05 grad_norm=0.123": NeMo Automodel's
# EAGLE recipe, ezpz/wordplay's trainer), the fields after the counter separated by blanks alone
_HEAD = re.compile(r"(?:^|(?<=[\s\]:,|]))(?:[Ss]tep|[Ii]ter(?:ation)?)[:=]?\s*(?P<n>\d+)(?:\s*/\s*(?P<of>\d+))?"
                   r"(?:[ \t]+\d{1,3}(?:\.\d+)?%)?(?P<rest>\s*[|:,]\s*.*|[ \t]+[A-Za-z_]\w*=.*)$")
# one field: "loss:2.17", "loss 3.5421", "time: 174.07ms", "train_step_timing in s: 0.03146", "..._ms: 11.5K",
# "iter time: 1.0 s" (a unit after a space, as ArcticTraining's older line writes it)
# (a key is words joined by single spaces, so that no long run of blanks is tried many ways)
_FIELD = re.compile(r"(?<!\w)(?P<key>[A-Za-z_]\w{0,80}(?: [A-Za-z_]\w{0,80}){0,4}(?: \(ms\))?)[ \t]*[:=]?[ \t]*"
                    r"(?P<num>-?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf))(?P<suf>ms|s|[KMGT]| (?:ms|s)(?=[ \t,|]|$))?(?![\w.])")
_SCALE = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
# the training loss under its frameworks' names (a "val_loss" on the same line is not the step's)
# (nanoGPT's "step 250: train loss 1.54, val loss 1.72" is an evaluation's estimate: not a step's)
_LOSS = ("loss", "lm_loss", "lm loss", "train_loss", "reduced_train_loss")
# (ArcticTraining's line says "iter time: 1.038s", the whole iteration's, before its "step time": the first is kept)
_TIME = ("time", "step_time", "iter_time", "iter time", "step time", "elapsed_time_per_iteration_ms",
         "elapsed time per iteration (ms)",
         "train_step_timing in s", "train_step_timing")
_BATCH = ("global_batch_size", "global batch size")
_LR = ("lr", "learning_rate", "learning rate")
_GRAD = ("grad_norm", "grad norm", "gradient_norm")


def seconds_of(key: str, value: float, suffix: str | None = None) -> float | None:
    """A step time in seconds where ``key`` is one of the frameworks' step-time keys and its unit is said; else None."""
    return _seconds(key, value, suffix) if key in _TIME else None


def _seconds(key: str, value: float, suffix: str | None) -> float | None:
    """A step time in seconds from its unit, said by the value's suffix or the key; None when neither says."""
    if suffix == "ms" or key.endswith("_ms") or key.endswith("(ms)"):
        return value / 1000
    if suffix == "s" or key.endswith(" in s"):
        return value
    return None


def parse(text: str) -> dict | None:
    """A steps row (``step``, ``max_steps``, ``loss``, ``step_time_s``, ``total_batch_size``,
    ``learning_rate``, ``grad_norm``) from one iteration line, or None when the line has no counter or no loss."""
    if "oss" not in text or (m := _HEAD.search(text)) is None:
        return None
    out: dict = {}
    for f in _FIELD.finditer(m["rest"]):
        key, suffix = f["key"].strip().lower(), f["suf"].strip() if f["suf"] else None
        value = to_float(f["num"])  # a step's "loss nan" is kept: it is what the run did
        if value is None or key in out:
            continue
        if suffix in _SCALE:
            value *= _SCALE[suffix]
        if key in _LOSS and "loss" not in out:
            out["loss"] = value
        elif key in _TIME and "step_time_s" not in out:
            out["step_time_s"] = _seconds(key, value, suffix)
        elif key in _BATCH and suffix is None and value.is_integer():  # nanotron's "1.02K" is rounded
            out["total_batch_size"] = int(value)
        elif key in _LR:
            out["learning_rate"] = value
        elif key in _GRAD:
            out["grad_norm"] = value
    if "loss" not in out:
        return None
    total = int(m["of"]) if m["of"] else None
    return {"step": int(m["n"]), "max_steps": total, **out}


def record(reader, number: int, it: dict, rank: int, t: float | None) -> bool:
    """The row into the console reader's steps, and what the line says of the run: how far it got
    (``N/M``) and its global batch (the last line's: a ramp-up ends at the run's)."""
    reader.read.step(number, {"rank": rank, "time_s": t, **it})
    if it.get("total_batch_size"):
        reader.frameworks.facts.restate("total_batch_size", it["total_batch_size"],
                                        f"global batch size: {it['total_batch_size']} (iteration line)", number)
    if it.get("max_steps"):
        reader.read.meta.progress = {"step": it["step"], "total": it["max_steps"], "line": number}
    return True
