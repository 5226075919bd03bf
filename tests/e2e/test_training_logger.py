"""TrainingLogger in a real hand-written accelerate loop on 2 CPU ranks, with accumulation."""

from __future__ import annotations

import orjson
import pytest

from logkit.schema import COMMUNICATION, MULTIGPU_STEP, PROCESS_LINE, SessionFiles
from tests.support.launch import accelerate_launch, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

STEPS, ACCUM, BATCH, COMM_EVERY = 10, 2, 8, 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    # small DDP buckets (DDP keeps its first bucket at 1 MiB: a 2 MB layer): several Communication
    # lines per step, to check they stay under their own step
    accelerate_launch("examples/train_accelerate_loop.py", [
        "--log-dir", str(tmp / "logs"), "--steps", str(STEPS), "--grad-accum", str(ACCUM),
        "--batch-size", str(BATCH), "--losses-out", str(tmp / "seen"), "--hidden", "16384", "--bucket-cap-mb", "0.05",
        "--log-setting", f"comm_log_interval={COMM_EVERY}"], 2, cwd=tmp)
    (session,) = session_dirs(tmp / "logs")
    return tmp, session, SessionFiles(session.name)


def test_hand_written_loop_on_two_ranks(run):
    tmp_path, session, files = run
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
        # the JSONL stream too: a step's record comes before its sync records
        order = [(r["type"], r["step"]) for r in records if r["type"] in ("training_step_complete", "communication")]
        for i, (kind, step) in enumerate(order):
            if kind == "communication":
                assert ("training_step_complete", step) in order[:i]
    summary = orjson.loads((session / files.summary_json).read_bytes())
    assert summary["world_size"] == 2 and summary["total_steps"] == STEPS
    assert summary["communication"]["gradient_sync"]["count"] == len(
        [r for r in read_jsonl(session / files.rank_jsonl(0)) if r["type"] == "communication"])


def test_multigpu_log_puts_each_communication_line_under_its_own_step(run):
    _, session, files = run
    expected = [r for r in read_jsonl(session / files.rank_jsonl(0))
                if r["type"] == "communication" and r["step"] % COMM_EVERY == 0]
    buckets = {r["step"]: 0 for r in expected}
    for r in expected:
        buckets[r["step"]] += 1
    assert min(buckets.values()) >= 2  # the small bucket cap gave several syncs per step
    header_steps, lines, current = [], [], None
    for raw in (session / files.multigpu_log).read_text().splitlines():
        prefixed = PROCESS_LINE.parse(raw)
        if not prefixed:
            continue
        if (mg := MULTIGPU_STEP.parse(prefixed["message"])) is not None:
            current = mg["step"]
            header_steps.append(current)
            assert (mg["processes"], mg["process_index"], mg["local_rank"]) == (2, 0, 0)
        elif (comm := COMMUNICATION.parse(prefixed["message"])) is not None:
            assert current is not None, "a Communication line before any Multi-GPU Step line"
            lines.append((current, comm))
    # the step line and its syncs at the same interval, each step once
    assert header_steps == list(range(COMM_EVERY, STEPS + 1, COMM_EVERY))
    assert len(lines) == len(expected)
    for (step, line), record in zip(lines, expected, strict=True):
        assert step == record["step"]
        assert line["op"] == record["op"] and line["rank"] == 0
        assert line["size_mb"] == pytest.approx(record["size_bytes"] / 1e6, abs=0.005)
        assert line["duration_ms"] == pytest.approx(record["duration_ms"], abs=0.005)
