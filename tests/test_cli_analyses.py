"""analyze_logs' analyses: --communication, --performance, --diagnose, --json on each, --plot,
--export, --session, --fail-under-efficiency / --fail-on exit codes (in-process, click's runner)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from logkit.cli import analyze_logs
from logkit.report.plots import PLOTS
from tests.synth import write_session

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


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
    doc = json.loads(run(logs, "--diagnose", "--json").stdout)
    assert isinstance(doc["findings"], list) and "severity" in doc["definitions"]
    doc = json.loads(run(logs, "--performance", "--json").stdout)
    assert {"performance", "stragglers", "gpus", "mfu"} <= set(doc)


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


def test_fail_under_efficiency_on_the_real_runs():
    r = run(SAMPLES / "qlora_tiny_cpu" / "logs", "--json", "--fail-under-efficiency", "0.8")
    eff = json.loads(r.stdout)["comparisons"][0]["scaling_efficiency"]
    assert r.exit_code == (1 if eff < 0.8 else 0)
    assert r.exit_code == 0 or "below --fail-under-efficiency 0.8 (80.0%)" in r.stderr


def test_fail_on_severity():
    console = SAMPLES / "console"
    assert run(console, "--diagnose", "--fail-on", "critical").exit_code == 1
    r = run(SAMPLES / "qlora_tiny_cpu" / "logs", "--fail-on", "critical")
    assert r.exit_code == 0


def test_plot_writes_the_pngs(logs, tmp_path):
    out = tmp_path / "figs"
    r = run(logs, f"--plot={out}")
    assert r.exit_code == 0, r.output
    assert "6 plots written to" in r.stdout and "⚡" not in r.stdout  # --plot alone prints no comparison
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
    shutil.copytree(SAMPLES / "seed002_sessions" / "sessions", tmp_path / "sessions")
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
    assert html.count("<img") == len(PLOTS) and "<h2>Diagnosis</h2>" in html
    assert "🩺 DIAGNOSIS" in r.stdout
