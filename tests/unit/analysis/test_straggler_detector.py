"""The straggler detector (``kernels/straggler.py``) and the two tables that call it.

- Over the real balanced 2-rank runs of ``sample_logs/balanced`` (both ranks doing the same work),
  at most 1 in 20 names a straggler; over the injected ones of ``sample_logs/stragglers`` the
  injected rank is named with its cause (data; compute for forward and backward).
- Every figure the decision rests on (last-arrival share, binomial p-value, noise) and the
  decision itself, against an oracle computed here from the rank streams (plain json,
  ``statistics.median``, ``math.comb``).
- Each threshold on both sides of its edge: a value just below and just above flips the decision.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels import straggler as kernel
from logkit.analysis.kernels.breakdown import arrival_stragglers, synced_steps
from logkit.analysis.kernels.performance import stragglers
from logkit.analysis.kernels.straggler import binomial_tail, detect, robust_sd, worst_by_margin
from logkit.analysis.thresholds import (
    ARRIVAL_MARGIN,
    STRAGGLER_ALPHA,
    STRAGGLER_NOISE,
    STRAGGLER_SCORE,
    STRAGGLER_SHARE,
)
from logkit.run.load import load_session, load_sessions
from tests.support.analysis_synth import phased_session
from tests.support.launch import REPO

BALANCED = REPO / "sample_logs" / "balanced"
INJECTED = REPO / "sample_logs" / "stragglers"
CAUSE_OF = {"data": "data", "forward": "compute", "backward": "compute"}


# -- the oracle: from the rank streams, by hand ------------------------------------------------


def tail(k: int, n: int, p: float) -> float:
    """P(X >= k), X ~ Binomial(n, p), with exact integer binomial coefficients."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def oracle(folder: Path) -> dict:
    """Per rank: last arrivals, share, p-value, median lateness, score; and the run's noise and
    the straggler the rule names (None), all from the JSONL records."""
    phases, steps = {}, {}
    for path in sorted(folder.glob("*_rank*.jsonl")):
        for line in path.read_bytes().splitlines():
            r = orjson.loads(line)
            if r["type"] == "step_phases":
                phases.setdefault((r["rank"], r["step"]), r)
            elif r["type"] == "training_step_complete":
                steps.setdefault((r["rank"], r["step"]), r["timing"]["step_time_seconds"])
    ranks = sorted({k[0] for k in phases})
    synced = sorted({s for _, s in phases if all((r, s) in phases and (r, s) in steps for r in ranks)})
    step_median = statistics.median(steps[(r, s)] for r in ranks for s in synced)
    late = {r: [] for r in ranks}
    last = dict.fromkeys(ranks, 0)
    for s in synced:
        syncs = {r: phases[(r, s)]["sync_s"] for r in ranks}
        starts = {r: phases[(r, s)]["begin_clock_s"] for r in ranks}
        lat = {r: max(max(syncs.values()) - syncs[r], starts[r] - min(starts.values())) for r in ranks}
        order = sorted(ranks, key=lambda r: -lat[r])
        if lat[order[0]] - lat[order[1]] > ARRIVAL_MARGIN * step_median:
            last[order[0]] += 1
        for r in ranks:
            late[r].append(lat[r])
    n, m = len(ranks), len(synced)
    per_step = [statistics.median(steps[(r, s)] for r in ranks) for s in synced]
    center = statistics.median(per_step)
    noise = 1.4826 * statistics.median(abs(x - center) for x in per_step)
    out = {r: {"last": last[r], "share": last[r] / m, "p": min(1.0, n * tail(last[r], m, 1 / n)),
               "lateness": statistics.median(late[r]), "score": statistics.median(late[r]) / step_median}
           for r in ranks}
    top = max(ranks, key=lambda r: (out[r]["score"], -r))
    o = out[top]
    named = (o["score"] > STRAGGLER_SCORE and o["share"] >= STRAGGLER_SHARE and o["p"] < STRAGGLER_ALPHA
             and o["lateness"] > STRAGGLER_NOISE * noise)
    return {"ranks": out, "noise": noise, "steps": m, "named": top if named else None}


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("training_*") if p.is_dir())


# -- the real runs ------------------------------------------------------------------------------


def test_the_corpora_are_there():
    assert len(_runs(BALANCED)) >= 24
    kinds = [p.parent.name.split("_")[0] for p in _runs(INJECTED)]
    assert all(kinds.count(k) >= 2 for k in CAUSE_OF)


def test_balanced_runs_name_a_straggler_at_most_once_in_20():
    runs = _runs(BALANCED)
    a = analyze(load_sessions(BALANCED))
    named = a.stragglers[a.stragglers["is_straggler"].astype(bool)]
    print(f"balanced runs naming a straggler: {named['session_id'].nunique()} of {len(runs)} "
          f"({', '.join(named['session_id'])})")
    assert a.stragglers["session_id"].nunique() == len(runs)
    assert named["session_id"].nunique() <= len(runs) / 20
    # every run's decision is the oracle's, over the same streams
    assert sorted(named["session_id"]) == sorted(p.name for p in runs if oracle(p)["named"] is not None)


@pytest.mark.parametrize("folder", _runs(BALANCED)[:6] + _runs(INJECTED), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_arrival_figures_match_the_oracle(folder):
    want = oracle(folder)
    s = load_session(folder)
    got = arrival_stragglers(s).set_index("rank")
    for rank, o in want["ranks"].items():
        assert got.loc[rank, "last_arrival_share"] == pytest.approx(o["share"], abs=1e-12)
        assert got.loc[rank, "p_value"] == pytest.approx(o["p"], rel=1e-9, abs=1e-300)
        assert got.loc[rank, "lateness_s"] == pytest.approx(o["lateness"], abs=1e-9)
        assert got.loc[rank, "score"] == pytest.approx(o["score"], rel=1e-9)
    rows = synced_steps(s)
    found = detect(rows.assign(value=rows["lateness_s"])[["rank", "step", "value", "step_s"]])
    assert found["noise_s"].iloc[0] == pytest.approx(want["noise"], rel=1e-9, abs=1e-12)
    named = got.index[got["is_straggler"]].tolist()
    assert named == ([] if want["named"] is None else [want["named"]])


@pytest.mark.parametrize("folder", _runs(INJECTED), ids=lambda p: p.parent.name)
def test_an_injected_straggler_is_named_with_its_cause(folder):
    kind, rank, ms = re.fullmatch(r"(data|forward|backward)_rank(\d)_(\d+)ms", folder.parent.name).groups()
    a = analyze([load_session(folder)])
    named = a.stragglers[a.stragglers["is_straggler"].astype(bool)]
    assert named["rank"].tolist() == [int(rank)], named
    assert named["cause"].tolist() == [CAUSE_OF[kind]]
    o = oracle(folder)["ranks"][int(rank)]
    print(f"{folder.parent.name}: rank {rank} named, cause {CAUSE_OF[kind]}, last in {o['share']:.0%} of steps, "
          f"{o['lateness'] * 1e3:.1f} ms late (injected {ms} ms), p {o['p']:.2g}")


# -- the kernel's figures --------------------------------------------------------------------------


@pytest.mark.parametrize("k,n,p", [(0, 5, 0.5), (1, 1, 0.5), (15, 30, 0.5), (23, 30, 0.5), (30, 30, 0.5),
                                   (7, 12, 1 / 3), (50, 100, 1 / 3), (3, 40, 0.125), (31, 30, 0.5), (400, 1000, 0.25)])
def test_binomial_tail_against_exact_sums(k, n, p):
    want = tail(k, n, p) if k <= n else 0.0
    assert binomial_tail(k, n, p) == pytest.approx(min(want, 1.0), rel=1e-9, abs=1e-300)


def test_robust_sd_and_the_worst_by_a_margin():
    x = [0.031, 0.030, 0.052, 0.029, 0.033, 0.120, 0.030]
    center = statistics.median(x)
    assert robust_sd(x) == pytest.approx(1.4826 * statistics.median(abs(v - center) for v in x))
    assert robust_sd([float("nan")] + x) == pytest.approx(robust_sd(x)) and math.isnan(robust_sd([]))
    values = np.array([[0.0, 0.5, 0.300, 0.1],
                       [0.2, 0.5, 0.295, 0.0],
                       [0.1, 0.0, 0.000, 0.0]])
    # step 1: rank 1 by 0.1; step 2: a tie; step 3: rank 0 by 0.005 (within a 0.01 margin); step 4: rank 0
    assert worst_by_margin(values, 0.01).tolist() == [[False, False, False, True],
                                                      [True, False, False, False],
                                                      [False, False, False, False]]
    assert not worst_by_margin(values[:1], 0.0).any()  # one rank is never the worst of a step


def samples(values: dict[int, list[float]], step_s: dict[int, list[float]] | float = 1.0) -> pd.DataFrame:
    """Detector input: per rank its value per step (steps 1..n), step time per step or one for all."""
    rows = []
    for r, vs in values.items():
        for i, v in enumerate(vs):
            t = step_s if isinstance(step_s, float) else step_s[r][i]
            rows.append({"rank": r, "step": i + 1, "value": v, "step_s": t})
    return pd.DataFrame(rows)


def named(frame: pd.DataFrame) -> list[int]:
    return frame.loc[frame["is_straggler"], "rank"].tolist()


def test_a_coin_flip_is_not_a_straggler_however_late():
    # rank 1 last in 17 of 30 steps (57%, as in the false alarms), 300 ms late each time
    last1 = [i % 2 == 0 or i < 4 for i in range(30)]
    got = detect(samples({0: [0.0 if a else 0.3 for a in last1], 1: [0.3 if a else 0.0 for a in last1]}))
    k = sum(last1)
    assert k == 17
    assert got.loc[1, "p_value"] == pytest.approx(2 * tail(17, 30, 0.5))
    assert got.loc[1, "worst_share"] >= STRAGGLER_SHARE and got.loc[1, "score"] > STRAGGLER_SCORE
    assert named(got) == []


def _last_in(k: int, n: int = 30, late: float = 0.3) -> pd.DataFrame:
    """Two ranks, n steps of 1 s: rank 1 the last arrival in the first k, rank 0 in the rest; rank
    1 is ``late`` seconds late when last, else 0.1 s (so its median lateness is at least 0.1 s)."""
    v1 = [late if i < k else 0.1 for i in range(n)]
    v0 = [0.0 if i < k else late for i in range(n)]
    return detect(samples({0: v0, 1: v1}))


@pytest.mark.parametrize("n,k,flagged", [(30, 23, True), (30, 22, False), (119, 74, True), (128, 79, False)])
def test_alpha_edge_the_count_of_last_arrivals(n, k, flagged):
    # two ranks, rank 1 the last arrival in k of n steps: p = 2 P(X >= k) is 0.0052 and 0.016 for
    # 23 and 22 of 30, and 0.00997 and 0.01009 for 74 of 119 and 79 of 128 (on either side of 1%)
    got = _last_in(k, n)
    p = 2 * tail(k, n, 0.5)
    assert got.loc[1, "p_value"] == pytest.approx(p) and (p < 0.01) == flagged
    assert got.loc[1, "worst_share"] >= 0.5 and got.loc[1, "score"] > 0.05
    assert named(got) == ([1] if flagged else [])


def test_alpha_edge_by_the_threshold_itself(monkeypatch):
    p = 2 * tail(23, 30, 0.5)
    monkeypatch.setattr(kernel, "STRAGGLER_ALPHA", p * (1 + 1e-9))
    assert named(_last_in(23)) == [1]
    monkeypatch.setattr(kernel, "STRAGGLER_ALPHA", p)  # p must be below alpha, not equal
    assert named(_last_in(23)) == []


def _noisy_steps(n: int = 40) -> tuple[list[float], float]:
    """Step times of 1 s +- a spread, and their robust SD as the oracle computes it."""
    t = [1.0 + 0.01 * ((i * 7) % 11 - 5) for i in range(n)]
    center = statistics.median(t)
    return t, 1.4826 * statistics.median(abs(x - center) for x in t)


@pytest.mark.parametrize("sds,flagged", [(2.02, True), (1.98, False)])
def test_noise_edge_lateness_against_the_spread_of_step_times(sds, flagged):
    # the bar: 2 robust SDs of the step times (the values here, not the constant, pin it)
    t, sd = _noisy_steps()
    late = sds * sd  # rank 1 last in every step, by this much
    got = detect(samples({0: [0.0] * len(t), 1: [late] * len(t)}, {0: t, 1: t}))
    assert got.loc[1, "noise_s"] == pytest.approx(sd)
    assert got.loc[1, "worst_share"] == 1.0 and got.loc[1, "p_value"] < STRAGGLER_ALPHA
    assert got.loc[1, "score"] > STRAGGLER_SCORE
    assert named(got) == ([1] if flagged else [])


@pytest.mark.parametrize("late,flagged", [(0.0501, True), (0.0499, False)])
def test_score_edge_lateness_as_a_share_of_the_step(late, flagged):
    # the bar: late by more than 5% of a step
    got = detect(samples({0: [0.0] * 30, 1: [late] * 30}))  # steps of 1 s, no noise
    assert got.loc[1, "score"] == pytest.approx(late) and got.loc[1, "worst_share"] == 1.0
    assert named(got) == ([1] if flagged else [])


@pytest.mark.parametrize("slow,flagged", [(1.0501, True), (1.0499, False)])
def test_score_edge_by_step_time(slow, flagged):
    # the bar: a median step more than 5% above the fastest rank's
    rows = pd.DataFrame({"session_id": "s", "rank": [0] * 30 + [1] * 30, "step": list(range(1, 31)) * 2,
                         "step_time_s": [1.0] * 30 + [slow] * 30})
    got = stragglers(rows).set_index("rank")
    assert got.loc[1, "vs_fastest"] == pytest.approx(slow) and got.loc[1, "score"] == pytest.approx(slow - 1)
    assert got.loc[1, "p_value"] == pytest.approx(2 * 0.5 ** 30)
    assert got["is_straggler"].tolist() == [False, flagged]


@pytest.mark.parametrize("k,flagged", [(50, True), (49, False)])
def test_share_edge_last_in_half_the_steps(k, flagged):
    # three ranks, 100 steps: rank 2 last in k of them (0.3 s late, else 0.1 s), ranks 0 and 1 take
    # turns in the others; a share of 0.49 is still far above a fair 1/3 (p < alpha), 0.5 is needed
    vals = {0: [], 1: [], 2: []}
    for i in range(100):
        last = 2 if i < k else i % 2
        for r in vals:
            vals[r].append(0.3 if r == last else (0.1 if r == 2 else 0.0))
    got = detect(samples(vals))
    assert got.loc[2, "worst_share"] == k / 100
    assert got.loc[2, "p_value"] == pytest.approx(min(1.0, 3 * tail(k, 100, 1 / 3)))
    assert got.loc[2, "p_value"] < STRAGGLER_ALPHA and got.loc[2, "score"] > STRAGGLER_SCORE
    assert named(got) == ([2] if flagged else [])


@pytest.mark.parametrize("gap,last", [(0.00202, True), (0.00198, False)])
def test_margin_edge_the_last_arrival_by_2_percent_of_a_step(gap, last):
    # rank 1 comes ``gap`` after rank 0 in every step: just over and just under 2% of the 0.1 s step
    s = phased_session({0: [0.04] * 10, 1: [0.04 - gap] * 10}, {r: [0.01] * 10 for r in (0, 1)},
                {r: [0.02] * 10 for r in (0, 1)})
    rows = synced_steps(s)
    assert rows.loc[rows["rank"] == 1, "last"].tolist() == [last] * 10
    assert not rows.loc[rows["rank"] == 0, "last"].any()
    assert arrival_stragglers(s).set_index("rank").loc[1, "last_arrival_share"] == (1.0 if last else 0.0)


@pytest.mark.parametrize("d,cause", [(0.0202, "data"), (0.0198, None)])
def test_cause_share_edge_half_of_the_lateness(d, cause):
    # rank 1 arrives 40 ms late every step: ``d`` of it in data (50.5%, 49.5%), 10 ms in compute, the
    # rest after the sync (host); data is the largest excess, the cause only from half the lateness
    n, late = 12, 0.04
    s = phased_session({0: [late] * n, 1: [0.0] * n}, {0: [0.01] * n, 1: [0.01 + d] * n}, {0: [0.02] * n, 1: [0.03] * n})
    st = arrival_stragglers(s).set_index("rank")
    assert st.loc[1, "is_straggler"] and st.loc[1, "lateness_s"] == pytest.approx(late)
    assert st.loc[1, "cause"] == cause


def test_the_detector_needs_no_session_and_takes_a_window():
    # the live view's use: the last 10 steps of a run only
    t = [1.0] * 40
    vals = {0: [0.0] * 40, 1: [0.0] * 30 + [0.5] * 10}
    whole = detect(samples(vals, {0: t, 1: t}))
    window = detect(samples(vals, {0: t, 1: t}).query("step > 30"))
    assert named(whole) == [] and named(window) == [1]
    assert window.loc[1, "steps"] == 10 and window.loc[1, "p_value"] == pytest.approx(2 * 0.5 ** 10)
    assert not detect(samples({0: [0.0] * 5})).loc[0, "is_straggler"]  # one rank is never a straggler
    with pytest.raises(ValueError):
        detect(samples(vals), baseline="median")


def test_only_the_steps_every_rank_has_are_counted():
    rows = samples({0: [0.0] * 10, 1: [0.5] * 12})  # rank 1 logged two steps rank 0 did not
    got = detect(rows)
    assert got.loc[1, "steps"] == 10 and got.loc[1, "worst_steps"] == 10
    assert got.loc[1, "p_value"] == pytest.approx(2 * 0.5 ** 10) and named(got) == [1]
    no_steps = rows.assign(step=np.where(rows["rank"] == 0, np.nan, rows["step"]))  # rank 0 numbered none
    got = detect(no_steps)
    assert got.loc[1, "steps"] == 0 and math.isnan(got.loc[1, "p_value"]) and named(got) == []
