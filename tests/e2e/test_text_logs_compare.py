"""Sessions that left only their text logs (main, multigpu, performance; no JSONL, no
summary.json) compare on their own: the speedup, efficiency and regime the figures in their lines
imply, strong and weak scaling both. Built from the text-log fixture's lines, with the step
figures the test chooses; the expected values are computed here from those figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.launch import REPO, analyze_logs

FIXTURE = REPO / "sample_logs" / "text_logs" / "logs" / "training_20241206_143022"
SID = "training_20241206_143022"


def _session(root: Path, sid: str, ranks: int, step_times: tuple[float, float], samples_s: tuple[float, float],
             perf: tuple[float, float, int] | None) -> None:
    """A text-only session: the fixture's logs with ``ranks`` GPUs, its two step lines' Metrics
    set to ``step_times`` / ``samples_s``, and its Performance line to ``perf`` (avg step time,
    samples/s, total batch) or no performance log."""
    folder = root / sid
    folder.mkdir(parents=True)
    for path in FIXTURE.glob("*.log"):
        if path.name.endswith("_performance.log") and perf is None:
            continue
        text = path.read_text(encoding="utf-8").replace(SID, sid)
        text = (text.replace("Mode: MULTI-GPU", "Mode: " + ("MULTI-GPU" if ranks > 1 else "SINGLE-GPU"))
                .replace("GPU Count: 2", f"GPU Count: {ranks}").replace("World size: 2", f"World size: {ranks}")
                .replace("Accelerator processes: 2", f"Accelerator processes: {ranks}"))
        for old, t, s in zip(("step_duration: 0.400, samples_per_second: 5.0",
                              "step_duration: 0.385, samples_per_second: 5.2"), step_times, samples_s, strict=True):
            assert old in text or "Metrics" not in text
            text = text.replace(old, f"step_duration: {t:.3f}, samples_per_second: {s:.1f}")
        if perf is not None:
            old = "Avg step time: 0.380s | Throughput: 10.5 samples/s | Total batch size: 4"
            text = text.replace(old, f"Avg step time: {perf[0]:.3f}s | Throughput: {perf[1]:.1f} samples/s | "
                                     f"Total batch size: {perf[2]}")
        (folder / path.name.replace(SID, sid)).write_text(text, encoding="utf-8")
    assert not list(folder.glob("*.json")) and not list(folder.glob("*.jsonl"))


def _comparison(root: Path) -> dict:
    res = analyze_logs(str(root), "--no-cache", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["not_compared"] == []
    (comparison,) = doc["comparisons"]
    return comparison


def test_strong_scaling_from_performance_lines_batch(tmp_path):
    # the global batch (4, both runs) is said only by the Performance lines
    one, two = (0.700, 0.690), (0.400, 0.385)
    _session(tmp_path, "training_20241206_120000", 1, one, (4 / one[0], 4 / one[1]), (0.68, 5.9, 4))
    _session(tmp_path, SID, 2, two, (4 / two[0], 4 / two[1]), (0.38, 10.5, 4))
    c = _comparison(tmp_path)
    base, cand = 2 * 4 / sum(one), 2 * 4 / sum(two)  # sum of batches / sum of step times
    assert c["baseline_samples_per_second"] == pytest.approx(base)
    assert c["candidate_samples_per_second"] == pytest.approx(cand)
    assert c["speedup"] == pytest.approx(cand / base)
    assert c["scaling_efficiency"] == pytest.approx(cand / base / 2)
    assert c["regime"] == "strong" and c["rank_ratio"] == 2


def test_weak_scaling_from_the_batches_the_metrics_lines_imply(tmp_path):
    # no performance log: each step line's samples/s x step time is its batch (2 on one GPU, 4 on two)
    one, two = (0.500, 0.520), (0.560, 0.540)
    s1 = (round(2 / one[0], 1), round(2 / one[1], 1))
    s2 = (round(4 / two[0], 1), round(4 / two[1], 1))
    _session(tmp_path, "training_20241206_120000", 1, one, s1, None)
    _session(tmp_path, SID, 2, two, s2, None)
    c = _comparison(tmp_path)
    base = (s1[0] * one[0] + s1[1] * one[1]) / sum(one)
    cand = (s2[0] * two[0] + s2[1] * two[1]) / sum(two)
    assert c["baseline_samples_per_second"] == pytest.approx(base, rel=1e-6)
    assert c["candidate_samples_per_second"] == pytest.approx(cand, rel=1e-6)
    assert c["speedup"] == pytest.approx(cand / base, rel=1e-6)
    assert c["scaling_efficiency"] == pytest.approx(cand / base / 2, rel=1e-6)
    assert c["regime"] == "weak"
