"""analyze_logs' analyses: --communication, --performance, --diagnose, --json on each, --plot,
--export, --session, --fail-under-efficiency / --fail-on exit codes (in-process, click's runner)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from logkit.cli import analyze_logs
from logkit.report.plots import PLOTS
from tests.support.launch import REPO
from tests.support.oracles import warmup_oracle
from tests.support.synth import write_session

SAMPLES = REPO / "sample_logs"


def run(*args):
    return CliRunner().invoke(analyze_logs, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Two runs with known throughput: 8 samples per 0.5 s on 1 rank, per 0.3 s on 2 ranks."""
    root = tmp_path_factory.mktemp("cli") / "logs"
    write_session(root, "cpu_single", world_size=1, step_times=[0.5] * 6, total_batch_size=8,
                  start="2026-11-22T01:00:00+00:00")
    write_session(root, "cpu_multi", world_size=2, step_times=[0.3] * 6, total_batch_size=8,
                  start="2026-11-22T02:00:00+00:00")
    return root


EFFICIENCY = (8 / 0.3) / (8 / 0.5) / 2  # 0.8333


def test_communication_console_and_json(logs):
    r = run(logs, "--communication")
    assert r.exit_code == 0, r.output
    assert "📡 Session: cpu_multi" in r.stdout and "    gradient_sync: 6 occurrences" in r.stdout
    assert "      Avg data size: 4.00MB" in r.stdout and "      Total data: 24.00MB" in r.stdout  # synth: 4e6 B each
    assert "Definitions:" in r.stdout
    r = run(logs, "--communication", "--json")
    doc = json.loads(r.stdout)
    assert {"communication", "definitions"} <= set(doc)
    rows = [c for c in doc["communication"] if c["session_id"] == "cpu_multi" and c["rank"] == 0]
    assert rows[0]["count"] == 6 and rows[0]["total_bytes"] == 24_000_000


def test_performance_and_diagnose(logs):
    r = run(logs, "--performance", "--diagnose")
    assert r.exit_code == 0, r.output
    assert "  Rank 1: 6 steps, step time p50 0.300s, p95 0.300s, max 0.300s, mean 0.300s" in r.stdout
    assert "🩺 DIAGNOSIS:" in r.stdout
    # synth writes one resource_warning memory_high (value 91, threshold 90) per rank: three streams
    streams = sorted(logs.rglob("*_rank*.jsonl"))
    where = [f"{p.name}:{n}" for p in streams for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if '"kind":"memory_high"' in line.replace(" ", "")]
    assert len(where) == 3
    doc = json.loads(run(logs, "--diagnose", "--json").stdout)
    (mem,) = [f for f in doc["findings"] if f["kind"] == "memory_high" and f["session_id"] == "cpu_multi"]
    assert sorted(mem["evidence"]) == sorted(w for w in where if w.startswith("cpu_multi"))
    assert "Threshold: 90" in mem["detail"] and "largest value: 91" in mem["detail"]
    assert "severity" in doc["definitions"]
    doc = json.loads(run(logs, "--performance", "--json").stdout)
    assert {"performance", "stragglers", "gpus", "mfu"} <= set(doc)
    assert doc["mfu"]["cpu_multi"]["reason"].startswith("a CPU run")


def test_diagnose_of_the_text_logs_names_what_its_logs_say():
    folder = SAMPLES / "text_logs"
    r = run(folder, "--diagnose")
    assert r.exit_code == 0, r.output
    logs = sorted(folder.rglob("*.log"))
    hits = {}
    for p in logs:
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for key in ("NCCL communication timeout", "utilization low", "Slow training detected"):
                if key in line and "WARNING" in line:
                    hits[key] = f"{p.name}:{n}"
    assert len(hits) == 3
    for evidence in hits.values():
        assert f"    evidence: {evidence}" in r.stdout
    assert "[ERROR] NCCL communication timeout" in r.stdout


def test_json_of_everything_is_one_document(logs):
    r = run(logs, "--compare", "--communication", "--performance", "--diagnose", "--json")
    doc = json.loads(r.stdout)
    assert {"sessions", "comparisons", "communication", "performance", "findings", "definitions"} <= set(doc)
    assert doc["comparisons"][0]["scaling_efficiency"] == pytest.approx(EFFICIENCY)


@pytest.mark.parametrize("threshold,status", [("0.8", 0), ("0.9", 1)])
def test_fail_under_efficiency(logs, threshold, status):
    r = run(logs, "--fail-under-efficiency", threshold)
    assert r.exit_code == status
    if status:
        assert f"scaling efficiency of cpu_multi against cpu_single is {EFFICIENCY * 100:.1f}%" in r.stderr
    else:
        assert r.stderr == ""
    assert "🚀 Multi-process Speedup" in r.stdout  # the comparison is still printed


def _efficiencies(folder: Path) -> tuple[float, float]:
    """(steady, whole-run) scaling efficiency of the 2-rank fixture run against the 1-rank one, from the
    JSONL records read here; warm-up by the definition, written out in tests/support/oracles.py."""
    runs = {}
    for path in folder.rglob("*_rank0.jsonl"):
        recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        steps = sorted((r for r in recs if r["type"] == "training_step_complete"), key=lambda r: r["step"])
        t = np.array([r["timing"]["step_time_seconds"] for r in steps])
        b = np.array([r["metrics"]["total_batch_size"] for r in steps], dtype=float)
        runs[recs[0]["world_size"]] = (t, b)
    (t1, b1), (t2, b2) = runs[1], runs[2]
    k1, k2 = warmup_oracle(t1), warmup_oracle(t2)
    steady = (b2[k2:].sum() / t2[k2:].sum()) / (b1[k1:].sum() / t1[k1:].sum()) / 2
    whole = (b2.sum() / t2.sum()) / (b1.sum() / t1.sum()) / 2
    return steady, whole


def test_fail_under_efficiency_on_the_real_runs():
    folder = SAMPLES / "qlora_tiny_cpu" / "logs"
    steady, whole = _efficiencies(folder)
    r = run(folder, "--fail-under-efficiency", f"{steady - 0.01:.4f}")
    assert r.exit_code == 0, r.stderr
    r = run(folder, "--fail-under-efficiency", f"{steady + 0.01:.4f}")
    assert r.exit_code == 1
    assert f"is {steady * 100:.1f}% (steady state; whole run {whole * 100:.1f}%), below" in r.stderr
    if abs(steady - whole) > 0.004:  # a threshold between the two: the gate follows the steady state
        between = (steady + whole) / 2
        assert run(folder, "--fail-under-efficiency", f"{between:.4f}").exit_code == (0 if steady > whole else 1)


def test_fail_under_efficiency_with_nothing_to_compare(tmp_path):
    write_session(tmp_path, "alone", world_size=2, step_times=[0.3] * 6)
    r = run(tmp_path, "--fail-under-efficiency", "0.8")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == ["analyze_logs: --fail-under-efficiency: nothing to compare (no run on "
                                             "more ranks than a baseline of the same model, both with a throughput)"]


def test_report_into_a_folder(logs, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    r = run(logs, "--report", folder)
    assert r.exit_code == 0, r.output
    assert (folder / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    r = run(logs, "--report", f"{tmp_path / 'new'}/")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "new" / "report.html").is_file()


def test_fail_on_severity():
    console = SAMPLES / "console"
    assert run(console, "--diagnose", "--fail-on", "critical").exit_code == 1
    r = run(SAMPLES / "qlora_tiny_cpu" / "logs", "--fail-on", "critical")
    assert r.exit_code == 0


def test_plot_writes_the_pngs(logs, tmp_path):
    out = tmp_path / "figs"
    r = run(logs, f"--plot={out}")
    assert r.exit_code == 0, r.output
    assert f"{len(PLOTS)} plots written to" in r.stdout and "⚡" not in r.stdout  # --plot alone prints no comparison
    for name in PLOTS:
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] >= 800


def test_plot_default_folder(logs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run(logs, "--plot")
    assert r.exit_code == 0, r.output
    assert "plots written to plots" in r.stdout and (tmp_path / "plots" / "training_comparison.png").is_file()


def test_export_parquet(logs, tmp_path):
    r = run(logs, "--export", "parquet", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)  # the messages went to stderr
    for sid in ("cpu_single", "cpu_multi"):
        assert (tmp_path / "out" / sid / "steps.parquet").is_file()
    r = run(logs, "--export", "xlsx", tmp_path / "out")
    assert r.exit_code == 2 and "xlsx" in r.stderr


def test_session_name_resolves_the_seed_002_folder(tmp_path, monkeypatch):
    shutil.copytree(SAMPLES / "pipeline_sessions" / "sessions", tmp_path / "sessions")
    monkeypatch.chdir(tmp_path)
    r = run("--session", "v1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert sorted(s["session_id"] for s in doc["sessions"]) == ["v1/multi_gpu", "v1/single_gpu"]
    r = run(tmp_path, "--session", "v1")
    assert r.exit_code == 0 and "v1/multi_gpu" in r.stdout
    r = run(tmp_path, "--session", "nope")
    assert r.exit_code == 2 and "no session folder 'nope'" in r.stderr and "sessions found: v1" in r.stderr


def test_report_with_analyses(logs, tmp_path):
    out = tmp_path / "r.html"
    r = run(logs, f"--report={out}", "--diagnose")
    assert r.exit_code == 0, r.output
    html = out.read_text(encoding="utf-8")
    # every plot with data; the GPUs' and the step breakdown's absence said in words (CPU runs, no phases timed)
    drawn = {name for name in PLOTS if f'<img alt="{name}"' in html}
    assert html.count("<img") == len(drawn) and "<h2>Diagnosis</h2>" in html
    assert drawn == set(PLOTS) - {"gpu_utilization.png", "step_breakdown.png"}
    assert "No GPU snapshots" in html and "no per-step phases" in html
    assert "🩺 DIAGNOSIS" in r.stdout
