"""Fast tests on real logs from one NVIDIA H100 (sample_logs/gpu/, made by
sample_logs/regenerate_gpu.sh): a bf16 4-bit QLoRA run, the same at ultra, the hand-written
loop under monitor_gpu, and nvidia-smi captures taken meanwhile. Each figure is checked
against the raw files, read here independently of logkit's readers."""

from __future__ import annotations

import csv
import statistics

import orjson
import pytest

import logkit
from logkit.analysis.analyze import analyze
from logkit.analysis.kernels.groups import session_kind
from tests.support.launch import REPO, analyze_logs, read_jsonl

GPU = REPO / "sample_logs" / "gpu"
H100 = "NVIDIA H100 80GB HBM3"


def _stream(run: str) -> list[dict]:
    (path,) = (GPU / run / "logs").glob("*/*_rank0.jsonl")
    return read_jsonl(path)


@pytest.fixture(scope="module")
def sessions():
    found = logkit.load_sessions(GPU)
    return {s.session_id: s for s in found}


def _by_run(sessions, run: str):
    sid = _stream(run)[0]["session_id"]
    return sessions[sid]


def test_every_file_is_read_without_a_diagnostic(sessions):
    kinds = sorted(session_kind(s) for s in sessions.values())
    assert kinds == ["gpu_capture"] * 3 + ["training"] * 3  # monitor_gpu's file is a capture too
    assert all(s.diagnostics.empty for s in sessions.values())


def test_qlora_on_one_gpu_matches_trainer_state_and_names_the_gpu(sessions):
    s = _by_run(sessions, "qlora_single_gpu")
    state = orjson.loads((GPU / "qlora_single_gpu" / "outputs" / "trainer_state.json").read_bytes())
    logged = {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}
    assert list(s.steps["step"]) == sorted(logged) and len(logged) == 300
    assert list(s.steps["loss"]) == [logged[k] for k in sorted(logged)]
    assert s.meta["mode"] == "SINGLE-GPU" and s.meta["world_size"] == 1 and s.meta["status"] == "completed"
    assert s.meta["gpus"][0]["name"] == H100
    start = _stream("qlora_single_gpu")[0]
    assert start["type"] == "session_start" and start["gpus"][0]["compute_capability"] == "9.0"
    model = next(r for r in _stream("qlora_single_gpu") if r["type"] == "model_info")
    assert "4bit" in str(model).lower() or "nf4" in str(model).lower()
    assert 0 < model["parameters_trainable"] < model["parameters_total"]


def test_gpu_figures_are_the_snapshots_means(sessions):
    s = _by_run(sessions, "qlora_single_gpu")
    snaps = [r for r in _stream("qlora_single_gpu") if r["type"] == "gpu_snapshot"]
    devices = [r["devices"][0] for r in snaps]
    assert all(d["name"] == H100 and d["power_w"] > 50 and d["sm_clock_mhz"] > 0 for d in devices)
    table = analyze([s]).gpus
    row = table.iloc[0]
    assert row["avg_util"] == pytest.approx(statistics.mean(d["utilization_percent"] for d in devices), abs=0.05)
    assert row["peak_util"] == pytest.approx(max(d["utilization_percent"] for d in devices), abs=0.05)


def test_mfu_on_a_known_gpu_is_lora_aware(sessions):
    s = _by_run(sessions, "qlora_single_gpu")
    records = _stream("qlora_single_gpu")
    model = next(r for r in records if r["type"] == "model_info")
    m = analyze([s]).mfu[s.session_id]
    n, trainable = model["parameters_total"], model["parameters_trainable"]
    assert m.flops_per_token == 4 * n + 2 * trainable  # frozen 4-bit weights: no weight gradients
    assert m.peak_tflops == 989.0  # the H100's dense BF16 peak (peaks table)
    steps = [r for r in records if r["type"] == "training_step_complete"]
    raw = sum(r["metrics"]["tokens_per_second"] * r["timing"]["step_time_seconds"] for r in steps) / sum(
        r["timing"]["step_time_seconds"] for r in steps)
    assert m.tokens_per_second == pytest.approx(raw, rel=0.15)  # steady steps vs every step
    assert m.mfu == pytest.approx(m.flops_per_token * m.tokens_per_second / 989e12, rel=1e-3)


def test_ultra_logs_layer_norms_and_batches_on_the_gpu():
    records = _stream("qlora_ultra")
    steps = [r for r in records if r["type"] == "training_step_complete"]
    assert len(steps) == 200 and len([r for r in records if r["type"] == "batch_complete"]) == 200
    assert all(len(r["layer_grad_norms"]) == len(steps[0]["layer_grad_norms"]) > 50 for r in steps)
    assert all("lora_" in name for name in steps[0]["layer_grad_norms"])  # only what trains


def test_monitor_gpu_snapshots(sessions):
    path = GPU / "loop_monitored" / "gpu_monitor.jsonl"
    snaps = read_jsonl(path)
    s = sessions["gpu_monitor"]
    assert len(s.gpu) == len(snaps) >= 5
    assert list(s.gpu["utilization_pct"]) == [r["devices"][0]["utilization_percent"] for r in snaps]


def test_nvidia_smi_captures_taken_on_the_gpu(sessions):
    with open(GPU / "captures" / "nvidia_smi_query.csv", newline="") as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    s = sessions["nvidia_smi_query"]
    assert len(s.gpu) == len(rows) > 50
    assert list(s.gpu["utilization_pct"]) == [float(r["utilization.gpu [%]"].split()[0]) for r in rows]
    assert list(s.gpu["power_w"]) == [float(r["power.draw [W]"].split()[0]) for r in rows]
    dmon = [line.split() for line in (GPU / "captures" / "nvidia_smi_dmon.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    d = sessions["nvidia_smi_dmon"]
    assert len(d.gpu) == len(dmon) and list(d.gpu["power_w"]) == [float(x[1]) for x in dmon]


def test_the_cli_reads_the_gpu_folder_as_a_user_runs_it(sessions):
    proc = analyze_logs(str(GPU), "--performance", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    sid = _by_run(sessions, "qlora_single_gpu").session_id
    expected = analyze([sessions[sid]]).mfu[sid]
    got = doc["mfu"][sid]
    assert (got["gpu_model"], got["gpu_name"]) == ("H100 SXM", H100)
    assert got["mfu"] == pytest.approx(expected.mfu) and 0.001 < got["mfu"] < 0.2
