"""The text logs at the emitter level: step-line interval, detailed communication logs on and
off, and sync timings read from the GPU a step late, on a logger that believes it is rank 0 of 2."""

from __future__ import annotations

import time

import pytest

from logkit.schema import COMMUNICATION, MULTIGPU_STEP, PROCESS_LINE, STEP_LINE, SessionFiles
from tests.support.launch import read_jsonl
from tests.unit.hooks.test_findings import _FakeEvent
from trainer_hooks import session_logger as session_mod
from trainer_hooks import timing_plan
from trainer_hooks.distributed import RankInfo
from trainer_hooks.session_logger import SessionLogger

BUCKET_BYTES = (3_000_000, 1_000_000)


@pytest.fixture
def two_ranks(monkeypatch):
    """Rank 0 of a 2-process CPU job, with the gradient-sync hook 'installed' on a stand-in."""
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 2, 0, "gloo", "cpu", "testhost"))
    monkeypatch.setattr(timing_plan, "find_ddp", lambda model: model)
    monkeypatch.setattr(timing_plan, "install_comm_hook", lambda ddp, timer: None)


def _run(tmp_path, steps: int, late: dict | None = None, **settings) -> tuple[SessionLogger, SessionFiles]:
    """``steps`` steps with two timed buckets each. ``late``: {step: step at whose end the GPU
    has finished that step's second bucket} (CUDA events read later, as on a busy GPU)."""
    late = late or {}
    log = SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, **settings)
    log.start(per_device_batch_size=2, max_steps=steps)
    assert log.attach_model(object()) is True
    log.comm.group_size = 2
    open_events: dict[int, _FakeEvent] = {}
    for step in range(1, steps + 1):
        log.step_begin()
        for s, event in list(open_events.items()):
            if late[s] == step:
                event.done = True
                del open_events[s]
        for bucket, size in enumerate(BUCKET_BYTES):
            end = _FakeEvent(2.0 + bucket, done=not (bucket == 1 and step in late))
            if not end.done:
                open_events[step] = end
            log.comm.pending.append((bucket, size, _FakeEvent(0.0), end, bucket))
        time.sleep(0.002)
        log.step_end(step, loss=1.0 / step, learning_rate=1e-3)
    log.end()
    return log, SessionFiles(log.session_id)


def _multigpu(folder, files) -> list[tuple[int, dict]]:
    """(step of the Multi-GPU Step line above it, parsed line) for every Communication line,
    and the header steps in order."""
    headers, lines, current = [], [], None
    path = folder / files.multigpu_log
    for raw in path.read_text().splitlines():
        p = PROCESS_LINE.parse(raw)
        if p is None:
            continue
        if (mg := MULTIGPU_STEP.parse(p["message"])) is not None:
            current = mg["step"]
            headers.append(current)
        elif (c := COMMUNICATION.parse(p["message"])) is not None:
            assert current is not None
            lines.append((current, c))
    return headers, lines


@pytest.mark.parametrize("every", [1, 4])
def test_step_lines_every_n_steps(tmp_path, two_ranks, every):
    log, files = _run(tmp_path, 10, log_interval_steps=every)
    main = (tmp_path / log.session_id / files.main_log).read_text().splitlines()
    steps = [STEP_LINE.parse(x)["step"] for x in main if STEP_LINE.parse(x)]
    assert steps == sorted(set(range(every, 11, every)) | {10})  # and the final step always


def test_communication_lines_follow_their_step_even_when_read_late(tmp_path, two_ranks):
    # steps 3 and 4: the second bucket's timing is read one and two steps later
    log, files = _run(tmp_path, 6, late={3: 4, 4: 6}, comm_log_interval=1)
    folder = tmp_path / log.session_id
    records = [r for r in read_jsonl(folder / files.rank_jsonl(0)) if r["type"] == "communication"]
    # read in launch order, so still grouped by step; step 3's arrive with step 4's record,
    # step 4's second with step 6's
    assert [(r["step"], r["bucket"]) for r in records] == [(s, b) for s in range(1, 7) for b in (0, 1)]
    steps = {r["step"]: r["elapsed_s"] for r in read_jsonl(folder / files.rank_jsonl(0))
             if r["type"] == "training_step_complete"}
    late_ones = {(r["step"], r["bucket"]): r["elapsed_s"] for r in records}
    assert steps[4] <= late_ones[(3, 1)] and steps[6] <= late_ones[(4, 1)]
    headers, lines = _multigpu(folder, files)
    assert headers == [1, 2, 3, 4, 5, 6]  # once each, in order
    assert len(lines) == len(records)
    for (step, line), record in zip(lines, records, strict=True):
        assert step == record["step"]
        assert line["size_mb"] == pytest.approx(record["size_bytes"] / 1e6)


def test_comm_lines_at_their_interval_only(tmp_path, two_ranks):
    log, files = _run(tmp_path, 9, comm_log_interval=3)
    headers, lines = _multigpu(tmp_path / log.session_id, files)
    assert headers == [3, 6, 9]
    assert [(step, line["size_mb"]) for step, line in lines] == [
        (s, b / 1e6) for s in (3, 6, 9) for b in BUCKET_BYTES]


def test_detailed_communication_logs_off(tmp_path, two_ranks):
    log, files = _run(tmp_path, 5, detailed_communication_logs=False)
    folder = tmp_path / log.session_id
    headers, lines = _multigpu(folder, files)
    assert headers == [] and lines == []
    text = (folder / files.multigpu_log).read_text()
    assert "World size: 2" in text and "Communication" not in text
    # the JSONL stream keeps every sync: only the text lines are off
    records = [r for r in read_jsonl(folder / files.rank_jsonl(0)) if r["type"] == "communication"]
    assert len(records) == 5 * len(BUCKET_BYTES)


def test_a_sharded_steps_collectives_are_a_line_each_under_its_step(tmp_path, two_ranks):
    """FSDP2's collectives of a step, one communication record (collectives[]), give one Communication line
    each under their step's header, with each one's op and size."""
    from trainer_hooks.fsdp_comm import ALL_GATHER, REDUCE_SCATTER, FsdpCommTimer

    log = SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, comm_log_interval=2)
    log.start(per_device_batch_size=2, max_steps=4)
    timer = FsdpCommTimer()
    timer.group_size = 2
    log.comm, log._comm_timed = timer, True  # as if fsdp_comm.install had wrapped a model
    sizes = {ALL_GATHER: (4_000_000, 2_000_000), REDUCE_SCATTER: (4_000_000, 2_000_000)}
    for step in range(1, 5):
        log.step_begin()
        now = time.perf_counter()
        for seq, (op, phase, unit) in enumerate([(ALL_GATHER, "forward", 0), (ALL_GATHER, "forward", 1),
                                                 (REDUCE_SCATTER, "backward", 1), (REDUCE_SCATTER, "backward", 0)]):
            timer.pending.append((unit, sizes[op][unit], now + seq * 0.001, now + seq * 0.001 + 0.0005, seq, op, phase))
        timer.launched = 4
        log.step_end(step, loss=1.0 / step, learning_rate=1e-3)
    log.end()
    files = SessionFiles(log.session_id)
    folder = tmp_path / log.session_id
    records = [r for r in read_jsonl(folder / files.rank_jsonl(0)) if r["type"] == "communication"]
    assert [(r["step"], len(r["collectives"])) for r in records] == [(s, 4) for s in range(1, 5)]
    headers, lines = _multigpu(folder, files)
    assert headers == [2, 4]
    assert [(step, line["op"], line["size_mb"]) for step, line in lines] == [
        (s, op, mb) for s in (2, 4) for op, mb in (("all_gather", 4.0), ("all_gather", 2.0), ("reduce_scatter", 2.0),
                                                   ("reduce_scatter", 4.0))]
