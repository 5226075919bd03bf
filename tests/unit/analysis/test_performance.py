"""Performance: step-time spread, slow steps, stragglers, GPU table, MFU (LoRA-aware)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels.mfu import TOKENS_MISSING, mfu
from logkit.analysis.kernels.performance import (
    busy_gpu,
    gpu_table,
    slow_step_list,
    step_samples,
    step_stats,
    stragglers,
)
from logkit.run.load import load_session
from tests.support.analysis_synth import gpu_rows, noisy, session, step_rows, write_jsonl_session
from tests.support.launch import fixture_session


def _two_ranks():
    t0 = noisy(100, 0.40, 0.01, seed=3)
    t1 = noisy(100, 0.48, 0.01, seed=4)
    t0[10] = 2.0  # a slow step on rank 0
    d0 = [t * 0.1 for t in t0]
    return session("m", world_size=2, steps=step_rows(t0, rank=0, data=d0) + step_rows(t1, rank=1)), t0, t1


def test_step_stats_against_numpy():
    s, t0, t1 = _two_ranks()
    stats = step_stats(s).set_index("rank")
    for r, t in ((0, t0), (1, t1)):
        row = stats.loc[r]
        assert row["steps"] == 100
        assert row["step_p50_s"] == pytest.approx(np.median(t))
        assert row["step_p95_s"] == pytest.approx(np.quantile(t, 0.95))
        assert row["step_max_s"] == pytest.approx(max(t))
        assert row["step_mean_s"] == pytest.approx(np.mean(t))
        assert row["slow_steps"] == sum(x > 3 * np.median(t) for x in t)
    assert stats.loc[0, "slow_steps"] == 1
    assert stats.loc[0, "data_share"] == pytest.approx(0.1)
    assert np.isnan(stats.loc[1, "data_share"])
    (worst,) = slow_step_list(s)
    assert (worst["rank"], worst["step"]) == (0, 11)


def test_stragglers_score():
    s, t0, t1 = _two_ranks()
    out = stragglers(step_samples(s)).set_index("rank")
    fastest = min(np.median(t0), np.median(t1))
    assert out.loc[1, "vs_fastest"] == pytest.approx(np.median(t1) / fastest)
    assert out.loc[1, "score"] == pytest.approx(np.median(t1) / fastest - 1)
    assert bool(out.loc[1, "is_straggler"]) and not bool(out.loc[0, "is_straggler"])


def test_gpu_table_and_busy_gpu():
    s = session("g", gpu=gpu_rows({0: [90.0, 98.0, 94.0], 1: [2.0, 0.0, 1.0]}, mem_pct=75.0))
    g = gpu_table(s).set_index("gpu")
    assert g.loc[0, "avg_util"] == pytest.approx(94.0) and g.loc[0, "peak_util"] == 98.0
    assert g.loc[0, "avg_memory_pct"] == pytest.approx(75.0)
    assert busy_gpu(gpu_table(s)) == {"busy": 0, "idle": [1], "busy_util": pytest.approx(94.0)}
    even = session("e", gpu=gpu_rows({0: [90.0], 1: [88.0]}))
    assert busy_gpu(gpu_table(even)) is None


def test_text_logs_gpu_line_from_summary():
    s = load_session("sample_logs/text_logs/logs/training_20241206_143022")
    g = gpu_table(s).set_index("gpu")
    assert (g.loc[0, "avg_util"], g.loc[0, "peak_util"], g.loc[0, "avg_memory_pct"]) == (82.1, 95.2, 75.1)


def test_mfu_is_lora_aware():
    n, trainable, tokens = 7e9, 4e7, 4096.0
    times = [0.5] * 20
    s = session("q", world_size=2, steps=step_rows(times, tokens=tokens),
                model_info={"parameters_total": n, "parameters_trainable": trainable},
                gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3"}])
    m = mfu(s)
    fpt = 4 * n + 2 * trainable
    assert m.flops_per_token == pytest.approx(fpt)
    assert m.flops_per_token < 6 * n
    assert m.tokens_per_second == pytest.approx(tokens / 0.5)
    assert m.achieved_tflops == pytest.approx(fpt * tokens / 0.5 / 2 / 1e12)
    assert m.mfu == pytest.approx(m.achieved_tflops / 989.0)
    assert m.gpu_model == "H100 SXM" and "4 N + 2 N_trainable" in m.definition
    full = mfu(session("f", steps=step_rows(times, tokens=tokens), model_info={"parameters_total": n},
                       gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB"}]))
    assert full.flops_per_token == pytest.approx(6 * n)  # trainable unknown: every weight trains


H100_DENSE_BF16_TFLOPS = 989.0  # NVIDIA H100 SXM datasheet, dense (no sparsity)


def test_mfu_end_to_end_from_files(tmp_path):
    """A session folder as the emitter writes it: session_start names the GPU, model_info gives the
    parameter counts, each step logs tokens_per_second. MFU computed here from those numbers."""
    n, trainable, tokens, st, ranks = 7_615_616_512, 40_370_176, 65_536, 0.8, 2
    folder = write_jsonl_session(tmp_path, "mfu_run", world_size=ranks, step_times=[st] * 30,
                                 tokens_per_step=tokens, backend="nccl",
                                 gpus=[{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(ranks)],
                                 model_info={"parameters_total": n, "parameters_trainable": trainable,
                                             "dtypes": {"bfloat16": n}, "quantization": None})
    s = load_session(folder)
    assert s.meta["model_info"]["parameters_total"] == n  # ingest keeps the record
    m = analyze([s]).mfu["mfu_run"]
    # forward 2N, backward activation gradients 2N, weight gradients 2 N_trainable (LoRA: frozen weights get none)
    flops_per_token = 2 * n + 2 * n + 2 * trainable
    tokens_per_s = round(tokens / st, 2)  # the job's tokens/s as each step logs it
    achieved = flops_per_token * tokens_per_s / ranks
    assert m.flops_per_token == flops_per_token
    assert m.tokens_per_second == pytest.approx(tokens_per_s)
    assert m.achieved_tflops == pytest.approx(achieved / 1e12)
    assert m.mfu == pytest.approx(achieved / (H100_DENSE_BF16_TFLOPS * 1e12))
    assert m.reason is None and m.assumptions == () and m.parameters_from == "meta.model_info"


def test_mfu_absent_says_exactly_why(tmp_path):
    gpus = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]
    info = {"parameters_total": 1_000_000, "parameters_trainable": 1000}
    no_tokens = load_session(write_jsonl_session(tmp_path, "a", gpus=gpus, model_info=info))
    assert mfu(no_tokens).mfu is None
    assert mfu(no_tokens).reason == TOKENS_MISSING
    no_model = load_session(write_jsonl_session(tmp_path, "b", gpus=gpus, tokens_per_step=1000))
    assert mfu(no_model).reason == ("model parameter count not logged (a model_info record with "
                                       "parameters_total)")
    odd_gpu = load_session(write_jsonl_session(tmp_path, "c", gpus=[{"index": 0, "name": "Imaginary X1"}],
                                               model_info=info, tokens_per_step=1000))
    assert mfu(odd_gpu).reason == "GPU model 'Imaginary X1' is not in the peak table (peaks.GPU_PEAK_TFLOPS)"
    assert mfu(odd_gpu).achieved_tflops is not None  # what can be computed still is
    no_trainable = load_session(write_jsonl_session(tmp_path, "d", gpus=gpus, tokens_per_step=1000,
                                                    model_info={"parameters_total": 1_000_000}))
    m = mfu(no_trainable)
    assert m.flops_per_token == 6 * 1_000_000 and m.mfu is not None
    assert m.assumptions == ("parameters_trainable not logged: every weight taken as trainable (6 N per token)",)


def test_mfu_of_the_real_cpu_run_says_why():
    folder = fixture_session(1)
    s = load_session(folder)
    (path,) = folder.glob("*_rank0.jsonl")
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    start = next(r for r in recs if r["type"] == "session_start")
    expected = []
    assert start["mode"] in ("CPU", "MULTI-CPU")  # the fixture is a CPU run
    expected.append("a CPU run: MFU is measured against a GPU's peak FLOP/s")
    if not any(r["type"] == "model_info" and r.get("parameters_total") for r in recs):
        expected.append("model parameter count not logged (a model_info record with parameters_total)")
    if not any(r["type"] == "training_step_complete" and r["metrics"].get("tokens_per_second") for r in recs):
        expected.append(TOKENS_MISSING)
    m = mfu(s)
    assert m.mfu is None and m.reason == "; ".join(expected)
