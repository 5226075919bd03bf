"""Diagnose: findings ranked by severity, each with evidence, from fixtures and synthetic sessions."""

from __future__ import annotations

import json
import re

import pytest

from logkit.analysis import Analysis, analyze
from logkit.run.load import load_session, load_sessions
from logkit.schema.findings import SEVERITIES
from tests.support.analysis_synth import event_rows, gpu_rows, session, step_rows
from tests.support.launch import REPO

CONSOLE = "sample_logs/console/"


def _kinds(findings):
    return [f.kind for f in findings]


def _dicts(a) -> list[dict]:
    """The findings as the JSON gives them."""
    return [x.to_dict() for x in a.findings]


def test_nccl_timeout_and_mismatch_fixture():
    a = analyze([load_session(CONSOLE + "torchrun_nccl_timeout.log")])
    f = {x["kind"]: x for x in _dicts(a)}
    t = f["nccl_timeout"]
    assert t["severity"] == "critical" and t["seq"] == 451 and t["ranks"] == [0, 1]
    assert t["evidence"] == ["torchrun_nccl_timeout.log:39", "torchrun_nccl_timeout.log:40"]
    assert t["ops"] == ["ALLREDUCE", "BROADCAST"] and "mismatch" in t["detail"]
    m = f["collective_mismatch"]
    assert m["seq"] == 451 and m["ranks"] == [0, 1]
    c = f["child_failed"]
    assert c["severity"] == "error" and "SIGABRT" in c["detail"] and "Root cause: rank 1" in c["detail"]
    order = [SEVERITIES.index(x["severity"]) for x in _dicts(a)]
    assert order == sorted(order)


def test_oom_and_old_shape_timeouts():
    a = analyze([load_session(CONSOLE + "mpirun_oom_mismatch.log")])
    f = {x["kind"]: x for x in _dicts(a)}
    assert f["cuda_oom"]["ranks"] == [0, 1] and "2.00 GiB" in f["cuda_oom"]["detail"]
    assert f["nccl_timeout"]["seq"] == 77 and f["nccl_timeout"]["ranks"] == [2, 3]
    assert f["collective_mismatch"]["seq"] == 78 and f["collective_mismatch"]["ranks"] == [0, 2]
    assert all(":" in e for e in f["cuda_oom"]["evidence"])


def test_nan_fixture():
    a = analyze([load_session(CONSOLE + "stdout_gpu_prefixed.log")])
    (nan,) = [x for x in _dicts(a) if x["kind"] == "nan"]
    assert nan["severity"] == "error" and nan["evidence"] == ["stdout_gpu_prefixed.log:11"]


def test_steps_not_rescaled_real_fixture():
    a = analyze(load_sessions("sample_logs/qlora_tiny_cpu/logs"))
    (f,) = [x for x in _dicts(a) if x["kind"] == "config_steps_not_rescaled"]
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
    (s,) = [x for x in _dicts(a) if x["kind"] == "straggler"]
    assert s["ranks"] == [1] and s["evidence"] == [f"strag_rank1.jsonl (steps 1-{len(times1)})"]


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


SEED000 = REPO / "sample_logs" / "text_logs" / "logs" / "training_20241206_143022"


def _where(pattern: str) -> list[str]:
    """file:line of every line of the text-log fixture's logs matching ``pattern``, found here with grep-like code."""
    out = []
    for path in sorted(SEED000.glob("*.log")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line):
                out.append(f"{path.name}:{number}")
    return out


def test_text_log_warnings_become_findings_with_their_lines():
    a = analyze([load_session(SEED000)])
    f = {x["kind"]: x for x in _dicts(a)}
    timeout = _where(r"WARNING.*NCCL communication timeout")
    low = _where(r"WARNING.*utilization low: 45\.2%")
    slow = _where(r"WARNING.*Slow training detected: 15\.1s per step")
    assert len(timeout) == len(low) == len(slow) == 1  # the fixture holds each once
    assert f["nccl_timeout"]["evidence"] == timeout
    # the run completed (summary.json status): a critical timeout is reported as an error, and says so
    assert f["nccl_timeout"]["severity"] == "error" and "completed" in f["nccl_timeout"]["detail"]
    assert f["gpu_util_low"]["evidence"] == low and "GPU 1: 45.2%" in f["gpu_util_low"]["detail"]
    assert f["slow_step"]["evidence"] == slow and "15.1 s per step" in f["slow_step"]["detail"]
    assert all(f[k]["severity"] == "warning" for k in ("gpu_util_low", "slow_step"))


@pytest.mark.parametrize("kind,severity", [("slow_step", "warning"), ("gpu_util_low", "warning"),
                                           ("memory_high", "warning"), ("gpu_memory_high", "warning"),
                                           ("loss_spike", "warning"), ("grad_explode", "warning"),
                                           ("grad_vanish", "warning")])
def test_emitter_kinds_map_to_findings(kind, severity):
    events = event_rows(*({"kind": "anomaly", "subkind": kind, "value": 10.0 + i, "threshold": 5.0, "rank": i,
                           "step": 3 + i, "source": f"r{i}.jsonl:{7 + i}", "level": "WARNING"} for i in range(2)))
    a = analyze([session("e", world_size=2, events=events)])
    (f,) = [x for x in _dicts(a) if x["kind"] == kind]
    assert f["severity"] == severity and f["evidence"] == ["r0.jsonl:7", "r1.jsonl:8"] and f["ranks"] == [0, 1]
    assert "Threshold: 5" in f["detail"] and "(2)" in f["title"]


@pytest.mark.parametrize("message,kind", [
    ("Distributed backend initialization failed", "distributed_init_failed"),
    ("NCCL communication timeout", "nccl_timeout"),
    ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)", "nccl_timeout"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
    ("Connection reset by peer", "network_error"),
])
def test_generic_lines_naming_a_known_problem(message, kind):
    events = event_rows({"kind": "error", "message": message, "rank": 0, "source": "train.log:12"},
                        {"kind": "warning", "message": "something else entirely", "rank": 0, "source": "train.log:13",
                         "level": "WARNING"})
    a = analyze([session("g", events=events, status=None)])
    f = {x["kind"]: x for x in _dicts(a)}
    assert f[kind]["evidence"] == ["train.log:12"] and f[kind]["severity"] in ("critical", "error")
    assert f["warning_lines"]["evidence"] == ["train.log:13"] and f["warning_lines"]["severity"] == "info"
    assert "error" not in f  # the matched error line is not counted twice


def test_frame_findings_cite_lines_or_step_ranges():
    times = [0.4] * 30
    times[12] = 3.0
    s = session("fr", steps=step_rows(times))
    a = analyze([s])
    (slow,) = [x for x in _dicts(a) if x["kind"] == "slow_steps"]
    assert slow["evidence"] == ["fr_rank0.jsonl (step 13)"]


def test_nan_detected_events_are_counted_once_per_step():
    from logkit.analysis.kernels.health import session_health

    events = event_rows({"kind": "nan_detected", "subkind": "nan_loss", "rank": 0, "step": 5, "source": "x.log:9"},
                        {"kind": "anomaly", "subkind": "nan_loss", "rank": 0, "step": 5, "source": "x.jsonl:3"},
                        {"kind": "nan_detected", "subkind": "nan_grad_norm", "rank": 1, "step": 6,
                         "source": "y.log:2"})
    h = session_health(session("n", world_size=2, events=events))
    assert [(p.step, p.rank, p.source) for p in h.nan_steps] == [(5, 0, "x.log:9"), (6, 1, "y.log:2")]
    assert h.nan_count == 2 and h.nan_events == 2


def test_verbose_fixture_nan_grad_norm_has_its_line():
    path = REPO / "sample_logs" / "verbose_jsonl" / "verbose_training_logs.jsonl"
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r'"grad_norm":\s*(NaN|Infinity|-Infinity)', line)]
    a = analyze([load_session(path)])
    (nan,) = [x for x in _dicts(a) if x["kind"] == "nan"]
    assert nan["evidence"] == [f"{path.name}:{n}" for n in lines] and lines
