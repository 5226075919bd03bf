"""TrainingLogger in a real hand-written accelerate loop on 2 CPU ranks, with accumulation."""

from __future__ import annotations

import orjson
import pytest

from logkit.schema import SessionFiles
from tests.launch import accelerate_launch, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

STEPS, ACCUM, BATCH = 10, 2, 8


def test_hand_written_loop_on_two_ranks(tmp_path):
    accelerate_launch("examples/train_accelerate_loop.py", [
        "--log-dir", str(tmp_path / "logs"), "--steps", str(STEPS), "--grad-accum", str(ACCUM),
        "--batch-size", str(BATCH), "--losses-out", str(tmp_path / "seen")], 2, cwd=tmp_path)
    (session,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(session.name)
    for rank in (0, 1):
        seen = orjson.loads((tmp_path / f"seen.rank{rank}.json").read_bytes())
        records = read_jsonl(session / files.rank_jsonl(rank))
        assert records[0]["type"] == "session_start" and records[-1]["status"] == "completed"
        steps = [r for r in records if r["type"] == "training_step_complete"]
        assert [r["metrics"]["loss"] for r in steps] == seen["losses"]  # each rank's own losses
        assert {r["metrics"]["total_batch_size"] for r in steps} == {BATCH * ACCUM * 2}
        comm = [r for r in records if r["type"] == "communication"]
        # accumulation micro-steps do not synchronise: one sync per optimizer step
        assert sorted({r["step"] for r in comm}) == list(range(1, STEPS + 1))
        per_step = {}
        for r in comm:
            per_step[r["step"]] = per_step.get(r["step"], 0) + r["size_bytes"]
        assert set(per_step.values()) == {seen["param_bytes"]}
    summary = orjson.loads((session / files.summary_json).read_bytes())
    assert summary["world_size"] == 2 and summary["total_steps"] == STEPS
    assert summary["communication"]["gradient_sync"]["count"] == len(
        [r for r in read_jsonl(session / files.rank_jsonl(0)) if r["type"] == "communication"])
