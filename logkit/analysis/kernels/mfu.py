"""Model FLOPs utilization: the share of the GPUs' peak that the model's arithmetic used.

FLOPs per token = 2 N (forward) + 2 N (activation gradients) + 2 N_trainable (weight
gradients) = 4 N + 2 N_trainable, LoRA-aware (6 N when every weight trains; attention's
sequence-length term is left out); achieved FLOP/s = FLOPs per token x tokens/s (the whole
job's, steady steps) / number of GPUs (world size); MFU = achieved / the GPU's dense BF16 peak.
"""

from __future__ import annotations

from logkit.analysis.definitions import PERFORMANCE
from logkit.analysis.kernels.groups import session_kind
from logkit.analysis.kernels.peaks import gpu_model, peak_tflops_for
from logkit.analysis.kernels.throughput import warmup_count
from logkit.analysis.results import Mfu
from logkit.schema.records import EventType
from logkit.schema.values import to_float
from logkit.schema.vocab import SessionKind, on_cpu

TOKENS_MISSING = ("tokens/s not logged (metrics.tokens_per_second of the step records: with transformers' Trainer, "
                  "TrainingArguments(include_num_input_tokens_seen=True); with TrainingLogger, step.log(tokens=...))")


def _positive(value) -> float | None:
    v = to_float(value, finite=True)
    return v if v is not None and v > 0 else None


def model_parameters(session) -> tuple[float | None, float | None, str]:
    """(parameters_total, parameters_trainable, where from): meta's model_info, else the model_info
    event's columns when ingest keeps them."""
    info = session.meta.model_info if isinstance(session.meta.model_info, dict) else {}
    total = _positive(info.get("parameters_total"))
    if total:
        return total, _positive(info.get("parameters_trainable")), "meta.model_info"
    ev = session.events
    if "parameters_total" in ev.columns and not ev.empty:
        hit = ev[(ev["kind"] == EventType.MODEL_INFO) & ev["parameters_total"].notna()]
        if not hit.empty:
            row = hit.iloc[0]
            trainable = _positive(row["parameters_trainable"]) if "parameters_trainable" in hit.columns else None
            return _positive(row["parameters_total"]), trainable, "model_info event"
    return None, None, "not logged"


def _tokens_per_second(session) -> tuple[float | None, int]:
    """Steady tokens/s of the whole job (lowest rank's rows after warm-up, time-weighted), rows used."""
    rows = session.timed_steps(main_rank=True)
    if rows.empty or not rows["tokens_per_s"].notna().any():
        return None, 0
    k = warmup_count(rows["step_time_s"].to_numpy(dtype="float64"))
    steady = rows.iloc[k:]
    steady = steady[steady["tokens_per_s"].notna()]
    if steady.empty:
        return None, 0
    tokens = (steady["tokens_per_s"] * steady["step_time_s"]).sum()
    return float(tokens / steady["step_time_s"].sum()), int(len(steady))


def _missing(session, name, peak, total, tps) -> tuple[list[str], list[str]]:
    """(the inputs missing, a reason per missing input)."""
    meta = session.meta
    cpu = bool(on_cpu(meta.mode, meta.gpu_count))
    missing, reasons = [], []
    if session_kind(session) != SessionKind.TRAINING:
        reasons.append("not a training run")
    elif cpu:
        missing.append("gpu")
        reasons.append("a CPU run: MFU is measured against a GPU's peak FLOP/s")
    elif name is None:
        missing.append("gpu model")
        reasons.append("GPU model not logged (session_start gpus[].name or summary.json gpus[].name)")
    elif peak is None:
        missing.append("gpu peak")
        reasons.append(f"GPU model {name!r} is not in the peak table (peaks.GPU_PEAK_TFLOPS)")
    if total is None:
        missing.append("parameters")
        reasons.append("model parameter count not logged (a model_info record with parameters_total)")
    if tps is None:
        missing.append("tokens_per_second")
        reasons.append(TOKENS_MISSING)
    return missing, reasons


def mfu(session) -> Mfu:
    """Model FLOPs utilization of ``session`` (see module doc); ``mfu`` is None when an input is
    missing, and ``reason`` then says exactly which and where it would come from."""
    total, trainable, src = model_parameters(session)
    name = gpu_model(session)
    peak = peak_tflops_for(name)
    tps, rows = _tokens_per_second(session)
    n_gpus = int(session.meta.world_size or 1)
    fpt = 4 * total + 2 * (trainable if trainable is not None else total) if total else None
    missing, reasons = _missing(session, name, peak, total, tps)
    assumptions = ("parameters_trainable not logged: every weight taken as trainable (6 N per token)",) \
        if total is not None and trainable is None else ()
    achieved = fpt * tps / n_gpus / 1e12 if fpt and tps else None
    return Mfu(mfu=achieved / peak[1] if achieved is not None and peak and not reasons else None,
               achieved_tflops=achieved, peak_tflops=peak[1] if peak else None,
               gpu_model=peak[0] if peak else name, gpu_name=name, flops_per_token=fpt, tokens_per_second=tps,
               tokens_rows=rows, n_gpus=n_gpus, parameters_total=total, parameters_trainable=trainable,
               parameters_from=src, definition=PERFORMANCE["mfu"], missing=tuple(missing),
               reason="; ".join(reasons) or None, assumptions=assumptions)
