"""The evidence and session of findings in the cases the rule tests do not reach: ranks that log
different step ranges (each rank's own range, a single step as "(step N)"), a rank without rows or
without a file of its own, the file a divergence cites, a NaN detail capped at 20 steps, and the
session a comparison's findings belong to. Expected values written out by hand."""

from __future__ import annotations

import pandas as pd

from logkit.analysis.findings.diagnose import diagnose
from logkit.analysis.results import Comparison, Divergence, Flag, Health, NanPoint, Ratios, Scaling
from tests.support.analysis_synth import session, step_rows


def found(sessions, **parts):
    return [f.to_dict() for f in diagnose(sessions, parts)]


def stragglers(*ranks, sid="s"):
    return pd.DataFrame({"session_id": sid, "rank": list(ranks), "median_step_s": 0.6, "vs_fastest": 1.2,
                         "score": 0.2, "is_straggler": True})


def test_each_rank_cites_its_own_step_range_and_a_single_step_as_step_n():
    rows = step_rows([0.5] * 8, rank=0, start_step=3) + step_rows([0.5], rank=1, start_step=12)
    s = session("s", world_size=2, steps=rows)
    fs = found([s], stragglers=stragglers(0, 1))
    assert [(f["title"], f["evidence"]) for f in fs] == [
        ("Rank 0 is a straggler", ["s_rank0.jsonl (steps 3-10)"]),
        ("Rank 1 is a straggler", ["s_rank1.jsonl (step 12)"]),
    ]


def test_a_rank_without_rows_or_without_a_file_of_its_own():
    rows = step_rows([0.5] * 4, rank=0, start_step=1)
    s = session("s", world_size=3, steps=rows, files=["s/s_rank0.jsonl", "s/s_rank2.jsonl", "s/main.log"])
    fs = {f["ranks"][0]: f["evidence"] for f in found([s], stragglers=stragglers(0, 1, 2))}
    assert fs[0] == ["s_rank0.jsonl (steps 1-4)"]
    assert fs[2] == ["s_rank2.jsonl"]  # its file, no rows: no step range
    assert len(fs[1]) == 1  # no file of its own: one file stands in for it, not every stream


def test_a_divergence_cites_rank_0s_file_wherever_it_is_listed():
    d = Divergence("rising", min_loss=1.0, min_at=5.0, final_loss_smoothed=2.0, rise=1.0, rise_over_drop=0.8,
                   window=5)
    rows = [r for rank in (0, 1) for r in step_rows([0.5] * 4, rank=rank, start_step=1)]
    s = session("s", world_size=2, steps=rows, files=["s/s_rank1.jsonl", "s/s_rank0.jsonl"])
    (f,) = found([s], health={"s": Health(divergence=d)})
    assert f["evidence"] == ["s_rank0.jsonl (steps 1-4)"]
    # without a rank-0 stream: one file, not every stream
    s = session("s", world_size=2, steps=rows, files=["s/s_rank1.jsonl", "s/s_rank2.jsonl"])
    (f,) = found([s], health={"s": Health(divergence=d)})
    assert len(f["evidence"]) == 1
    # no step rows at all: the file, without a range
    (f,) = found([session("s", world_size=1)], health={"s": Health(divergence=d)})
    assert f["evidence"] == ["s_rank0.jsonl"]


def test_a_nan_detail_lists_the_first_20_steps():
    points = tuple(NanPoint(step, 0, "loss", None) for step in range(25, 0, -1))  # steps 25 .. 1, unsorted
    s = session("s", world_size=1, steps=step_rows([0.5] * 25))
    (f,) = found([s], health={"s": Health(nan_steps=points)})
    assert f["title"] == "NaN/Inf at 25 point(s)"
    assert f["detail"] == ("Non-finite loss, gradients or tensors at steps [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, "
                           "13, 14, 15, 16, 17, 18, 19, 20].")


def _comparison(candidate, speedup, flags=(), regime="strong", samples_ratio=1.0):
    r = Ratios(speedup, speedup / 2.0, None)
    return Comparison(baseline="base", candidate=candidate, group="g", regime=regime, basis="steady state",
                      basis_detail="", headline=r, whole_run=r, steady=r, speedup_ci=None, ci_level=0.95,
                      rank_ratio=2.0, samples_ratio=samples_ratio, flags=flags)


def test_a_comparisons_findings_belong_to_its_candidate():
    base = session("base", world_size=1, steps=step_rows([1.0] * 8))
    cand = session("cand", world_size=2, steps=[r for k in (0, 1) for r in step_rows([0.5] * 8, rank=k)])
    flag = Flag("slowdown", "x", (), 0.5, 2.0, "whole run", False)
    comparisons = (_comparison("cand", 0.5, flags=(flag,)), _comparison("cand", 1.3),
                   _comparison("cand", 1.8, regime="mixed", samples_ratio=1.5))
    fs = found([base, cand], scaling=Scaling(comparisons=comparisons))
    assert sorted(f["kind"] for f in fs) == ["config_batch_mismatch", "config_steps_not_rescaled",
                                             "low_scaling_efficiency", "scaling_slowdown"]
    for f in fs:
        assert f["session_id"] == "cand", f
        assert f["evidence"] == ["cand_rank0.jsonl", "cand_rank1.jsonl"], f


def test_a_comparison_whose_candidate_is_not_loaded_has_no_evidence():
    base = session("base", world_size=1, steps=step_rows([1.0] * 8))
    (f,) = found([base], scaling=Scaling(comparisons=(_comparison("gone", 1.3),)))
    assert (f["kind"], f["session_id"], f["evidence"]) == ("low_scaling_efficiency", "gone", [])


# -- the status of runs that did not end ---------------------------------------------------------


def test_a_run_cut_off_a_while_ago_says_how_long():
    s = session("s", world_size=2, steps=step_rows([0.5] * 4), status="incomplete", idle_s=3600.4)
    (f,) = found([s])
    assert (f["severity"], f["kind"], f["session_id"]) == ("warning", "status", "s")
    assert f["detail"] == ("The streams end without session_end and were last written 3600 s ago: the run was "
                           "killed or stopped without ending its session.")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]


def test_a_run_in_progress_with_and_without_steps():
    meta = dict(status="in progress", idle_s=12.6, status_detail="step 4 of 100")
    (f,) = found([session("s", world_size=2, steps=step_rows([0.5] * 4), **meta)])
    assert (f["severity"], f["kind"], f["session_id"]) == ("info", "status", "s")
    assert f["title"] == "Run in progress: step 4 of 100"
    assert f["detail"] == ("No session_end yet and its files were written 13 s ago (within max(120 s, 10 x its median "
                           "step time)): every figure covers the steps logged so far.")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]
    (f,) = found([session("s", world_size=1, **meta)])
    assert f["detail"].endswith(": no step is logged yet.")


def test_a_run_stopped_before_its_first_record():
    (f,) = found([session("s", world_size=2, status="stopped before its first record", ranks_found=[0, 3])])
    assert (f["severity"], f["kind"], f["session_id"]) == ("warning", "no_records", "s")
    assert f["title"] == "Run stopped before writing its first record"
    assert f["detail"] == ("The session folder holds the streams of rank(s) 0, 3 but not one record: the run was "
                           "killed, or failed, before the logger's first flush (half a second after it started, by "
                           "default), or hung in its start (every rank must reach it). The launcher's console output "
                           "says why.")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"] and f["ranks"] == [0, 3]
    (f,) = found([session("s", world_size=1, status="stopped before its first record")])
    assert f["detail"].startswith("The session folder holds its files but not one record:") and f["ranks"] == []


# -- step and communication findings: their session, every rank listed, and what is left out ------


def breakdown(*rows):
    cols = ("session_id", "rank", "steps", "data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s", "step_s")
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def two_ranks(sid="s"):
    return session(sid, world_size=2, steps=[r for k in (0, 1) for r in step_rows([0.5] * 4, rank=k)])


def test_communication_bound_by_the_exposed_sync_on_two_ranks_of_one_session():
    phases = breakdown(("s", 0, 8, 0.0, 0.05, 0.05, 0.0, 0.0, 0.1234), ("s", 1, 8, 0.0, 0.05, 0.06, 0.0, 0.0, 0.1234))
    (f,) = found([two_ranks(), two_ranks("x")], step_breakdown=phases)
    assert (f["kind"], f["session_id"]) == ("communication_bound", "s")
    # 0.05 / 0.1234 = 40.5 %, 0.06 / 0.1234 = 48.6 %; 123.4 ms shown to 3 digits
    assert f["detail"] == ("The gradient sync that backward does not hide takes 41% of step time on rank 0 (50 of "
                           "123 ms, median), 49% of step time on rank 1 (60 of 123 ms, median): larger buckets "
                           "(bucket_cap_mb), gradient accumulation (fewer syncs per sample) or a faster interconnect "
                           "shorten it.")
    assert f["evidence"] == ["s_rank0.jsonl (steps 1-4)", "s_rank1.jsonl (steps 1-4)"] and f["ranks"] == [0, 1]


def comm(*rows, verdicts=True):
    cols = ("session_id", "rank", "op", "sync_share_of_step_time", "matched_steps", "sources")
    table = pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])
    if verdicts:
        table["verdict"], table["note"] = "unknown", ""
    return table


def test_communication_bound_from_the_table_on_two_ranks_and_sources_that_are_not_text():
    table = comm(("s", 0, "gradient_sync", 0.3, 8, float("nan")), ("s", 1, "gradient_sync", 0.4, 6, None))
    (f,) = found([two_ranks()], communication=table)
    assert f["detail"] == ("Gradient sync takes 30% of step time on rank 0 (over 8 steps), 40% of step time on rank 1 "
                           "(over 6 steps) (an upper bound: buckets overlap the backward pass).")
    assert f["evidence"] == ["s_rank0.jsonl (steps 1-4)", "s_rank1.jsonl (steps 1-4)"]  # no "nan" source


def test_a_communication_table_without_verdicts_gives_no_verdict_finding():
    table = comm(("s", 0, "gradient_sync", 0.1, 8, None), verdicts=False)
    assert found([two_ranks()], communication=table) == []


def test_slow_steps_of_another_session_are_not_this_ones():
    perf = pd.DataFrame({"session_id": ["x", "s"], "rank": [0, 0], "slow_steps": [5, 0], "steps": [8, 8]})
    assert [(f["kind"], f["session_id"]) for f in found([two_ranks(), two_ranks("x")], performance=perf)] == [
        ("slow_steps", "x")]


def test_a_slow_step_detail_names_the_worst_five():
    worst = [{"rank": 0, "step": k, "x_median": 10.0 - k} for k in range(1, 7)]
    perf = pd.DataFrame({"session_id": ["s"], "rank": [0], "slow_steps": [6], "steps": [100]})
    (f,) = found([two_ranks()], performance=perf, slow_steps={"s": worst})
    assert f["detail"] == ("6 of 100 steps took more than 3x their rank's median (warm-up left out); the worst: step 1 on rank 0 (9.0x), "
                           "step 2 on rank 0 (8.0x), step 3 on rank 0 (7.0x), step 4 on rank 0 (6.0x), step 5 on "
                           "rank 0 (5.0x)")


def test_a_straggler_without_an_arrival_share_is_one_by_step_time():
    table = pd.DataFrame({"session_id": ["s"], "rank": [1], "median_step_s": [0.6125], "vs_fastest": [1.225],
                          "score": [0.225], "is_straggler": [True], "cause": [None],
                          "last_arrival_share": [float("nan")], "lateness_s": [float("nan")]})
    (f,) = found([two_ranks()], stragglers=table)
    assert (f["title"], f["detail"]) == ("Rank 1 is a straggler",
                                         "Median step 0.6125 s, 1.23x the fastest rank (score 0.23).")
