"""The solo-work detector and the hang's phase, on small frames built here: each rank's arrival at each step's
collectives is drawn (a few ms of jitter), then a rank is held back between two steps by a known amount;
the waits, lateness and data times are computed from those arrivals here, as the breakdown defines them
(a rank waits from its own arrival to the last one's)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from logkit.analysis.findings.hang import hang_findings
from logkit.analysis.findings.solo_work import solo_events, solo_work_findings
from logkit.schema.records import EventType

STEPS, STEP_S, DATA_S = 20, 0.1, 0.01


def _rows(ranks: int = 3, held: dict | None = None, late_every_step: dict | None = None, seed: int = 0,
          jitter: float = 0.003) -> pd.DataFrame:
    """Synced-step rows: ``held`` {(rank, step): seconds} of time a rank spends before that step (in its data
    time); ``late_every_step`` {rank: seconds} it arrives later at every step (a straggler)."""
    rng = np.random.default_rng(seed)
    held, late_every_step = held or {}, late_every_step or {}
    out = []
    for step in range(1, STEPS + 1):
        arrive = {r: rng.normal(0, jitter) + held.get((r, step), 0.0) + late_every_step.get(r, 0.0)
                  for r in range(ranks)}
        last, first = max(arrive.values()), min(arrive.values())
        for r in range(ranks):
            out.append(dict(rank=r, step=step, data_s=DATA_S + held.get((r, step), 0.0), compute_s=0.05,
                            sync_s=0.01 + last - arrive[r], wait_s=last - arrive[r], lateness_s=arrive[r] - first,
                            comm_exposed_s=0.01, other_s=0.005, step_s=STEP_S + last - first))
    return pd.DataFrame(out)


def _session(phases=(), begins=(), steps=None, marks=()) -> SimpleNamespace:
    """A session holding ``phases`` (rank, step, phase, seconds) as timed_phase records, ``begins`` (rank, step,
    phase, clock) as phase_begin records and ``marks`` (kind, rank, step, phase, clock) records."""
    ev = [dict(kind=EventType.TIMED_PHASE, rank=r, step=s, phase=p, duration_s=d, time_s=100.0 + i, clock_s=None,
               source=f"s_rank{r}.jsonl:{10 + i}", status=None, stack=None, phase_detail=None)
          for i, (r, s, p, d) in enumerate(phases)]
    ev += [dict(kind=EventType.PHASE_BEGIN, rank=r, step=s, phase=p, duration_s=None, time_s=50.0 + i, clock_s=c,
                source=f"s_rank{r}.jsonl:{5 + i}", status=None, stack=None, phase_detail=None)
           for i, (r, s, p, c) in enumerate(begins)]
    ev += [dict(kind=k, rank=r, step=s, phase=p, duration_s=None, time_s=60.0 + i, clock_s=c,
                source=f"s_rank{r}.jsonl:{30 + i}", status=None, stack=rest[0] if rest else None, phase_detail=None)
           for i, (k, r, s, p, c, *rest) in enumerate(marks)]
    events = pd.DataFrame(ev, columns=["kind", "rank", "step", "phase", "duration_s", "time_s", "clock_s", "source",
                                       "status", "stack", "phase_detail"])
    return SimpleNamespace(events=events, comm=pd.DataFrame(), steps=steps if steps is not None else pd.DataFrame(),
                           session_id="s", meta=SimpleNamespace(session_id="s", files=["s_rank0.jsonl"]))


def _expected_wait(rows: pd.DataFrame, step: int, solo: int) -> float:
    """The least wait of the other ranks at ``step``, each less its own median wait (the module's definition)."""
    usual = rows.groupby("rank")["wait_s"].median()
    at = rows[(rows["step"] == step) & (rows["rank"] != solo)]
    return float((at["wait_s"] - at["rank"].map(usual)).min())


def test_rank_0_saving_alone_is_named_with_the_phase_the_step_and_who_waited():
    rows = _rows(held={(0, 11): 2.0})
    (e,) = solo_events(_session(phases=[(0, 10, "save", 2.0)]), rows)
    assert (e["rank"], e["step"], e["after_step"], e["what"], e["waiting_ranks"]) == (0, 11, 10, ["save"], [1, 2])
    assert e["solo_s"] == 2.0
    assert abs(e["waited_s"] - _expected_wait(rows, 11, 0)) < 1e-12 and e["waited_s"] > 1.98
    (f,) = solo_work_findings(_session(phases=[(0, 10, "save", 2.0)]), rows)
    assert f.kind == "solo_work" and f.ranks == (0, 1, 2) and f.extra["solo_rank"] == 0
    assert f.title.startswith("Rank 0 saved a checkpoint alone after step 10 (2.0 s) while ranks 1, 2 waited 2.0 s")
    assert "timeout" in f.detail and f.evidence == ("s_rank0.jsonl:10",)


def test_a_phase_every_rank_runs_together_is_no_ones_alone():
    # all three saved 2 s after step 10; rank 0 is also held 2 s (its data time at step 11), so ranks 1 and 2
    # wait 2 s for it: its save, no longer than theirs, explains none of that wait (counted in full it would)
    rows = _rows(held={(0, 11): 2.0})
    assert _expected_wait(rows, 11, 0) > 1.98
    phases = [(r, 10, "save", 2.0) for r in range(3)]
    assert solo_events(_session(phases=phases), rows) == []
    assert solo_work_findings(_session(phases=phases), rows) == []


def test_a_phase_on_every_rank_but_longer_on_one_counts_its_excess():
    # rank 0 evaluates 1.6 s, the others 0.4 s: rank 0 is 1.2 s late at step 11
    rows = _rows(held={(0, 11): 1.2})
    phases = [(0, 10, "eval", 1.6), (1, 10, "eval", 0.4), (2, 10, "eval", 0.4)]
    (e,) = solo_events(_session(phases=phases), rows)
    assert e["what"] == ["eval"] and abs(e["solo_s"] - 1.2) < 1e-9 and e["waited_s"] > 1.18


def test_an_unrecorded_gap_is_named_as_such_and_a_short_one_is_not():
    (e,) = solo_events(_session(), _rows(held={(2, 7): 1.5}))
    # the gap: rank 2's data time at step 7 above its median (DATA_S + 1.5 - DATA_S)
    assert (e["rank"], e["step"], e["what"]) == (2, 7, []) and abs(e["solo_s"] - 1.5) < 1e-9
    (f,) = solo_work_findings(_session(), _rows(held={(2, 7): 1.5}))
    assert "between steps 6 and 7 on work no phase records" in f.title
    # 0.6 s: a wait well above the noise, but an unexplained gap below SOLO_GAP_MIN_S (1 s)
    assert solo_events(_session(), _rows(held={(2, 7): 0.6})) == []


def test_jitter_and_a_chronic_straggler_are_not_solo_work():
    assert solo_events(_session(), _rows(seed=3, jitter=0.02)) == []
    # rank 1 is 50 ms late at every step: the straggler finding's, not this one's
    assert solo_events(_session(), _rows(late_every_step={1: 0.05})) == []
    # ...but its one long save is still solo work, measured above its usual lateness
    (e,) = solo_events(_session(phases=[(1, 4, "save", 1.0)]), _rows(late_every_step={1: 0.05}, held={(1, 5): 1.0}))
    assert e["rank"] == 1 and e["step"] == 5 and 0.98 < e["waited_s"] < 1.02


def test_a_wait_the_phase_does_not_explain_is_left_alone():
    # rank 0 saved 0.3 s but arrived 2 s late: the save explains 15% of it, and there is no data gap
    rows = _rows(held={(0, 11): 2.0})
    rows.loc[(rows["rank"] == 0) & (rows["step"] == 11), "data_s"] = DATA_S + 0.3
    assert solo_events(_session(phases=[(0, 10, "save", 0.3)]), rows) == []


def test_a_hang_inside_a_phase_names_it_from_its_begin_record_alone():
    # rank 0 began saving after step 5 at clock 1000 and its stream stops (killed: no stall, no end); rank 1's
    # stall and error say it waits in the gradient sync of step 6, its last record at clock 1640
    steps = pd.DataFrame([dict(rank=r, step=s) for r in (0, 1) for s in range(1, 6)])
    session = _session(begins=[(0, 5, "save", 1000.0)], steps=steps,
                       marks=[(EventType.STALL, 1, 6, "gradient_sync", 1630.0),
                              (EventType.ERROR, 1, 6, "gradient_sync", 1640.0)])
    (hang,) = hang_findings(session)
    assert hang.extra["culprit_ranks"] == [0] and hang.extra["waiting_ranks"] == [1]
    assert hang.extra["culprit_phases"] == {0: "save"}
    assert hang.title == "Hang: rank 0 was saving a checkpoint and never reached the gradient sync of step 6"
    # 1640 - 1000 = 640 s
    assert "Rank 0 was saving a checkpoint (save) after step 5, begun 640 s before the waiting ranks' last record" \
        in hang.detail


def test_an_ended_phase_is_not_where_a_rank_hangs():
    steps = pd.DataFrame([dict(rank=r, step=s) for r in (0, 1) for s in range(1, 6)])
    session = _session(phases=[(0, 5, "save", 1.0)], begins=[(0, 5, "save", 1000.0)], steps=steps,
                       marks=[(EventType.STALL, 1, 6, "gradient_sync", 1630.0)])
    (hang,) = hang_findings(session)
    assert "culprit_phases" not in hang.extra and "saving" not in hang.title


# a Trainer rank's training thread inside its checkpoint save, as traceback.format_stack prints it (the frames of
# transformers' trainer.py and torch's serialization.py on the way from the training loop to torch.save)
TRAINER_SAVE_STACK = """  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2548, in _inner_training_loop
    self._maybe_log_save_evaluate(
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3011, in _maybe_log_save_evaluate
    self._save_checkpoint(model, trial)
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3103, in _save_checkpoint
    self._save_optimizer_and_scheduler(output_dir)
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 850, in save
    _save(
"""


def test_a_trainer_rank_between_steps_whose_stack_is_saving_is_named_saving():
    # the callback knows no phase's start: the stall record says "data" (between steps), its stack says saving
    steps = pd.DataFrame([dict(rank=r, step=s) for r in (0, 1) for s in range(1, 501)])
    session = _session(steps=steps, marks=[(EventType.STALL, 0, 501, "data", 900.0, TRAINER_SAVE_STACK),
                                           (EventType.STALL, 1, 501, "gradient_sync", 950.0)])
    (hang,) = hang_findings(session)
    assert hang.extra["culprit_ranks"] == [0] and hang.extra["culprit_phases"] == {0: "save"}
    assert hang.title == "Hang: rank 0 was saving a checkpoint and never reached the gradient sync of step 501"
    assert "serialization.py:850" in hang.detail  # the innermost frame, where it was
    from logkit.analysis.findings.solo_phases import ALONE_ADVICE

    assert ALONE_ADVICE in hang.detail  # the same advice as the solo_work finding's


def test_save_and_evaluation_frames_of_other_frameworks():
    from logkit.analysis.findings.solo_phases import phase_of_stack

    frame = '  File "/venv/lib/python3.11/site-packages/{}", line 10, in {}\n    code()\n'
    # the innermost save or evaluation frame decides; a data loader's frames say nothing
    assert phase_of_stack(frame.format("deepspeed/runtime/engine.py", "save_checkpoint")) == "save"
    assert phase_of_stack(frame.format("accelerate/accelerator.py", "save_state")) == "save"
    assert phase_of_stack(frame.format("transformers/trainer.py", "evaluation_loop")) == "eval"
    assert phase_of_stack(frame.format("lightning/pytorch/loops/evaluation_loop.py", "_evaluation_step")) == "eval"
    assert phase_of_stack(frame.format("transformers/trainer.py", "evaluate")
                          + frame.format("transformers/trainer.py", "_save_checkpoint")) == "save"
    assert phase_of_stack(frame.format("torch/utils/data/dataloader.py", "__next__")) is None
    assert phase_of_stack(None) is None


def test_a_pause_every_rank_takes_at_the_same_step_is_no_ones_alone():
    # a data loader's epoch boundary: rank 0 pauses 3.0 s, rank 1 3.4 s before step 11; rank 0 waits 0.4 s,
    # rank 1's excess over rank 0 (0.4 s) is under SOLO_GAP_MIN_S (1 s)
    rows = _rows(ranks=2, held={(0, 11): 3.0, (1, 11): 3.4})
    assert solo_events(_session(), rows) == []
    assert solo_work_findings(_session(), rows) == []


def test_an_unrecorded_pause_on_every_rank_counts_only_the_late_ranks_excess():
    # both evaluate without a phase record, rank 0 60 s and rank 1 62 s: rank 1 alone for 62 - 60 = 2 s
    rows = _rows(ranks=2, held={(0, 11): 60.0, (1, 11): 62.0})
    (e,) = solo_events(_session(), rows)
    assert (e["rank"], e["step"], e["what"], e["waiting_ranks"]) == (1, 11, [], [0])
    assert abs(e["solo_s"] - 2.0) < 1e-9
    # the same as timed phases: the same 2 s
    (p,) = solo_events(_session(phases=[(0, 10, "eval", 60.0), (1, 10, "eval", 62.0)]), rows)
    assert p["what"] == ["eval"] and abs(p["solo_s"] - 2.0) < 1e-9


def test_an_old_save_stall_does_not_place_a_rank_a_later_record_placed():
    # rank 0 stalled saving after step 100, went on, and its error at step 501 says it was between steps (data)
    steps = pd.DataFrame([dict(rank=r, step=s) for r in (0, 1) for s in range(1, 501)])
    session = _session(steps=steps, marks=[(EventType.STALL, 0, 101, "data", 500.0, TRAINER_SAVE_STACK),
                                           (EventType.ERROR, 0, 501, "data", 900.0),
                                           (EventType.STALL, 1, 501, "gradient_sync", 950.0)])
    (hang,) = hang_findings(session)
    assert hang.extra["culprit_ranks"] == [0] and "culprit_phases" not in hang.extra
    assert hang.title == "Hang: rank(s) 0 never reached the gradient sync of step 501"
    assert "saving" not in hang.detail and "serialization.py" not in hang.detail


def test_work_alone_before_the_first_step_says_before_step_1():
    # rank 0 evaluates 2 s before its first step (a phase record without a step): the others wait at step 1
    rows = _rows(held={(0, 1): 2.0})
    session = _session(phases=[(0, None, "eval", 2.0)])
    (e,) = solo_events(session, rows)
    assert (e["step"], e["after_step"], e["what"]) == (1, None, ["eval"])
    (f,) = solo_work_findings(session, rows)
    assert f.title.startswith("Rank 0 evaluated alone before step 1 (2.0 s) while ranks 1, 2 waited")
    assert "None" not in f.title and "None" not in f.detail


def test_the_collective_waited_in_is_the_strategys_with_or_without_communication_records():
    # the CLI's sessions keep no communication records, the Python API's do: the finding names the same
    from logkit.analysis.findings.solo_phases import ALONE_ADVICE

    rows = _rows(held={(0, 11): 2.0})
    kept, emptied = _session(phases=[(0, 10, "save", 2.0)]), _session(phases=[(0, 10, "save", 2.0)])
    kept.comm = pd.DataFrame([dict(rank=r, step=11, op="broadcast") for r in (1, 2)])
    for s in (kept, emptied):
        s.meta.strategy, s.meta.zero_stage = "ddp", None
    (a,), (b,) = solo_work_findings(kept, rows), solo_work_findings(emptied, rows)
    assert a.detail == b.detail and "in the gradient sync (all_reduce) of step 11" in a.detail
    assert ALONE_ADVICE in a.detail


def test_the_first_collective_of_a_step_by_strategy():
    from logkit.analysis.kernels.strategy import first_collective

    assert first_collective("ddp") == "gradient sync (all_reduce)"
    assert first_collective("fsdp2") == first_collective("fsdp1") == "forward all_gather"
    assert first_collective("deepspeed", 3) == "forward all_gather"
    assert first_collective("deepspeed", 2) == "gradient reduction (reduce_scatter or all_reduce)"
    assert first_collective("deepspeed") is None and first_collective(None) is None


def test_the_fields_of_the_hang_solo_work_and_timeout_findings_are_defined():
    from pathlib import Path

    import logkit
    from logkit.analysis.definitions import DEFINITIONS
    from logkit.analysis.findings.log_findings import event_findings

    steps = pd.DataFrame([dict(rank=r, step=s) for r in (0, 1) for s in range(1, 501)])
    (hang,) = hang_findings(_session(steps=steps, marks=[(EventType.STALL, 0, 501, "data", 900.0, TRAINER_SAVE_STACK),
                                                         (EventType.STALL, 1, 501, "gradient_sync", 950.0)]))
    (solo,) = solo_work_findings(_session(phases=[(0, 10, "save", 2.0)]), _rows(held={(0, 11): 2.0}))
    ufld = Path(__file__).resolve().parents[2] / "data" / "solo_work" / "ufld_119_eval_rank0_watchdog.log"
    (timeout,) = [f for f in event_findings(logkit.load_session(ufld)) if f.kind == "nccl_timeout"]
    fields = {*hang.extra, *solo.extra, "last_seen_phase"} | (set(solo.extra["occurrences"][0]) - {"rank", "step"})
    assert "culprit_phases" in hang.extra and "last_seen_phase" in timeout.extra
    assert {"after_step", "solo_s", "waited_max_s", "waited_s", "what", "ops"} <= fields
    assert sorted(k for k in fields if k not in DEFINITIONS) == []
