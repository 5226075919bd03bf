"""What a session's headline figures rest on: its timed steps, the run's own totals (and which
file gave them), or an estimate from sampled step lines; every expected value computed here from
the rows and the meta the test gives."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from logkit.analysis.kernels.headline import run_totals, samples_seen, session_summary
from tests.support.analysis_synth import session, step_rows

TIMES = [0.5, 0.25, 0.25, 0.5, 0.5]  # 2.0 s in all


@pytest.mark.parametrize(("meta", "source"), [
    ({"summary": {"total_steps": 5}}, "summary.json"),
    ({"formats": ["results_json"]}, "results.json"),
    ({"duration_from": "results.json"}, "results.json"),
    ({"formats": ["trainer_state"]}, "trainer_state.json"),
    ({"formats": ["legacy_summary"]}, "summary.json (first version)"),
    ({"duration_from": "session_end"}, "session_end"),
    ({}, "the run's logged totals"),
])
def test_the_source_of_the_runs_totals(meta, source):
    assert run_totals(session("s", **meta))["source"] == source


def test_run_totals_prefer_summary_json_then_the_meta():
    s = session("s", summary={"total_steps": 50, "final_loss": None, "total_batch_size": 32},
                total_steps=40, final_loss=1.5, steps_per_second=2.0, samples_per_second=64.0, total_batch_size=16)
    assert run_totals(s) == {"source": "summary.json", "total_steps": 50, "final_loss": 1.5, "steps_per_second": 2.0,
                             "samples_per_second": 64.0, "total_batch_size": 32}


def test_run_totals_that_are_not_finite_are_unknown():
    s = session("s", final_loss=math.nan, steps_per_second=math.inf, samples_per_second=-math.inf)
    t = run_totals(s)
    assert (t["final_loss"], t["steps_per_second"], t["samples_per_second"]) == (None, None, None)


@pytest.mark.parametrize("bad", [0, -2, 10**23])
def test_a_total_batch_that_is_no_count_is_unknown_wherever_it_comes_from(bad):
    """summary.json's and the performance lines' batch are read through the key's domain (a count >= 1 that
    fits 64 bits): an impossible one is unknown, never the session's batch (found by the fuzz suite)."""
    assert run_totals(session("s", summary={"total_batch_size": bad}))["total_batch_size"] is None
    s = session("s")
    s.perf = pd.DataFrame({"total_batch_size": [bad, bad, 7]})
    assert session_summary(s).total_batch_size is None


def test_samples_seen_from_the_run_else_steps_times_batch():
    s = session("s", steps=step_rows(TIMES, batch=8), samples_seen=640)
    assert samples_seen(s, session_summary(s)) == 640.0
    s = session("s", steps=step_rows(TIMES, batch=8), samples_seen=math.nan)
    assert samples_seen(s, session_summary(s)) == 5 * 8.0
    s = session("s", steps=step_rows(TIMES, batch=None))
    assert samples_seen(s, session_summary(s)) is None  # steps known, batch not


def test_timed_steps_are_the_basis_when_they_cover_the_run():
    s = session("s", steps=step_rows(TIMES, batch=8), duration_s=math.inf)
    summary = session_summary(s)
    assert summary.basis == "steps"
    assert summary.basis_detail == "rank 0's 5 timed step(s): sum of batch sizes / sum of step times"
    assert summary.samples_per_second == 40 / 2.0 and summary.steps_per_second == 5 / 2.0
    assert summary.total_steps == 5 and summary.logged_steps == 5  # no totals: the steps' own count
    assert (summary.total_batch_size, summary.total_batch_size_from) == (8, "logged")
    assert summary.duration_s is None  # not finite: unknown


def test_a_step_without_its_batch_takes_the_runs_common_batch():
    rows = step_rows(TIMES, batch=8)
    rows[2]["total_batch_size"] = None
    summary = session_summary(session("s", steps=rows, total_batch_size=16))
    assert summary.total_batch_size == 8  # the logged batch wins over the header's
    assert summary.samples_per_second == 5 * 8 / 2.0


def test_without_a_logged_batch_the_header_gives_it():
    summary = session_summary(session("s", steps=step_rows(TIMES, batch=None), total_batch_size=16))
    assert (summary.total_batch_size, summary.total_batch_size_from) == (16, "logged")
    assert summary.samples_per_second == 5 * 16 / 2.0


def test_step_rows_without_a_rank_are_rank_0s():
    rows = step_rows(TIMES, batch=8)
    for r in rows:
        r["rank"] = None
    summary = session_summary(session("s", steps=rows))
    assert summary.basis_detail.startswith("rank 0's 5 timed step(s)")


def test_more_steps_logged_than_the_run_claims_keep_the_steps():
    summary = session_summary(session("s", steps=step_rows(TIMES, batch=8), summary={"total_steps": 3}))
    assert summary.basis == "steps" and summary.total_steps == 5


def test_unnumbered_step_rows_count_as_logged_and_take_the_runs_step_count():
    rows = step_rows(TIMES, batch=8)
    for r in rows:
        r["step"] = None
    summary = session_summary(session("s", steps=rows, summary={"total_steps": 5}))
    assert summary.logged_steps == 5 and summary.total_steps == 5 and summary.basis == "steps"


def test_a_step_logged_twice_counts_once():
    rows = step_rows(TIMES, batch=8) + step_rows([0.5], batch=8, start_step=5)
    assert session_summary(session("s", steps=rows)).logged_steps == 5


def test_no_steps_logged():
    summary = session_summary(session("s", summary={"total_steps": 10, "steps_per_second": 2.0}))
    assert summary.logged_steps == 0 and summary.total_steps == 10 and summary.steps_per_second == 2.0


def test_run_totals_without_rates_give_them_from_steps_batch_and_duration():
    summary = session_summary(session("s", summary={"total_steps": 10, "total_batch_size": 8}, duration_s=40.0))
    assert summary.basis == "run totals"
    assert summary.samples_per_second == 10 * 8 / 40.0 and summary.steps_per_second == 10 / 40.0
    assert summary.basis_detail == "run totals from summary.json (no step times logged)"


def test_a_run_rate_alone_is_a_run_total():
    summary = session_summary(session("s", summary={"samples_per_second": 12.0}))
    assert summary.basis == "run totals" and summary.samples_per_second == 12.0 and summary.steps_per_second is None


def test_sampled_lines_with_run_totals_take_the_totals():
    summary = session_summary(session("s", steps=step_rows(TIMES, batch=8),
                                      summary={"total_steps": 50, "steps_per_second": 2.5, "final_loss": 1.25}))
    assert summary.basis == "run totals" and summary.steps_per_second == 2.5 and summary.samples_per_second is None
    assert summary.basis_detail == ("run totals from summary.json (the step lines are sampled: 5 of 50 steps "
                                    "logged)")
    assert (summary.final_loss, summary.final_loss_from) == (1.25, "summary.json; the step lines are sampled")


def test_sampled_lines_without_run_rates_are_an_estimate():
    rows = step_rows(TIMES, batch=8)
    rows[0]["total_batch_size"] = None  # the common batch fills it in
    summary = session_summary(session("s", steps=rows, summary={"total_steps": 50}))
    assert summary.basis == "sampled steps"
    assert summary.samples_per_second == 5 * 8 / 2.0 and summary.steps_per_second == 5 / 2.0
    assert summary.basis_detail == ("5 sampled step line(s) of 50 steps: sum of batch sizes / sum of their step "
                                    "times (an estimate)")


def test_the_final_loss_is_the_last_logged_one_unless_lines_are_sampled():
    losses = [3.0, 2.5, 2.0, 1.5, None]
    s = session("s", steps=step_rows(TIMES, batch=8, losses=losses), summary={"final_loss": 1.25, "total_steps": 5})
    summary = session_summary(s)
    assert (summary.final_loss, summary.final_loss_from) == (1.5, "last logged loss, step 4")
    s = session("s", steps=step_rows(TIMES, batch=8), summary={"final_loss": 1.25, "total_steps": 5})
    summary = session_summary(s)  # no loss logged: the run's
    assert (summary.final_loss, summary.final_loss_from) == (1.25, "summary.json")


def test_unnumbered_losses_are_last_in_log_order():
    rows = step_rows([0.5, 0.5], batch=8, losses=[2.0, 1.0])
    for r in rows:
        r["step"] = None
    summary = session_summary(session("s", steps=rows))
    assert (summary.final_loss, summary.final_loss_from) == (1.0, "last logged loss")


@pytest.mark.parametrize(("samples", "steps", "batch"), [(16.0, 2.0, 8), (8.0, 16.0, 1), (10.0, 10.0, 1),
                                                         (4.0, 10.0, None), (25.0, 10.0, 2)])
def test_a_batch_derived_from_the_runs_rates(samples, steps, batch):
    # samples per step, rounded; below half a sample per step the rates do not describe one batch
    summary = session_summary(session("s", summary={"samples_per_second": samples, "steps_per_second": steps}))
    assert summary.total_batch_size == batch
    assert summary.total_batch_size_from == ("derived: samples/s / steps/s" if batch else None)


def test_a_batch_of_zero_in_summary_json_gives_way_to_the_header():
    summary = session_summary(session("s", steps=step_rows(TIMES, batch=None), total_batch_size=16,
                                      summary={"total_batch_size": 0}))
    assert (summary.total_batch_size, summary.total_batch_size_from) == (16, "logged")


def test_without_any_logged_batch_the_performance_lines_give_it():
    import dataclasses

    from logkit.ingest.session import make_frame

    base = session("s", steps=step_rows(TIMES, batch=None))
    perf = make_frame("perf", [{"rank": 0, "step": 5, "total_batch_size": b} for b in (24, 24, 12)])
    summary = session_summary(dataclasses.replace(base, perf=perf))
    assert (summary.total_batch_size, summary.total_batch_size_from) == (24, "performance lines")  # the most common
    assert summary.samples_per_second == 5 * 24 / 2.0
    none = session_summary(base)
    assert (none.total_batch_size, none.total_batch_size_from, none.samples_per_second) == (None, None, None)


def test_a_step_without_any_batch_takes_the_one_its_rate_and_time_imply():
    (row,) = step_rows([0.25], batch=None)
    row["samples_per_s"] = 48.0  # x 0.25 s: 12 samples
    summary = session_summary(session("s", steps=[row]))  # no batch anywhere else
    assert summary.samples_per_second == 48.0 and summary.total_batch_size == 12
    assert summary.total_batch_size_from == "derived: samples/s / steps/s"


def test_the_summary_carries_the_sessions_own_facts_and_its_main_rank():
    rows = step_rows(TIMES, batch=8, rank=1) + step_rows(TIMES, batch=8, rank=2)
    s = session("s", world_size=3, steps=rows, status="completed", model="tiny-llama",
                start_time="2026-01-01T00:00:00+00:00", duration_from="session_end")
    summary = session_summary(s)
    assert (summary.status, summary.model, summary.start_time, summary.duration_from) == (
        "completed", "tiny-llama", "2026-01-01T00:00:00+00:00", "session_end")
    assert summary.basis_detail == "rank 1's 5 timed step(s): sum of batch sizes / sum of step times"


def test_untimed_numbered_steps_give_the_step_count_when_the_run_gives_none():
    rows = step_rows([None] * 4, batch=8, start_step=3)  # steps 3..6, no times
    summary = session_summary(session("s", steps=rows))
    assert summary.total_steps == 6 and summary.basis is None and summary.samples_per_second is None


def test_the_summary_keeps_what_the_status_rests_on():
    detail = "still running (last written 4 s ago)"
    s = session("s", steps=step_rows(TIMES), status="in progress", status_detail=detail)
    summary = session_summary(s)
    assert (summary.status, summary.status_detail) == ("in progress", detail)
    assert session_summary(session("s", steps=step_rows(TIMES))).status_detail is None
