"""Work one rank does alone while the others wait in a collective, on real 2-rank DDP runs (``accelerate
launch``, gloo CPU ranks) of a hand-written loop with ``TrainingLogger`` (``tests/support/solo_train.py``):
rank 0 saving alone after step 5 (a 1.5 s sleep in ``tlog.phase("save")``) is named with its phase, step and
length, and rank 1's wait; both ranks saving together is not; rank 0 hung in its save while rank 1's
all-reduce times out is the hang's culprit, named as saving. Oracles: the sleep's length as the loop
measured it, and the run's own arguments."""

from __future__ import annotations

import json

import pytest

from tests.support.launch import accelerate_launch, analyze_logs, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

SECONDS, AFTER, HOLD = 1.5, 5, 0.6


def _run(tmp_path, name: str, *extra: str, check: bool = True):
    logs = tmp_path / name
    try:
        accelerate_launch("tests/support/solo_train.py", ["--log-dir", str(logs), "--after", str(AFTER),
                                                          "--facts", str(tmp_path / f"{name}_facts"), *extra],
                          2, cwd=tmp_path, timeout=240)
    except AssertionError:
        if check:
            raise
    (session,) = session_dirs(logs)
    return logs, session


def _findings(logs) -> list[dict]:
    r = analyze_logs(str(logs), "--no-cache", "--diagnose", "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["findings"]


def test_rank_0_saving_alone_is_named_with_its_phase_step_and_length(tmp_path):
    logs, _ = _run(tmp_path, "solo", "--seconds", str(SECONDS))
    slept = json.loads((tmp_path / "solo_facts.rank0.json").read_text())["slept"]  # the loop's own clock
    (f,) = [f for f in _findings(logs) if f["kind"] == "solo_work"]
    assert f["solo_rank"] == 0 and f["ranks"] == [0, 1]
    (e,) = f["occurrences"]
    assert e["what"] == ["save"] and e["after_step"] == AFTER and e["step"] == AFTER + 1
    assert abs(e["solo_s"] - slept) < 0.05 and e["waiting_ranks"] == [1]
    assert e["waited_s"] >= 1.2 and e["waited_s"] <= slept + 0.05  # rank 1 waited for most of the sleep, no more
    assert f["title"].startswith(f"Rank 0 saved a checkpoint alone after step {AFTER} ({slept:.1f} s) while rank 1")
    assert "gradient sync (all_reduce) of step 6" in f["detail"] and "timeout" in f["detail"]


def test_both_ranks_saving_together_is_no_solo_work(tmp_path):
    # rank 0 also sleeps HOLD s after its save, outside any phase: rank 1 waits for it at step 6, so the saves are
    # looked at (counted in full they would explain that wait); HOLD is under the unrecorded gap's 1 s
    logs, session = _run(tmp_path, "together", "--seconds", str(SECONDS), "--on-all", "--hold", str(HOLD))
    for rank in (0, 1):  # both did save
        saves = [r for r in read_jsonl(next(session.glob(f"*_rank{rank}.jsonl")))
                 if r["type"] == "timed_phase" and r["phase"] == "save"]
        assert len(saves) == 1 and saves[0]["duration_s"] >= SECONDS
    # rank 1 did wait for rank 0 at step 6: its gradient sync there (its step_phases record) lasted ~HOLD
    (sync,) = [r["sync_s"] for r in read_jsonl(next(session.glob("*_rank1.jsonl")))
               if r["type"] == "step_phases" and r["step"] == AFTER + 1]
    assert sync >= HOLD - 0.1
    assert not [f for f in _findings(logs) if f["kind"] == "solo_work"]


def test_a_hang_inside_rank_0s_save_names_the_save(tmp_path):
    # rank 0 sleeps an hour in its save; rank 1's all-reduce of step 6 times out after 6 s and fails the run
    logs, session = _run(tmp_path, "hang", "--seconds", "3600", "--pg-timeout", "6", "--stall-min-s", "2",
                         check=False)
    rank0 = read_jsonl(next(session.glob("*_rank0.jsonl")))
    (begin,) = [r for r in rank0 if r["type"] == "phase_begin"]
    assert begin["phase"] == "save" and begin["step"] == AFTER
    assert not [r for r in rank0 if r["type"] == "timed_phase" and r["phase"] == "save"]  # never ended
    (hang,) = [f for f in _findings(logs) if f["kind"] == "hang"]
    assert hang["culprit_ranks"] == [0] and hang["waiting_ranks"] == [1] and hang["culprit_phases"] == {"0": "save"}
    assert hang["title"] == f"Hang: rank 0 was saving a checkpoint and never reached the gradient sync of step {AFTER + 1}"
    assert f"Rank 0 was saving a checkpoint (save) after step {AFTER}, begun" in hang["detail"]
    # begun about the process group's timeout (6 s) before rank 1's last record (its failure)
    begun = float(hang["detail"].split(", begun ")[1].split(" s before")[0])
    assert 5 <= begun <= 9


def test_rank_0_working_alone_outside_any_phase_is_an_unrecorded_gap(tmp_path):
    logs, _ = _run(tmp_path, "gap", "--seconds", str(SECONDS), "--unrecorded")
    slept = json.loads((tmp_path / "gap_facts.rank0.json").read_text())["slept"]
    (f,) = [f for f in _findings(logs) if f["kind"] == "solo_work"]
    (e,) = f["occurrences"]
    assert e["rank"] == 0 and e["what"] == [] and e["step"] == AFTER + 1 and e["waiting_ranks"] == [1]
    assert abs(e["solo_s"] - slept) < 0.05 and 1.2 <= e["waited_s"] <= slept + 0.05
    assert f"between steps {AFTER} and {AFTER + 1} on work no phase records" in f["title"]
    assert "tlog.phase" in f["detail"]
