"""The findings diagnose derives from figures, each from result frames the test writes by hand:
which threshold fires on which side (at the threshold exactly, as the definitions say), the
severity, and the title, detail, evidence and ranks written out here."""

from __future__ import annotations

import pandas as pd
import pytest

from logkit.analysis.findings.diagnose import diagnose
from logkit.analysis.results import Comparison, Divergence, Flag, Health, NanPoint, Ratios, Scaling
from tests.support.analysis_synth import session, step_rows

FILES = {"files": ["logs/s/s_rank0.jsonl", "logs/s/s_rank1.jsonl", "logs/s/main.log"]}


def run(sid="s", ranks=2, **meta):
    rows = [r for rank in range(ranks) for r in step_rows([0.5] * 8, rank=rank, start_step=3)]
    return session(sid, world_size=ranks, steps=rows, **{**FILES, **meta})


def found(sessions, **parts):
    return [f.to_dict() for f in diagnose(sessions, parts)]


def only(sessions, kind, **parts):
    (f,) = [f for f in found(sessions, **parts) if f["kind"] == kind]
    if len(sessions) == 1:  # a finding names its session
        assert f["session_id"] == sessions[0].meta["session_id"]
    return f


# -- the run's status -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_a_failed_or_interrupted_run(status):
    f = only([run(status=status)], "status")
    assert (f["severity"], f["title"], f["detail"]) == ("error", f"Run {status}", f"session_end says status={status}.")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]


def test_a_run_cut_off():
    f = only([run(status="incomplete")], "status")
    assert (f["severity"], f["title"]) == ("warning", "Run cut off (no session_end record)")
    assert f["detail"] == "The streams end without session_end: the run was killed or is still running."
    assert found([run(status="completed")]) == []


def test_evidence_without_jsonl_files_is_the_first_files_or_the_session():
    f = only([run(status="failed", files=["a.log", "b.log", "c.log", "d.log"])], "status")
    assert f["evidence"] == ["a.log", "b.log", "c.log"]
    f = only([run(status="failed", files=[])], "status")
    assert f["evidence"] == ["s"]


# -- health ---------------------------------------------------------------------------------------


def test_nan_steps():
    health = Health(nan_steps=(NanPoint(7, 1, "loss", "s_rank1.jsonl:40"), NanPoint(5, 0, "grad", "s_rank0.jsonl:33"),
                               NanPoint(None, 0, "tensor", None)))
    f = only([run()], "nan", health={"s": health})
    assert (f["severity"], f["title"]) == ("error", "NaN/Inf at 3 point(s)")
    assert f["detail"] == "Non-finite loss, gradients or tensors at steps [5, 7]."
    assert f["evidence"] == ["s_rank1.jsonl:40", "s_rank0.jsonl:33"] and f["ranks"] == [0, 1]


def test_nan_steps_without_sources_cite_the_files():
    health = Health(nan_steps=(NanPoint(2, None, "loss", None),))
    f = only([run()], "nan", health={"s": health})
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"] and f["ranks"] == []


def test_divergence():
    d = Divergence("rising", min_loss=1.23456, min_at=5.0, final_loss_smoothed=2.5, rise=1.3, rise_over_drop=0.8,
                   window=5)
    f = only([run()], "divergence", health={"s": Health(divergence=d)})
    assert (f["severity"], f["title"]) == ("warning", "Loss diverging")
    assert f["detail"] == "Smoothed loss rose from its minimum 1.235 to 2.5 (rising)."
    assert f["evidence"] == ["s_rank0.jsonl (steps 3-10)"]  # rank 0's rows
    # the lowest rank's step range, where ranks log different ranges
    rows = step_rows([0.5] * 4, rank=0, start_step=3) + step_rows([0.5] * 9, rank=1, start_step=1)
    s = session("s", world_size=2, steps=rows, **FILES)
    assert only([s], "divergence", health={"s": Health(divergence=d)})["evidence"] == ["s_rank0.jsonl (steps 3-6)"]


def test_no_health_no_finding():
    assert found([run()], health={"s": Health()}) == []


# -- GPUs -----------------------------------------------------------------------------------------


def gpus(*utils, source="gpu_snapshot", sid="s"):
    return pd.DataFrame({"session_id": sid, "gpu": range(len(utils)), "avg_util": list(utils), "source": source})


def test_low_gpu_utilization_is_below_50_percent():
    f = only([run()], "low_gpu_util", gpus=gpus(49.9, 50.0, 12.0))  # 50% exactly is not low
    assert (f["severity"], f["title"]) == ("warning", "Low GPU utilization on 2 GPU(s)")
    assert f["detail"] == ("GPU 0: 49.9% avg util; GPU 2: 12.0% avg util (below 50%, from the GPU snapshots): "
                           "input pipeline, small batch, or waiting on others.")
    assert f["evidence"] == ["s_rank0.jsonl (GPU snapshots)"]
    assert found([run()], gpus=gpus(50.0, 80.0)) == []
    assert found([run()], gpus=gpus(10.0, sid="other")) == []  # another session's GPUs


def test_low_gpu_utilization_from_summary_json():
    f = only([run()], "low_gpu_util", gpus=gpus(20.0, source="summary.json"))
    assert "(below 50%, from the summary.json)" in f["detail"] and f["evidence"] == ["s_rank0.jsonl (summary.json)"]
    f = only([run()], "low_gpu_util", gpus=pd.DataFrame({"session_id": ["s", "s"], "gpu": [0, 1],
                                                         "avg_util": [20.0, 30.0],
                                                         "source": ["summary.json", "gpu_snapshot"]}))
    assert "from the GPU snapshots" in f["detail"]


def test_one_busy_gpu_in_one_process():
    busy = {"busy": 0, "idle": [1, 2], "busy_util": 87.4}
    f = only([run(ranks=1)], "config_device_map_auto", busy_gpu={"s": busy})
    assert (f["severity"], f["title"]) == ("warning", "One process, several GPUs, one busy")
    assert f["detail"] == ("GPU 0 averages 87% while GPUs [1, 2] idle: device_map=\"auto\" splits the model across "
                           "GPUs, which then take turns; this is not data parallelism. Launch one process per GPU "
                           "(accelerate launch).")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]
    assert found([run(ranks=2)], busy_gpu={"s": busy}) == []  # one process per GPU already
    s = run(ranks=1)
    s.meta["world_size"] = None
    assert only([s], "config_device_map_auto", busy_gpu={"s": busy})


def test_the_runs_own_low_util_report_joins_the_table_finding():
    events = [{"kind": "anomaly", "subkind": "gpu_util_low", "value": 8.0, "gpu": 1, "step": 4, "rank": 0,
               "message": "low", "level": "WARNING", "time_s": 1.0, "source": "s_rank0.jsonl:12"}]
    s = session("s", world_size=2, steps=step_rows([0.5] * 8), events=events, **FILES)
    findings = found([s], gpus=gpus(80.0, 9.0))
    assert [f["kind"] for f in findings] == ["low_gpu_util"]
    (f,) = findings
    assert f["evidence"] == ["s_rank0.jsonl:12", "s_rank0.jsonl (GPU snapshots)"] and f["evidence_total"] == 2
    assert f["detail"].startswith("GPU 1: 9.0% avg util (below 50%")
    assert " The run's own check reported it too: 1 report(s): " in f["detail"]


# -- steps ----------------------------------------------------------------------------------------


def strag(*rows):
    return pd.DataFrame([dict(zip(("session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler"), r,
                                  strict=True)) for r in rows])


def test_a_straggler():
    table = strag(("s", 0, 0.5, 1.0, 0.0, False), ("s", 1, 0.6125, 1.225, 0.225, True),
                  ("x", 0, 0.9, 1.5, 0.5, True))
    f = only([run()], "straggler", stragglers=table)
    assert (f["severity"], f["title"]) == ("warning", "Rank 1 is a straggler")
    assert f["detail"] == "Median step 0.6125 s, 1.23x the fastest rank (score 0.23)."
    assert f["evidence"] == ["s_rank1.jsonl (steps 3-10)"] and f["ranks"] == [1]


def perf(slow, steps, ranks=(0,)):
    return pd.DataFrame({"session_id": "s", "rank": list(ranks), "slow_steps": slow, "steps": steps})


WORST = [{"rank": 1, "step": 7, "step_time_s": 2.0, "x_median": 4.04}, {"rank": 0, "step": 3, "x_median": 3.5,
                                                                        "step_time_s": 1.75}]


def test_slow_steps_are_a_warning_above_one_percent():
    f = only([run()], "slow_steps", performance=perf([2, 0], [100, 100], ranks=(0, 1)), slow_steps={"s": WORST})
    assert (f["severity"], f["title"]) == ("info", "2 slow step(s)")  # 2 of 200: exactly 1%
    assert f["detail"] == ("2 of 200 steps took more than 3x their rank's median (warm-up left out); the worst: step 7 on rank 1 "
                           "(4.0x), step 3 on rank 0 (3.5x)")
    assert f["evidence"] == ["s_rank1.jsonl (step 7)", "s_rank0.jsonl (step 3)"] and f["ranks"] == [0]
    f = only([run()], "slow_steps", performance=perf([3, 0], [100, 100], ranks=(0, 1)), slow_steps={"s": WORST})
    assert f["severity"] == "warning"
    assert found([run()], performance=perf([0], [100])) == []


def test_slow_steps_without_the_worst_list_cite_the_ranks_files():
    f = only([run()], "slow_steps", performance=perf([1, 2], [8, 8], ranks=(0, 1)))
    assert f["evidence"] == ["s_rank0.jsonl (steps 3-10)", "s_rank1.jsonl (steps 3-10)"] and f["ranks"] == [0, 1]
    assert f["detail"].endswith("the worst: ")
    f = only([run()], "slow_steps", performance=perf([1], [8]),
             slow_steps={"s": [{"rank": None, "step": 4, "x_median": 5.0}]})
    assert f["evidence"] == ["s_rank0.jsonl (step 4)"]


def test_the_runs_own_slow_step_report_joins_the_table_finding():
    events = [{"kind": "anomaly", "subkind": "slow_step", "value": 2.5, "step": 6, "rank": 0, "message": "slow",
               "level": "WARNING", "time_s": 1.0, "source": "s_rank0.jsonl:20"}]
    s = session("s", world_size=1, steps=step_rows([0.5] * 8), events=events, **FILES)
    (f,) = found([s], performance=perf([1], [8]), slow_steps={"s": WORST[:1]})
    assert f["kind"] == "slow_steps" and f["evidence"] == ["s_rank0.jsonl:20", "s_rank1.jsonl (step 7)"]


# -- communication --------------------------------------------------------------------------------


def comm(**cols):
    base = {"session_id": "s", "rank": 0, "op": "gradient_sync", "sync_share_of_step_time": 0.1, "matched_steps": 8,
            "verdict": "unknown", "note": "", "sources": None}
    return pd.DataFrame([{**base, **cols}])


def test_communication_bound_from_30_percent_of_step_time():
    f = only([run()], "communication_bound", communication=comm(sync_share_of_step_time=0.3))
    assert (f["severity"], f["title"]) == ("warning", "Communication-bound")
    assert f["detail"] == ("Gradient sync takes 30% of step time on rank 0 (over 8 steps) (an upper bound: buckets "
                           "overlap the backward pass).")
    assert f["evidence"] == ["s_rank0.jsonl (steps 3-10)"] and f["ranks"] == [0]
    assert found([run()], communication=comm(sync_share_of_step_time=0.2999)) == []
    assert found([run()], communication=comm(sync_share_of_step_time=0.9, op="broadcast")) == []  # not a sync op
    f = only([run()], "communication_bound", communication=comm(sync_share_of_step_time=0.5, op="allreduce",
                                                                 sources="s_rank0.jsonl:5 .. s_rank0.jsonl:90"))
    assert f["evidence"] == ["s_rank0.jsonl:5 .. s_rank0.jsonl:90"]


def test_latency_bound_and_below_peak_collectives():
    note = "latency-bound: mean message 1 MB < 9 MB needed"
    f = only([run()], "latency_bound", communication=comm(verdict="latency-bound", note=note, sources="a.log:3"))
    assert (f["severity"], f["title"]) == ("info", "Collectives are latency-bound")
    assert f["detail"] == note + (": larger buckets (bucket_cap_mb) or gradient accumulation move more bytes per "
                                  "call.")
    assert f["evidence"] == ["a.log:3"] and f["ranks"] == [0]
    f = only([run()], "below_link_peak", communication=comm(verdict="below peak", note="below peak: 5%"))
    assert (f["severity"], f["title"], f["detail"]) == ("warning", "Collectives below the link's peak",
                                                        "below peak: 5%.")
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]


def test_unparsed_lines():
    s = run()
    s.diagnostics = pd.DataFrame({"file": ["logs/s/main.log", "logs/s/x.log"], "line": [12, None],
                                  "reason": ["no grammar", "torn"]})
    f = only([s], "unparsed_lines")
    assert (f["severity"], f["title"]) == ("info", "2 line(s) not understood")
    assert f["detail"] == "Lines that matched no grammar or were torn; kept in the diagnostics."
    assert f["evidence"] == ["main.log:12", "x.log"]


# -- comparisons ----------------------------------------------------------------------------------


def comparison(speedup=1.8, rank_ratio=2.0, flags=(), regime="strong", samples_ratio=1.0, basis="steady state"):
    r = Ratios(speedup, speedup / rank_ratio, None)
    return Comparison(baseline="base", candidate="s", group="g", regime=regime, basis=basis, basis_detail="",
                      headline=r, whole_run=r, steady=r, speedup_ci=None, ci_level=0.95, rank_ratio=rank_ratio,
                      samples_ratio=samples_ratio, flags=flags)


def findings_of(*comparisons):
    return found([run()], scaling=Scaling(comparisons=comparisons))


def test_a_flag_is_a_finding():
    flag = Flag("slowdown", "one busy GPU; straggler: rank 1 is the slowest", (), 0.5, 2.0, "whole run", False)
    (f,) = findings_of(comparison(speedup=0.5, flags=(flag,)))
    assert (f["severity"], f["kind"], f["title"]) == ("warning", "scaling_slowdown",
                                                      "Slowdown: speedup 0.50x on 2x the ranks of base")
    assert f["detail"] == "Likely cause: one busy GPU; straggler: rank 1 is the slowest."
    assert f["evidence"] == ["s_rank0.jsonl", "s_rank1.jsonl"]


def test_low_scaling_efficiency_is_below_70_percent():
    (f,) = findings_of(comparison(speedup=1.3))
    assert (f["severity"], f["kind"], f["title"]) == ("warning", "low_scaling_efficiency", "Scaling efficiency 65%")
    assert f["detail"] == "Against base: below 70% (steady state)."
    assert findings_of(comparison(speedup=1.4)) == []  # 70% exactly
    assert findings_of(comparison(speedup=0.65, rank_ratio=1.0)) == []  # same ranks: not scaling
    flag = Flag("slowdown", "x", (), 0.9, 2.0, "steady state", False)
    assert [f["kind"] for f in findings_of(comparison(speedup=0.9, flags=(flag,)))] == ["scaling_slowdown"]


def test_samples_not_rescaled_in_weak_scaling():
    (f,) = findings_of(comparison(regime="weak", samples_ratio=2.0))
    assert (f["kind"], f["title"]) == ("config_steps_not_rescaled", "Step count not rescaled for the number of GPUs")
    assert f["detail"] == ("Same per-device batch and the same step count: the candidate saw 2.00x the samples of "
                           "base. Compare by throughput (as speedup does), or divide max_steps by the number of GPUs "
                           "to train on the same data.")
    assert f["samples_ratio"] == 2.0


def test_steps_divided_in_strong_scaling():
    (f,) = findings_of(comparison(regime="strong", samples_ratio=0.5))
    assert (f["kind"], f["title"]) == ("config_steps_not_rescaled", "Step count divided although the batch is global")
    assert f["detail"] == ("The global batch is the same but the steps were divided by 2: the candidate saw 0.50x "
                           "the samples of base.")


def test_runs_that_saw_different_samples():
    (f,) = findings_of(comparison(regime="strong", samples_ratio=1.5))
    assert f["title"] == "Runs saw different numbers of samples"
    assert f["detail"] == ("The candidate saw 1.50x the samples of base (strong regime): time-to-finish comparisons "
                           "are not like for like.")
    (f,) = findings_of(comparison(regime="weak", samples_ratio=1.5))
    assert f["title"] == "Runs saw different numbers of samples"


@pytest.mark.parametrize(("ratio", "said"), [(1.049, False), (0.951, False), (1.051, True), (0.949, True),
                                             (None, False)])
def test_samples_ratio_tolerance(ratio, said):
    kinds = [f["kind"] for f in findings_of(comparison(regime="strong", samples_ratio=ratio))]
    assert kinds == (["config_steps_not_rescaled"] if said else [])


def test_a_samples_ratio_on_the_tolerance_is_within_it(monkeypatch):
    from logkit.analysis.findings import diagnose as module

    monkeypatch.setattr(module, "SAMPLES_RATIO_TOLERANCE", 0.25)  # 1.25 and 0.75 sit on it exactly
    for ratio in (1.25, 0.75):
        assert findings_of(comparison(regime="strong", samples_ratio=ratio)) == []
    # which mistake: a ratio closer than the tolerance to the rank ratio (weak: |2.5 - 2| / 2), or
    # a ratio x ranks closer than it to 1 (strong: |0.375 x 2 - 1|); on it, neither is claimed
    for regime, ratio in (("weak", 2.5), ("strong", 0.375)):
        (f,) = findings_of(comparison(regime=regime, samples_ratio=ratio))
        assert f["title"] == "Runs saw different numbers of samples"
    (f,) = findings_of(comparison(regime="weak", samples_ratio=2.49))
    assert f["title"] == "Step count not rescaled for the number of GPUs"
    (f,) = findings_of(comparison(regime="strong", samples_ratio=0.376))
    assert f["title"] == "Step count divided although the batch is global"


@pytest.mark.parametrize(("regime", "ratio", "title"), [
    ("weak", 2.09, "Step count not rescaled for the number of GPUs"),  # within 5% of the rank ratio
    ("weak", 2.11, "Runs saw different numbers of samples"),
    ("strong", 0.52, "Step count divided although the batch is global"),  # ratio x ranks within 5% of 1
    ("strong", 0.53, "Runs saw different numbers of samples"),
])
def test_how_close_to_the_rank_ratio_counts(regime, ratio, title):
    (f,) = findings_of(comparison(regime=regime, samples_ratio=ratio))
    assert f["title"] == title


def test_a_mixed_batch():
    (f,) = findings_of(comparison(regime="mixed"))
    assert (f["severity"], f["kind"], f["title"]) == ("warning", "config_batch_mismatch", "Batch sizes not comparable")
    assert f["detail"] == ("The global batch is neither the same as base's (strong scaling) nor its per-device "
                           "batch x ranks (weak scaling): per-device vs global batch mixed up?")


def test_findings_are_ordered_by_severity_keeping_their_order_within_one():
    s = run(status="failed")
    s.diagnostics = pd.DataFrame({"file": ["m.log"], "line": [1], "reason": ["x"]})
    kinds = [f["kind"] for f in found([s], gpus=gpus(5.0), communication=comm(verdict="latency-bound", note="n"))]
    assert kinds == ["status", "low_gpu_util", "latency_bound", "unparsed_lines"]


# -- why a run is slow: per-step phases -----------------------------------------------------------


def arrivals(*rows):
    cols = ("session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler", "cause",
            "last_arrival_share", "lateness_s")
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def breakdown(*rows):
    cols = ("session_id", "rank", "steps", "data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s", "step_s")
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def test_a_straggler_by_its_arrival_at_the_sync_and_its_cause():
    table = arrivals(("s", 0, 0.5, 1.0, 0.0, False, None, 0.0, 0.0),
                     ("s", 1, 0.6, 1.2, 0.1, True, "data", 0.97, 0.0512))
    f = only([run()], "straggler", stragglers=table)
    assert (f["severity"], f["title"]) == ("warning", "Rank 1 holds the others back at the gradient sync")
    assert f["detail"] == ("Rank 1 was the last to reach the gradient sync in 97% of the synced steps, 51.2 ms after "
                           "the first rank (10% of a step). Cause: data loading; give rank 1's DataLoader more workers "
                           "(num_workers, pin_memory, prefetch_factor) or move its preprocessing out of the loop.")
    assert f["evidence"] == ["s_rank1.jsonl (steps 3-10)"] and f["ranks"] == [1]
    assert (f["cause"], f["last_arrival_share"]) == ("data", 0.97)
    table = arrivals(("s", 1, 0.6, 1.2, 0.1, True, None, 0.6, 0.02))
    f = only([run()], "straggler", stragglers=table)
    assert f["detail"].endswith("(10% of a step). Its data, compute and host times do not explain it.")
    assert f["cause"] is None and f["last_arrival_share"] == 0.6


def test_communication_bound_by_the_exposed_sync_of_the_phases():
    phases = breakdown(("s", 0, 8, 0.01, 0.2, 0.09, 0.0, 0.0, 0.3), ("s", 1, 8, 0.01, 0.2, 0.0899, 0.0, 0.0, 0.3),
                       ("x", 0, 8, 0.0, 0.0, 0.9, 0.0, 0.0, 1.0))
    table = comm(sync_share_of_step_time=0.9)  # the comm table's upper bound is not used where phases exist
    (f,) = [f for f in found([run()], step_breakdown=phases, communication=table) if f["kind"] == "communication_bound"]
    assert (f["severity"], f["title"]) == ("warning", "Communication-bound")
    assert f["detail"] == ("The gradient sync that backward does not hide takes 30% of step time on rank 0 (90 of "
                           "300 ms, median): larger buckets (bucket_cap_mb), gradient accumulation (fewer syncs per "
                           "sample) or a faster interconnect shorten it.")  # rank 1: 29.97%, under the threshold
    assert f["evidence"] == ["s_rank0.jsonl (steps 3-10)"] and f["ranks"] == [0]
    below = breakdown(("s", 0, 8, 0.01, 0.2, 0.08, 0.0, 0.0, 0.3), ("s", 1, 8, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0))
    assert [f for f in found([run()], step_breakdown=below, communication=table)
            if f["kind"] == "communication_bound"] == []  # a step of 0 s has no share


def test_data_time_that_waits_in_the_trainers_token_gather():
    heavy = breakdown(("s", 0, 8, 0.06, 0.2, 0.0, 0.0, 0.0, 0.3), ("s", 1, 8, 0.2, 0.05, 0.0, 0.0, 0.0, 0.3),
                      ("x", 0, 8, 0.9, 0.0, 0.0, 0.0, 0.0, 1.0))
    gather = {"config": {"average_tokens_across_devices": True}}
    f = only([run(**gather)], "data_wait_in_token_gather", step_breakdown=heavy)
    assert (f["severity"], f["title"]) == ("warning", "Data time includes waiting for the slowest rank's data")
    assert f["detail"] == (
        "transformers' Trainer gathers each step's token count across the ranks before the step "
        "(average_tokens_across_devices=True), so every rank's data time (rank 0 60 ms, rank 1 200 ms, median) "
        "includes waiting for the slowest rank's loader, and no rank arrives last at the gradient sync: run once "
        "with average_tokens_across_devices=False to see which rank loads slowly, then give its DataLoader more "
        "workers (num_workers, pin_memory, prefetch_factor).")
    assert f["evidence"] == ["s_rank0.jsonl (steps 3-10)", "s_rank1.jsonl (steps 3-10)"] and f["ranks"] == [0, 1]
    one = breakdown(("s", 0, 8, 0.059, 0.2, 0.0, 0.0, 0.0, 0.3), ("s", 1, 8, 0.2, 0.05, 0.0, 0.0, 0.0, 0.3))
    assert [f for f in found([run(**gather)], step_breakdown=one) if f["kind"] == "data_wait_in_token_gather"] == []
    assert [f for f in found([run()], step_breakdown=heavy) if f["kind"] == "data_wait_in_token_gather"] == []
    off = {"config": {"average_tokens_across_devices": False}}
    assert [f for f in found([run(**off)], step_breakdown=heavy) if f["kind"] == "data_wait_in_token_gather"] == []


def test_communication_findings_are_per_session():
    two = pd.concat([comm(sync_share_of_step_time=0.5), comm(session_id="x", sync_share_of_step_time=0.9,
                                                            verdict="below peak", note="below peak at large messages")])
    fs = found([run(), run("x")], communication=two)
    assert sorted((f["kind"], f["session_id"]) for f in fs) == [
        ("below_link_peak", "x"), ("communication_bound", "s"), ("communication_bound", "x")]
    (s_bound,) = [f for f in fs if f["kind"] == "communication_bound" and f["session_id"] == "s"]
    assert s_bound["detail"].startswith("Gradient sync takes 50% of step time on rank 0")
    (below,) = [f for f in fs if f["kind"] == "below_link_peak"]
    assert below["ranks"] == [0] and below["detail"] == "below peak at large messages."
    # phases of another session leave this session's comm-table finding alone
    phases = breakdown(("x", 0, 8, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0))
    assert [f["session_id"] for f in found([run()], communication=comm(sync_share_of_step_time=0.5),
                                           step_breakdown=phases) if f["kind"] == "communication_bound"] == ["s"]
