"""summary.json / summary.txt of a real 2-rank run with many small gradient buckets (gloo runs them
one after the other, so each bucket's span includes its wait behind the earlier ones and their
durations add up past the step): the share of training time is of wall time, at most 100%."""

from __future__ import annotations

import re

import orjson
import pytest

from logkit.schema.files import SessionFiles
from tests.support.launch import accelerate_launch, read_jsonl, session_dirs

pytestmark = pytest.mark.slow


def test_overlapping_buckets_share_of_training_time_is_of_wall_time(tmp_path):
    accelerate_launch("examples/train_accelerate_loop.py", [
        "--log-dir", str(tmp_path / "logs"), "--steps", "12", "--batch-size", "16", "--hidden", "16384",
        "--bucket-cap-mb", "0.05"], 2, cwd=tmp_path)
    (session,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(session.name)
    summary = orjson.loads((session / files.summary_json).read_bytes())
    sync, training = summary["communication"]["gradient_sync"], summary["training_time_seconds"]
    comm = [r for r in read_jsonl(session / files.rank_jsonl(0)) if r["type"] == "communication"]
    by_step: dict[int, list[float]] = {}
    for r in comm:
        by_step.setdefault(r["step"], []).append(r["duration_ms"] / 1e3)
    # 3 buckets a step once DDP has rebuilt them after the first (the first layer's weight, 2 MB, alone)
    assert max(len(d) for d in by_step.values()) >= 3
    # per step, the union of the buckets' spans is at least the longest and at most their sum
    assert sum(max(d) for d in by_step.values()) - 1e-6 <= sync["in_flight_s"] <= sync["total_time_s"] + 1e-6
    assert sync["in_flight_s"] < sync["total_time_s"]  # they overlapped
    assert sync["in_flight_s"] <= training
    assert 0 < sync["share_of_training_time"] <= 1.0
    # the summary rounds the share to 5 decimals (and the seconds it is made of): within 1e-5 of their ratio
    assert sync["share_of_training_time"] == pytest.approx(sync["in_flight_s"] / training, abs=1e-5)
    text = (session / files.summary_txt).read_text()
    (pct,) = re.findall(r"in flight ([0-9.]+)% of training time", text)
    assert float(pct) <= 100.0 and float(pct) == pytest.approx(100 * sync["share_of_training_time"], abs=0.051)
    print(f"sum of bucket durations {sync['total_time_s'] / training:.1%} of training time, "
          f"in flight {sync['share_of_training_time']:.1%}")
