"""The step breakdown and stragglers by arrival against an oracle computed here from the rank
streams (plain json, statistics.median) of the real data-straggler run in sample_logs/why_slow, and
on made-up phases where the answer is known by construction."""

from __future__ import annotations

import statistics

import orjson
import pandas as pd
import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels.breakdown import arrival_stragglers, step_breakdown, synced_steps
from logkit.run.load import load_sessions
from tests.support.analysis_synth import phased_session
from tests.support.launch import REPO

WHY_SLOW = REPO / "sample_logs" / "why_slow" / "logs"


def _two_rank_session():
    (s,) = [s for s in load_sessions(WHY_SLOW) if s.meta["world_size"] == 2]
    return s


def _oracle(folder):
    """Per rank: medians of data, compute, exposed sync, wait, other and step time over the steps
    both ranks synced; per rank the share of those steps it reached the sync last."""
    phases, steps = {}, {}
    for path in sorted(folder.glob("*_rank*.jsonl")):
        for line in path.read_bytes().splitlines():
            r = orjson.loads(line)
            if r["type"] == "step_phases":
                phases[(r["rank"], r["step"])] = r
            elif r["type"] == "training_step_complete":
                steps[(r["rank"], r["step"])] = r["timing"]
    ranks = sorted({k[0] for k in phases})
    synced = sorted({s for _, s in phases if all((r, s) in phases and (r, s) in steps for r in ranks)})
    per = {r: {k: [] for k in ("data", "compute", "exposed", "wait", "other", "step")} for r in ranks}
    step_median = statistics.median(steps[(r, s)]["step_time_seconds"] for r in ranks for s in synced)
    last = {r: 0 for r in ranks}
    for s in synced:
        syncs = {r: phases[(r, s)]["sync_s"] for r in ranks}
        starts = {r: phases[(r, s)]["begin_clock_s"] for r in ranks}
        low = min(syncs.values())
        starter = max(ranks, key=lambda r: starts[r])  # the last rank to start its step
        # a rank that started early and computed longer than the last starter waited in forward for it
        fwd = {r: min(max(0.0, phases[(r, s)]["compute_s"] - phases[(starter, s)]["compute_s"]),
                      starts[starter] - starts[r]) for r in ranks}
        fwd = {r: w if w > 0.02 * step_median else 0.0 for r, w in fwd.items()}  # above compute's noise
        late = {r: max(max(syncs.values()) - syncs[r], starts[r] - min(starts.values())) for r in ranks}
        order = sorted(ranks, key=lambda r: -late[r])
        if late[order[0]] - late[order[1]] > 0.02 * step_median:
            last[order[0]] += 1
        for r in ranks:
            t, p = steps[(r, s)], phases[(r, s)]
            per[r]["data"].append(t["data_time_seconds"])
            per[r]["compute"].append(p["compute_s"] - fwd[r])
            per[r]["exposed"].append(low)
            per[r]["wait"].append(syncs[r] - low + fwd[r])
            per[r]["step"].append(t["step_time_seconds"])
            per[r]["other"].append(max(0.0, t["step_time_seconds"] - t["data_time_seconds"] - p["compute_s"] - syncs[r]))
    medians = {r: {k: statistics.median(v) for k, v in d.items()} for r, d in per.items()}
    return medians, {r: n / len(synced) for r, n in last.items()}, len(synced)


def test_breakdown_of_the_real_data_straggler_run_matches_the_oracle():
    s = _two_rank_session()
    medians, shares, n = _oracle(WHY_SLOW / s.session_id)
    got = step_breakdown(s).set_index("rank")
    for rank, want in medians.items():
        row = got.loc[rank]
        assert row["steps"] == n == 40
        for col, key in (("data_s", "data"), ("compute_s", "compute"), ("comm_exposed_s", "exposed"),
                         ("wait_s", "wait"), ("other_s", "other"), ("step_s", "step")):
            assert row[col] == pytest.approx(want[key], abs=1e-9), (rank, col)
    # the injection: rank 1 loads each batch 50 ms slower, rank 0 waits for it at the sync
    assert got.loc[1, "data_s"] >= 0.05 and got.loc[0, "wait_s"] > 0.04 > got.loc[1, "wait_s"]
    strag = arrival_stragglers(s).set_index("rank")
    for rank, share in shares.items():
        assert strag.loc[rank, "last_arrival_share"] == pytest.approx(share)
    assert strag.loc[1, "is_straggler"] and strag.loc[1, "cause"] == "data" and not strag.loc[0, "is_straggler"]


def test_analysis_json_contract_for_stragglers_and_breakdown():
    doc = analyze(load_sessions(WHY_SLOW)).to_dict()
    (row,) = [r for r in doc["stragglers"] if r["is_straggler"]]
    assert {"session_id", "rank", "score", "is_straggler", "cause", "last_arrival_share"} <= set(row)
    assert row["rank"] == 1 and row["cause"] == "data"
    assert {tuple(sorted(r)) for r in doc["step_breakdown"]} == {tuple(sorted(
        ["session_id", "rank", "steps", "data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s", "step_s"]))}
    for key in ("data_s", "compute_s", "comm_exposed_s", "wait_s", "last_arrival_share", "cause"):
        assert key in doc["definitions"], key
    assert doc["verdict"] and "rank 1" in doc["verdict"][-1].lower()


def test_the_last_arrival_waits_for_nobody_and_the_others_wait_for_it():
    # rank 2 arrives last every step by 30 ms because its compute takes 30 ms more
    syncs = {0: [0.035] * 6, 1: [0.034] * 6, 2: [0.005] * 6}
    compute = {0: [0.02] * 6, 1: [0.02] * 6, 2: [0.05] * 6}
    data = {r: [0.01] * 6 for r in syncs}
    s = phased_session(syncs, data, compute)
    b = step_breakdown(s).set_index("rank")
    assert b["comm_exposed_s"].tolist() == pytest.approx([0.005] * 3)
    assert b["wait_s"].tolist() == pytest.approx([0.030, 0.029, 0.0])
    assert b["other_s"].tolist() == pytest.approx([0.1 - 0.01 - 0.02 - 0.035, 0.1 - 0.01 - 0.02 - 0.034,
                                                   0.1 - 0.01 - 0.05 - 0.005])
    st = arrival_stragglers(s).set_index("rank")
    assert st["last_arrival_share"].tolist() == [0.0, 0.0, 1.0]
    assert st.loc[2, "is_straggler"] and st.loc[2, "cause"] == "compute"
    assert st.loc[2, "lateness_s"] == pytest.approx(0.030)


def test_no_straggler_when_arrivals_are_within_the_margin_or_take_turns():
    even = phased_session({0: [0.0050, 0.0051] * 3, 1: [0.0051, 0.0050] * 3}, {r: [0.01] * 6 for r in (0, 1)},
                    {r: [0.02] * 6 for r in (0, 1)})
    assert not arrival_stragglers(even)["is_straggler"].any()
    turns = phased_session({0: [0.03, 0.001] * 3, 1: [0.001, 0.03] * 3}, {r: [0.01] * 6 for r in (0, 1)},
                     {r: [0.02] * 6 for r in (0, 1)})
    st = arrival_stragglers(turns)
    assert st["last_arrival_share"].tolist() == [0.5, 0.5] and st["is_straggler"].sum() <= 1


def test_cause_host_unexplained_and_a_single_rank():
    # steps of 0.1 s on both ranks (DDP): rank 1 arrives 39 ms late with the same data and compute
    # times, so its time after the sync (optimizer, host work) is what is longer; 10 steps (2 ranks:
    # last in 8 of 8 is the fewest a fair coin gives with a chance below 1%)
    syncs = {0: [0.04] * 10, 1: [0.001] * 10}
    same = {r: [0.01] * 10 for r in syncs}
    st = arrival_stragglers(phased_session(syncs, same, same)).set_index("rank")
    assert st.loc[1, "is_straggler"] and st.loc[1, "cause"] == "host"
    # 30 ms late, a third of it in each phase: no phase explains half of it
    spread = phased_session({0: [0.04] * 10, 1: [0.01] * 10}, {0: [0.01] * 10, 1: [0.02] * 10},
                      {0: [0.02] * 10, 1: [0.03] * 10})
    st = arrival_stragglers(spread).set_index("rank")
    assert st.loc[1, "is_straggler"] and st.loc[1, "cause"] is None
    single = phased_session({0: [0.01] * 6}, {0: [0.01] * 6}, {0: [0.02] * 6})
    assert synced_steps(single).empty and step_breakdown(single).empty and arrival_stragglers(single).empty


def test_a_step_only_some_ranks_synced_is_left_out():
    s = phased_session({0: [0.03] * 4, 1: [0.001] * 4}, {r: [0.01] * 4 for r in (0, 1)}, {r: [0.02] * 4 for r in (0, 1)})
    s.phases = s.phases[~((s.phases["rank"] == 1) & (s.phases["step"] == 4))]
    rows = synced_steps(s)
    assert sorted(set(rows["step"])) == [1, 2, 3] and isinstance(rows, pd.DataFrame)
