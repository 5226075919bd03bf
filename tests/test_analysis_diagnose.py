"""Diagnose: findings ranked by severity, each with evidence, from fixtures and synthetic sessions."""

from __future__ import annotations

import json

from logkit.analysis.analyze import Analysis, analyze
from logkit.analysis.diagnose import SEVERITIES
from logkit.ingest import load_session, load_sessions
from tests.analysis_synth import gpu_rows, session, step_rows

CONSOLE = "sample_logs/console/"


def _kinds(findings):
    return [f["kind"] for f in findings]


def test_nccl_timeout_and_mismatch_fixture():
    a = analyze([load_session(CONSOLE + "torchrun_nccl_timeout.log")])
    f = {x["kind"]: x for x in a.findings}
    t = f["nccl_timeout"]
    assert t["severity"] == "critical" and t["seq"] == 451 and t["ranks"] == [0, 1]
    assert t["evidence"] == ["torchrun_nccl_timeout.log:39", "torchrun_nccl_timeout.log:40"]
    assert t["ops"] == ["ALLREDUCE", "BROADCAST"] and "mismatch" in t["detail"]
    m = f["collective_mismatch"]
    assert m["seq"] == 451 and m["ranks"] == [0, 1]
    c = f["child_failed"]
    assert c["severity"] == "error" and "SIGABRT" in c["detail"] and "Root cause: rank 1" in c["detail"]
    order = [SEVERITIES.index(x["severity"]) for x in a.findings]
    assert order == sorted(order)


def test_oom_and_old_shape_timeouts():
    a = analyze([load_session(CONSOLE + "mpirun_oom_mismatch.log")])
    f = {x["kind"]: x for x in a.findings}
    assert f["cuda_oom"]["ranks"] == [0, 1] and "2.00 GiB" in f["cuda_oom"]["detail"]
    assert f["nccl_timeout"]["seq"] == 77 and f["nccl_timeout"]["ranks"] == [2, 3]
    assert f["collective_mismatch"]["seq"] == 78 and f["collective_mismatch"]["ranks"] == [0, 2]
    assert all(":" in e for e in f["cuda_oom"]["evidence"])


def test_nan_fixture():
    a = analyze([load_session(CONSOLE + "seed003_gpu_prefixed.log")])
    (nan,) = [x for x in a.findings if x["kind"] == "nan"]
    assert nan["severity"] == "error" and nan["evidence"] == ["seed003_gpu_prefixed.log:11"]


def test_steps_not_rescaled_real_fixture():
    a = analyze(load_sessions("sample_logs/qlora_tiny_cpu/logs"))
    (f,) = [x for x in a.findings if x["kind"] == "config_steps_not_rescaled"]
    assert f["samples_ratio"] == 2.0 and "not rescaled" in f["title"]
    assert all("/" not in e for e in f["evidence"])  # base names, never paths


def test_device_map_auto_straggler_low_util():
    busy = session("auto", gpu=gpu_rows({0: [95.0, 97.0], 1: [1.0, 0.0]}), steps=step_rows([0.5] * 10))
    times0, times1 = [0.40] * 20, [0.50] * 20
    strag = session("strag", world_size=2, steps=step_rows(times0) + step_rows(times1, rank=1),
                    gpu=gpu_rows({0: [30.0, 35.0], 1: [90.0, 92.0]}))
    a = analyze([busy, strag])
    kinds = _kinds(a.findings)
    assert "config_device_map_auto" in kinds and "straggler" in kinds and "low_gpu_util" in kinds
    (s,) = [x for x in a.findings if x["kind"] == "straggler"]
    assert s["ranks"] == [1] and s["evidence"] == ["strag_rank1.jsonl"]


def test_analysis_to_dict_is_json():
    a = analyze(load_sessions("sample_logs/qlora_tiny_cpu/logs") + [load_session(CONSOLE + "torchrun_nccl_timeout.log")])
    assert isinstance(a, Analysis)
    d = a.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert "NaN" not in text
    assert set(d) >= {"scaling", "communication", "performance", "stragglers", "gpus", "mfu", "health",
                      "loss_parity", "findings", "communication_peaks", "definitions"}
    comp = d["scaling"]["comparisons"][0]
    assert {"speedup", "steady_speedup", "speedup_ci", "flags", "ci_level", "steady_state"} <= set(comp)
    assert {"count", "total_bytes", "p50_ms", "latency_bound", "link"} <= set(d["communication"][0])
