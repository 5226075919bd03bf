"""Lines in which a process says which rank it is as it joins the run, on excerpts of real logs from public
issues (``tests/data/rank_lines/``, each cited in its README) and on variations of them said to be made here.
Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import logkit
from tests.support.excerpts import load, reader

text = reader("rank_lines")




def joined(s) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == "rank_joined"].to_dict("records")


def test_each_process_s_distributed_init_line_is_a_rank_of_the_run(tmp_path):
    # detr_21 lines 4-11: "| distributed init (rank 3): env://" ... ranks 3, 1, 4, 2, 6, 7, 0, 5
    s = load(tmp_path, text("detr_21_distributed_init_8_ranks.log"))
    assert [r["rank"] for r in joined(s)] == [3, 1, 4, 2, 6, 7, 0, 5]
    assert [r["source"] for r in joined(s)] == [f"capture.log:{n}" for n in range(4, 12)]
    # nothing states the world size: at least rank 7 + 1, said to be a lower bound
    assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith("inferred (lower bound)")


def test_a_folder_holding_such_a_log_is_a_session(tmp_path):
    # the lines alone make the file a run's console log (no NCCL or traceback line in it)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "train.log").write_text(text("detr_21_distributed_init_8_ranks.log"), encoding="utf-8")
    (found,) = logkit.load_sessions(folder)
    assert len(joined(found)) == 8


def test_initialized_host_lines_give_hosts_ranks_and_a_lower_bound_of_the_nodes(tmp_path):
    # made here: fairseq's logger line (fairseq/distributed/utils.py: "initialized host {} as rank {}") for detr_21's
    # ranks 3 and 1 on host node-a and rank 6 on node-b, in fairseq's "date | LEVEL | logger | message" format, and a
    # fork's "Initialized Host {} as Rank {}" for rank 0
    body = "".join(f"2022-08-05 08:44:41 | INFO | fairseq.distributed.utils | initialized host {h} as rank {r}\n"
                   for h, r in (("node-a", 3), ("node-a", 1), ("node-b", 6)))
    body += "Initialized Host node-a as Rank 0\n"
    s = load(tmp_path, body)
    assert sorted((r["host"], r["rank"]) for r in joined(s)) == [("node-a", 0), ("node-a", 1), ("node-a", 3),
                                                                  ("node-b", 6)]
    assert s.meta["hosts"] == ["node-a", "node-b"] and s.meta["ranks_by_host"] == {"node-a": [0, 1, 3], "node-b": [6]}
    assert s.meta["nodes"] == 2 and "lower bound" in s.meta["nodes_from"]
    assert s.meta["world_size"] == 7 and "lower bound" in s.meta["world_size_from"]


def test_torch_s_store_based_barrier_lines_name_the_rank_writing_them(tmp_path):
    # colossalai_1580: "Rank 3: Completed store-based barrier" (line 1), "Rank 0: ..." (line 3), "Added key: ... to
    # store for rank: 3" (line 5, rank 3 again: no second event), "... for rank: 2" (line 6), rank 3 again (line 7)
    s = load(tmp_path, text("colossalai_1580_store_based_barrier_rich.log"))
    assert [(r["rank"], r["source"]) for r in joined(s)] == [(3, "capture.log:1"), (0, "capture.log:3"),
                                                              (2, "capture.log:6")]
    assert s.diagnostics.empty or not s.diagnostics["message"].str.contains("not understood").any()


def test_a_rank_waiting_alone_in_the_barrier_is_seen(tmp_path):
    # made here: torch's waiting line (distributed_c10d._store_based_barrier) for rank 5, twice, in a logging
    # module format, in both wordings (worker_count, then the newer num_workers_joined); one event, rank 5
    body = "".join(f"2025-03-11 05:21:{s:02d},421 INFO Waiting in store based barrier to initialize process group for "
                   f"rank: 5, key: store_based_barrier_key:1 (world_size=8, {w}=1, timeout=0:30:00)\n"
                   for s, w in ((4, "worker_count"), (14, "num_workers_joined")))
    s = load(tmp_path, body)
    assert [r["rank"] for r in joined(s)] == [5]
