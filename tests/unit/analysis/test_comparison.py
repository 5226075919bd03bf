"""Every field of a comparison, computed here from the step times the test gives (the warm-up by
its oracle, the interval by its definition), and the rules around it: flags and their causes at
their boundaries, the regime, the baseline, the sessions not compared, the fit's inputs."""

from __future__ import annotations

import dataclasses
from dataclasses import astuple

import pytest

from logkit.analysis.kernels import scaling
from logkit.analysis.kernels.headline import session_summary
from logkit.analysis.kernels.scaling import comparison_plan, pick_baseline, scaling_analysis
from tests.support.analysis_synth import gpu_rows, session, step_rows
from tests.support.oracles import steady_bootstrap_interval, warmup_oracle

BASE_T = [2.0, 1.5, 1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.0]
CAND_T = [1.5, 0.6, 0.62, 0.58, 0.61, 0.59, 0.6, 0.6, 0.63, 0.57, 0.6, 0.6]
STEADY_DETAIL = "steady state: warm-up left out ({} step(s) of the baseline, {} of the candidate); {} and {} steady steps"


def run(sid, times, *, ranks=1, batch=8, hour=0, **meta):
    return session(sid, world_size=ranks, steps=step_rows(times, batch=batch),
                   start_time=f"2026-01-01T{hour:02d}:00:00+00:00", **meta)


def unsaid(sid, times, hour=0, **meta):
    """A run whose logs do not say its world size."""
    s = session(sid, steps=step_rows(times), start_time=f"2026-01-01T{hour:02d}:00:00+00:00", **meta)
    s.meta["world_size"] = None
    return s


def steady(times, batch):
    k = warmup_oracle(times)
    rest = times[k:]
    return k, len(rest), batch * len(rest) / sum(rest), len(rest) / sum(rest)


def test_every_field_of_a_steady_comparison():
    base, cand = run("base", BASE_T), run("cand", CAND_T, ranks=2, hour=1)
    result = scaling_analysis([base, cand])
    (c,) = result.comparisons
    kb, nb, bs, bsteps = steady(BASE_T, 8)
    kc, nc, cs, csteps = steady(CAND_T, 8)
    assert (kb, kc) == (2, 1)
    speedup = cs / bs
    assert astuple(c.steady) == pytest.approx((speedup, speedup / 2, csteps / bsteps))
    assert c.headline == c.steady and c.basis == "steady state"
    whole = (8 * 12 / sum(CAND_T)) / (8 * 12 / sum(BASE_T))
    assert astuple(c.whole_run) == pytest.approx((whole, whole / 2, (12 / sum(CAND_T)) / (12 / sum(BASE_T))))
    # seeds 1000 + each run's position among the sessions
    pairs_b = [(8, t) for t in BASE_T[kb:]]
    pairs_c = [(8, t) for t in CAND_T[kc:]]
    assert c.speedup_ci == pytest.approx(steady_bootstrap_interval(pairs_b, pairs_c, 1000, 1001), rel=1e-12)
    assert c.ci_level == 0.95
    assert c.basis_detail == STEADY_DETAIL.format(kb, kc, nb, nc)  # 12 of 12 steps: nothing sampled
    assert (c.baseline, c.candidate, c.group, c.regime, c.rank_ratio) == ("base", "cand", "model not logged",
                                                                         "strong", 2.0)
    assert (c.baseline_samples_per_second, c.candidate_samples_per_second) == pytest.approx((bs, cs))
    assert c.baseline_basis == c.candidate_basis == "rank 0's 12 timed step(s): sum of batch sizes / sum of step times"
    assert (c.baseline_samples_seen, c.candidate_samples_seen, c.samples_ratio) == (96.0, 96.0, 1.0)
    assert c.note is None and c.flags == ()  # 1 < speedup < 2
    # each session's steady state in the summaries
    sb, sc = result.sessions
    assert (sb.warmup_steps, sb.steady_steps, sc.warmup_steps, sc.steady_steps) == (kb, nb, kc, nc)
    assert (sb.steady_samples_per_second, sb.steady_steps_per_second) == pytest.approx((bs, bsteps))
    assert (sc.steady_samples_per_second, sc.steady_steps_per_second) == pytest.approx((cs, csteps))
    assert result.baseline == "base" and result.groups[0].baseline == "base"
    assert (result.groups[0].key, result.groups[0].label) == (
        {"model": None, "seq_len": None, "config": None}, "model not logged")


def test_identical_runs_are_resampled_independently():
    # the same step times in both runs: draws from one seed would make every ratio 1
    times = [1.0 + 0.1 * (i % 3) for i in range(30)]
    (c,) = scaling_analysis([run("a", times), run("b", times, ranks=2, hour=1)]).comparisons
    assert c.speedup == 1.0 and c.speedup_ci[0] < 1.0 < c.speedup_ci[1]


def test_sampled_step_lines_are_said_in_the_steady_detail():
    base = run("base", BASE_T, summary={"total_steps": 40})
    cand = run("cand", CAND_T, ranks=2, hour=1, summary={"total_steps": 12})
    (c,) = scaling_analysis([base, cand]).comparisons
    assert c.basis == "steady state"
    assert c.basis_detail == STEADY_DETAIL.format(2, 1, 10, 11) + " (from sampled step lines: the baseline logs 12 of 40 steps)"


def test_a_whole_run_comparison_when_a_run_has_no_steady_state():
    base = run("base", [1.0, 1.0, 1.0], batch=8)  # three steps: no steady state
    cand = run("cand", CAND_T, ranks=2, hour=1)
    (c,) = scaling_analysis([base, cand]).comparisons
    whole = (8 * 12 / sum(CAND_T)) / (8 * 3 / 3.0)
    assert c.steady is None and c.speedup_ci is None and c.basis == "whole run"
    assert c.headline == c.whole_run
    assert astuple(c.whole_run) == pytest.approx((whole, whole / 2, (12 / sum(CAND_T)) / 1.0))
    assert c.basis_detail == "whole run: every logged step, warm-up included"
    assert (c.baseline_samples_per_second, c.candidate_samples_per_second) == pytest.approx((8.0, 96 / sum(CAND_T)))


def test_whole_runs_on_different_bases_say_so():
    base = session("base", world_size=1, summary={"samples_per_second": 10.0, "steps_per_second": 1.25},
                   start_time="2026-01-01T00:00:00+00:00")
    cand = run("cand", [0.5, 0.5, 0.5], ranks=2, hour=1)
    (c,) = scaling_analysis([base, cand]).comparisons
    b_detail = "run totals from summary.json (no step times logged)"
    c_detail = "rank 0's 3 timed step(s): sum of batch sizes / sum of step times"
    assert c.basis_detail == f"whole run: baseline {b_detail}; candidate {c_detail}"
    assert c.note == f"throughput on different bases: baseline from {b_detail}, candidate from {c_detail}"
    assert c.speedup == 16.0 / 10.0 and c.headline.step_rate_ratio == 2.0 / 1.25
    # the baseline's batch derived from its rates (10 / 1.25 = 8); its step count unknown, so are its samples
    assert c.regime == "strong" and c.baseline_samples_seen is None and c.samples_ratio is None
    assert c.candidate_samples_seen == 24.0


def test_a_baseline_of_two_ranks():
    # weak scaling from 2 to 4 ranks: the per-rank batch (8) is the same
    base, cand = run("base", BASE_T, ranks=2, batch=16), run("cand", CAND_T, ranks=4, batch=32, hour=1)
    (c,) = scaling_analysis([base, cand]).comparisons
    assert c.rank_ratio == 2.0 and c.regime == "weak"
    assert c.scaling_efficiency == pytest.approx(c.speedup / 2)


def test_a_run_without_a_world_size_is_one_rank():
    (c,) = scaling_analysis([unsaid("base", BASE_T), run("cand", CAND_T, ranks=2, hour=1)]).comparisons
    assert c.rank_ratio == 2.0


def test_the_steady_state_takes_the_runs_batch_where_steps_lack_it():
    base = run("base", BASE_T, batch=None, total_batch_size=8)
    result = scaling_analysis([base, run("cand", CAND_T, ranks=2, hour=1)])
    assert result.sessions[0].steady_samples_per_second == pytest.approx(steady(BASE_T, 8)[2])
    assert result.comparisons[0].basis == "steady state"


@pytest.mark.parametrize(("base", "cand", "regime"), [((8, 1), (8, 2), "strong"), ((8, 1), (16, 2), "weak"),
                                                     ((16, 2), (32, 4), "weak"), ((8, 1), (12, 2), "mixed"),
                                                     ((None, 1), (8, 2), "unknown"), ((8, 1), (None, 2), "unknown")])
def test_regime(base, cand, regime):
    # global batch and ranks of each run, from its totals
    b = session("b", world_size=base[1], summary={"samples_per_second": 10.0, "total_batch_size": base[0]},
                start_time="2026-01-01T00:00:00+00:00")
    c = session("c", world_size=cand[1], summary={"samples_per_second": 15.0, "total_batch_size": cand[0]},
                start_time="2026-01-01T01:00:00+00:00")
    assert scaling_analysis([b, c]).comparisons[0].regime == regime


# -- flags ---------------------------------------------------------------------------------------


def summaries(*pairs):
    return [session_summary(run(sid, [0.5] * 4, ranks=ranks, batch=8, hour=i))
            for i, (sid, ranks) in enumerate(pairs)]


def flag(headline, ratio=2.0, ci=None, ctx=None, context=None, basis="steady state"):
    base, cand = summaries(("base", 1), ("cand", int(ratio)))
    ctx = {"regime": "weak", "steady": True, **(ctx or {})}
    return scaling._flag(headline, ratio, ci, basis, base, cand, ctx, context or {})


def test_a_speedup_of_exactly_one_or_of_the_rank_ratio_is_no_flag():
    assert flag(1.0) == () and flag(2.0) == () and flag(2.0 + 1e-9) == ()
    (f,) = flag(2.0 + 1e-8)
    assert f.kind == "superlinear"
    (f,) = flag(0.999)
    assert f.kind == "slowdown"
    assert flag(0.5, ratio=1.0) == () and flag(None) == ()


def test_a_flag_is_significant_when_its_interval_clears_the_line():
    # a slowdown whose interval lies below 1; a superlinear speedup whose interval lies above p
    assert flag(0.8, ci=(0.6, 0.99))[0].significant is True
    assert flag(0.8, ci=(0.6, 1.0))[0].significant is False  # touching 1 is not clear of it
    assert flag(0.8, ci=(0.6, 1.5))[0].significant is False
    assert flag(2.3, ci=(2.1, 2.5))[0].significant is True
    assert flag(2.3, ci=(2.0, 2.5))[0].significant is False  # touching p
    assert flag(2.3, ci=(1.9, 2.5))[0].significant is False
    assert flag(0.8)[0].significant is False  # no interval


def test_a_flags_fields():
    (f,) = flag(0.8, ci=(0.6, 0.9), basis="whole run", ctx={"steady": False})
    assert (f.kind, f.speedup, f.rank_ratio, f.basis, f.significant) == ("slowdown", 0.8, 2.0, "whole run", True)
    assert f.causes == ("no cause found in the logs: compare per-rank step times and data loading",)
    assert f.cause == "; ".join(f.causes)


SLOW_CAUSES = {
    "busy": "one busy GPU: one device does the work while the others idle (device_map=\"auto\" / model parallel "
            "rather than data parallel)",
    "comm": "communication-bound: gradient sync takes 30% of step time",
    "straggler": "straggler: rank 1 is the slowest",
}


def test_the_causes_of_a_slowdown():
    context = {"cand": {"busy_gpu": True, "sync_share": 0.3, "straggler": 1}}  # 30%: at the threshold
    (f,) = flag(0.8, context=context)
    assert f.causes == (SLOW_CAUSES["busy"], SLOW_CAUSES["comm"], SLOW_CAUSES["straggler"])
    assert f.cause == "; ".join(f.causes)
    (f,) = flag(0.8, context={"cand": {"sync_share": 0.29, "straggler": 0}})
    assert f.causes == ("straggler: rank 0 is the slowest",)
    (f,) = flag(0.8, context={"base": {"busy_gpu": True}})  # the baseline's facts are not a slowdown's cause
    assert f.causes == ("no cause found in the logs: compare per-rank step times and data loading",)


def test_the_causes_of_a_superlinear_speedup():
    (f,) = flag(2.5, ctx={"regime": "strong", "steady": False}, context={"base": {"busy_gpu": True}})
    assert f.causes == ("the baseline had one busy GPU and others idle",
                        "warm-up not left out: a short baseline is dominated by its first steps",
                        "smaller per-rank batch fits caches / avoids memory pressure the baseline had (e.g. "
                        "offloading or gradient checkpointing in the single run)")
    (f,) = flag(2.5, context={"cand": {"busy_gpu": True}})  # weak, steady: the candidate's facts do not explain it
    assert f.causes == ("no cause found in the logs: compare per-rank step times and data loading",)


def test_causes_every_flag_shares():
    (f,) = flag(2.5, ctx={"regime": "mixed", "basis_mismatch": "throughput on different bases: x", "steady": False,
                          "samples_ratio": 1.5})
    base, cand = summaries(("base", 1), ("cand", 2))
    assert f.causes[:3] == (
        "batch sizes not comparable (mixed regime: global batch 8 vs 8)",
        "throughput on different bases: x",
        "whole-run figures include warm-up and the runs differ in length (the candidate saw 1.50x the baseline's "
        "samples): warm-up weighs differently in each")
    (f,) = flag(2.5, ctx={"regime": "unknown", "steady": True, "samples_ratio": 1.5})  # steady: length is no cause
    assert f.causes == ("batch sizes not comparable (unknown regime: global batch 8 vs 8)",)


def test_runs_that_differ_in_length_within_the_tolerance(monkeypatch):
    monkeypatch.setattr(scaling, "SAMPLES_RATIO_TOLERANCE", 0.25)  # a tolerance 1.25 sits on exactly
    for ratio, said in ((1.0, False), (1.25, False), (0.75, False), (1.3, True), (0.7, True)):
        (f,) = flag(2.5, ctx={"steady": False, "samples_ratio": ratio})
        assert any(c.startswith("whole-run figures include warm-up") for c in f.causes) is said, ratio


def test_a_flag_through_the_comparison():
    # the candidate is slower on 2 ranks, its sync share from the context; the whole-run basis
    base, cand = run("base", [0.5] * 3), run("cand", [1.0] * 3, ranks=2, hour=1)
    (c,) = scaling_analysis([base, cand], context={"cand": {"sync_share": 0.5}}).comparisons
    (f,) = c.flags
    assert (f.kind, f.speedup, f.rank_ratio, f.basis, f.significant) == ("slowdown", 0.5, 2.0, "whole run", False)
    assert f.causes == ("communication-bound: gradient sync takes 50% of step time",)


# -- who is compared with whom ----------------------------------------------------------------------


def test_sessions_not_compared_in_session_order():
    idle = session("idle", world_size=1, start_time="2026-01-01T00:00:00+00:00")  # no throughput
    capture = session("capture", gpu=gpu_rows({0: [50.0]}), formats=["nvidia_smi_csv"],
                      start_time="2026-01-01T01:00:00+00:00")
    lone = run("lone", [0.5] * 4, hour=2)
    sessions = [idle, capture, lone]
    groups, pairs, not_compared = comparison_plan(sessions, [session_summary(s) for s in sessions])
    assert pairs == []
    assert [(n.session_id, n.reason) for n in not_compared] == [
        ("idle", "no throughput logged (no step times, no samples/s in a summary)"),
        ("capture", "a GPU capture (nvidia-smi / gpustat / monitor_gpu), not a training run"),
        ("lone", "no other run of model not logged with a throughput to compare with")]
    assert [(g.label, g.members, g.baseline) for g in groups] == [("model not logged", ("idle", "lone"), "lone")]


def test_the_baseline_has_a_throughput_then_trains_then_has_fewest_ranks_then_starts_first():
    sessions = [run("bench", [0.5] * 4, formats=["nccl_tests"]), run("four", [0.5] * 4, ranks=4, hour=1),
                run("two_late", [0.5] * 4, ranks=2, hour=3), run("two", [0.5] * 4, ranks=2, hour=2),
                session("none", world_size=1, start_time="2026-01-01T00:00:00+00:00")]
    sums = [session_summary(s) for s in sessions]
    sums[0] = dataclasses.replace(sums[0], kind="nccl_tests")
    assert pick_baseline(sessions, sums, range(5)) == 3  # not the benchmark, not the run without throughput
    assert pick_baseline(sessions, sums, [1, 4]) == 1
    assert pick_baseline(sessions, sums, []) is None


# -- the fit's inputs ---------------------------------------------------------------------------------


def test_the_fit_of_a_group_of_four_world_sizes():
    times = {1: [1.0] * 8, 2: [0.55] * 8, 4: [0.3] * 8, 8: [0.18] * 8}
    sessions = [run(f"r{ws}", t, ranks=ws, hour=i, model="m") for i, (ws, t) in enumerate(times.items())]
    result = scaling_analysis(sessions)
    (fit,) = result.fits
    assert fit.group == "m" and fit.baseline_world_size == 1 and fit.points == 4
    assert set(fit.karp_flatt) == {2, 4, 8}
    assert set(fit.predicted or {}) == {16, 32} or fit.predicted is None


def test_the_fit_of_a_two_rank_baseline_scales_from_it():
    times = {2: [1.0] * 8, 4: [0.55] * 8, 8: [0.3] * 8}
    sessions = [run(f"r{ws}", t, ranks=ws, hour=i, model="m") for i, (ws, t) in enumerate(times.items())]
    (fit,) = scaling_analysis(sessions).fits
    assert fit.baseline_world_size == 2 and set(fit.karp_flatt) == {4, 8}


def test_a_run_without_a_world_size_adds_no_world_size_to_the_fit():
    sessions = [run("one", [1.0] * 8, model="m"), unsaid("unsaid", [0.9] * 8, hour=1, model="m"),
                run("four", [0.3] * 8, ranks=4, hour=2, model="m")]
    assert scaling_analysis(sessions).fits == ()  # world sizes 1 and 4 only
    sessions[0] = unsaid("one", [1.0] * 8, model="m")
    sessions.append(run("two", [0.55] * 8, ranks=2, hour=3, model="m"))
    (fit,) = scaling_analysis(sessions).fits  # a baseline that does not say counts as 1 rank
    assert fit.baseline_world_size == 1


def test_ratio_of_figures():
    assert scaling._ratio(3.0, 2.0) == 1.5
    assert scaling._ratio(None, 2.0) is None and scaling._ratio(2.0, None) is None
    assert scaling._ratio(2.0, 0.0) is None
    assert scaling._ratio(float("inf"), 2.0) is None and scaling._ratio(2.0, float("inf")) is None


def test_a_steady_slowdown_is_significant_and_a_baseline_listed_second_keeps_its_own_seed():
    base_t = [2.0] + [0.5 + 0.01 * (i % 3) for i in range(30)]
    cand_t = [2.0] + [1.0 + 0.01 * (i % 4) for i in range(30)]
    cand, base = run("cand", cand_t, ranks=2, hour=1), run("base", base_t)
    (c,) = scaling_analysis([cand, base]).comparisons  # the baseline is the second session: seed 1001
    assert (c.baseline, c.candidate) == ("base", "cand")
    kb, kc = warmup_oracle(base_t), warmup_oracle(cand_t)
    expected = steady_bootstrap_interval([(8, t) for t in base_t[kb:]], [(8, t) for t in cand_t[kc:]], 1001, 1000)
    assert c.speedup_ci == pytest.approx(expected, rel=1e-12) and c.speedup_ci[1] < 1
    (f,) = c.flags
    assert (f.kind, f.basis, f.significant) == ("slowdown", "steady state", True)


def test_a_slowdown_on_whole_runs_of_different_bases_gives_that_as_a_cause():
    base = session("base", world_size=1, summary={"samples_per_second": 40.0, "steps_per_second": 5.0},
                   start_time="2026-01-01T00:00:00+00:00")
    cand = run("cand", [0.5, 0.5, 0.5], ranks=2, hour=1)  # 16 samples/s against 40
    (c,) = scaling_analysis([base, cand]).comparisons
    (f,) = c.flags
    assert f.kind == "slowdown" and c.note in f.causes and c.note.startswith("throughput on different bases")
