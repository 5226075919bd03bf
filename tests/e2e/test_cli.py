"""``analyze_logs`` run as a user runs it: a subprocess, real folders, stdout/stderr/exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.synth import append_bytes, rank_file, write_session

# The first keys of a session and of a comparison in the JSON, in the order users read them.
SUMMARY_KEYS = ("session_id", "mode", "world_size", "gpu_count", "duration_s", "total_steps", "steps_per_second",
                "samples_per_second", "total_batch_size", "final_loss", "basis", "basis_detail", "logged_steps",
                "total_batch_size_from", "final_loss_from", "kind")
COMPARISON_KEYS = ("baseline", "candidate", "speedup", "scaling_efficiency", "regime", "step_rate_ratio")


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logkit.cli", *map(str, args)], capture_output=True,
                          text=True, encoding="utf-8", cwd=cwd, timeout=120)


@pytest.fixture
def logs(tmp_path):
    root = tmp_path / "logs"
    write_session(root, "cpu_single", world_size=1, step_times=[0.5] * 6, total_batch_size=8,
                  start="2026-11-22T01:00:00+00:00")
    write_session(root, "cpu_multi", world_size=2, step_times=[0.3] * 6, total_batch_size=8,
                  start="2026-11-22T02:00:00+00:00")
    return root


def test_compare_prints_the_seed_style_comparison(logs):
    r = run(logs, "--compare")
    assert r.returncode == 0, r.stderr
    speedup = (8 / 0.3) / (8 / 0.5)
    # the verdict first (the counterfactual, then the pay-off), then the comparison: 6 steps of 8 samples, 48 at
    # 16 samples/s on 1 rank take 3 s; the 2-rank run took 6 x 0.3 = 1.8 s on 2 ranks: 0.001 rank-hours
    verdict, out = r.stdout.split("\n\n", 1)
    assert verdict.splitlines()[:4] == ["VERDICT", "=" * 60,
                                        "On 1 rank this run would have taken 3 s; on 2 it took 1.8 s: 0.001 rank-hours "
                                        "for 1.2 s saved.",
                                        f"Multi-GPU paid off: 2 ranks ran {speedup:.2f}x the "
                                        f"samples/s of 1 ({speedup / 2:.0%} scaling efficiency, steady state)."]
    assert out.startswith("SINGLE-PROCESS vs MULTI-PROCESS COMPARISON (CPU)\n" + "=" * 60)
    assert "📱 SINGLE-PROCESS SESSIONS (1):" in out and "🔗 MULTI-PROCESS SESSIONS (1):" in out
    assert "  Session: cpu_single" in out and "  Ranks: 2" in out
    assert "  Duration: 4.5s (0.1min)" in out
    assert f"Speedup: {speedup:.2f}x" in out
    assert f"Scaling Efficiency: {speedup / 2 * 100:.1f}%" in out
    assert "Regime: strong scaling" in out
    assert "throughput ratio" in out and r.stderr == ""


def test_default_action_and_default_folder(logs):
    r = run(cwd=logs.parent)  # no arguments: ./logs, compare
    assert r.returncode == 0, r.stderr
    assert "⚡ PERFORMANCE COMPARISON:" in r.stdout
    assert run("--log-dir", logs).stdout == r.stdout


def test_verdict_prints_the_verdict_alone(logs):
    # what a run logged with trainer_hooks prints when it ends: the block every console output opens with
    r = run(logs, "--verdict")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == run(logs).stdout.split("\n\n", 1)[0] + "\n"
    assert r.stdout.startswith("VERDICT\n" + "=" * 60 + "\nOn 1 rank this run would have taken 3 s")
    assert "\nMulti-GPU paid off: 2 ranks ran " in r.stdout
    assert run(logs, "--verdict", "--no-cache").stdout == r.stdout
    # a kept answer of another question is not this one's (the answers' cache keys on --verdict)
    assert run(logs, "--verdict").stdout == r.stdout and run(logs).stdout != r.stdout
    for other in (["--json"], ["--diagnose"], ["--report", str(logs / "r.html")]):
        r = run(logs, "--verdict", *other)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.strip() == f"analyze_logs: --verdict prints the verdict only; run {other[0]} without it"


def test_gpu_sessions_use_gpu_words(tmp_path):
    write_session(tmp_path, "g1", world_size=1, gpu_count=1, gpu_util=(80.0, 100.0))
    write_session(tmp_path, "g2", world_size=2, gpu_count=2, step_times=[0.3] * 10,
                  start="2026-11-22T03:00:00+00:00")
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("VERDICT\n") and "\n\nSINGLE GPU vs MULTI-GPU COMPARISON\n" in r.stdout
    assert "📱 SINGLE GPU SESSIONS (1):" in r.stdout and "🔗 MULTI-GPU SESSIONS (1):" in r.stdout
    assert "  GPU 0: 90.0% avg util, 100.0% peak, 50.0% avg memory" in r.stdout
    assert "🚀 Multi-GPU Speedup: 1.67x" in r.stdout and "📊 GPU Efficiency: 83.3%" in r.stdout


def test_json_is_the_only_stdout(logs):
    r = run(logs, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"sessions", "comparisons", "definitions"} <= set(doc)
    assert [tuple(s)[: len(SUMMARY_KEYS)] for s in doc["sessions"]] == [SUMMARY_KEYS, SUMMARY_KEYS]
    (c,) = doc["comparisons"]
    assert tuple(c)[: len(COMPARISON_KEYS)] == COMPARISON_KEYS
    assert c["speedup"] == pytest.approx((8 / 0.3) / (8 / 0.5))
    assert c["regime"] == "strong"


def test_session_id_filter(logs):
    r = run(logs, "--json", "--session-id", "cpu_multi")
    assert [s["session_id"] for s in json.loads(r.stdout)["sessions"]] == ["cpu_multi"]
    assert json.loads(r.stdout)["comparisons"] == []
    r = run(logs, "--session-id", "nope")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "nope" in r.stderr


def test_missing_folder_one_line_exit_2(tmp_path):
    r = run(tmp_path / "nope")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"analyze_logs: no such folder: {tmp_path / 'nope'}"]
    assert "Traceback" not in r.stderr and r.stdout == ""
    r = run(cwd=tmp_path)  # default ./logs, absent
    assert r.returncode == 2 and r.stderr.strip() == "analyze_logs: no such folder: logs"


def test_a_folder_of_nothing_readable_says_what_was_looked_for_exit_2(tmp_path):
    (tmp_path / "x.txt").write_text("hello", encoding="utf-8")
    r = run(tmp_path)
    assert r.returncode == 2
    said = r.stderr.strip().splitlines()
    assert said[0] == f"analyze_logs: no logkit sessions found under {tmp_path}"
    assert said[1].startswith("  formats looked for: logkit_jsonl") and "console" in said[1]
    assert said[2:] == [f"  {tmp_path / 'x.txt'}: not read: its first bytes ('hello') are none of the formats "
                        "looked for"]
    assert "Traceback" not in r.stderr


def test_torn_line_is_a_note_and_the_run_goes_on(logs):
    path = rank_file(logs / "cpu_multi", "cpu_multi", 1)
    n = len(path.read_bytes().splitlines())
    append_bytes(path, b'{"type": "training_step_comp')
    r = run(logs, "--json")
    assert r.returncode == 0
    assert r.stderr.strip().splitlines() == [f"note: {path}:{n + 1}: torn last line (no newline; the writer was cut off)"]
    assert len(json.loads(r.stdout)["comparisons"]) == 1


def test_notes_are_capped(logs):
    append_bytes(rank_file(logs / "cpu_single", "cpu_single", 0), b"garbage\n" * 30)
    r = run(logs)
    notes = r.stderr.strip().splitlines()
    assert r.returncode == 0 and len(notes) == 21
    assert notes[-1] == "note: ... and 10 more parse diagnostics (see --report)"


def test_report_default_path_and_explicit_path(logs):
    r = run(logs, "--report", cwd=logs.parent)
    assert r.returncode == 0, r.stderr
    assert (logs.parent / "logkit_report.html").is_file() and "logkit_report.html" in r.stdout
    out = logs.parent / "sub" / "r.html"
    r = run(logs, "--json", f"--report={out}")
    assert r.returncode == 0 and out.is_file()
    json.loads(r.stdout)  # the report's message went to stderr
    assert str(out) in r.stderr


def test_two_different_folders_is_an_error(logs, tmp_path):
    r = run(logs, "--log-dir", tmp_path)
    assert r.returncode == 2 and "give one" in r.stderr and "Traceback" not in r.stderr


def test_console_script_next_to_the_interpreter(logs):
    script = Path(sys.executable).parent / "analyze_logs"
    if not script.exists():
        pytest.skip("console script not installed next to this interpreter")
    r = subprocess.run([str(script), str(logs), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and {"sessions", "comparisons"} <= set(json.loads(r.stdout))
