"""torchrun's elastic agent's worker-group dump after a rendezvous: the job's world size
(``global_world_sizes``), the nodes (``group_world_size``: one agent a node), this node's processes
(``local_ranks``), each stated with its line; a dump printed again after a restart says what the run went on
with. Real excerpts (``tests/data/launchers/``, cited in its README) in torch's Python logging form, behind
Ray's actor prefix, and variations made here (torch 2.4's glog header on every line); expected values read
off the lines by eye."""

from __future__ import annotations

import re

import logkit
from tests.support.excerpts import load, reader

text = reader("launchers")
DOC2EDAG = "doc2edag_24_torchrun_agent_restart_dump_python_logging.log"
TORCHX = "torchx_492_ray_actor_prefix_torchrun_agent_dump.log"


def test_python_logging_form_after_a_restart(tmp_path):
    s = load(tmp_path, text(DOC2EDAG), "agent.log")
    # line 14: global_world_sizes=[4, 4, 4, 4]; line 9: group_world_size=1; line 10: local_ranks=[0, 1, 2, 3]
    assert (s.meta.world_size, s.meta.nodes, s.meta.nproc_per_node) == (4, 1, 4)
    assert s.meta.world_size_from.startswith("stated:") and s.meta.facts_source["world_size"] == "agent.log:14"
    assert s.meta.nodes_from.startswith("stated:") and s.meta.facts_source["nodes"] == "agent.log:9"
    assert s.meta.framework == "torchrun" and s.diagnostics.empty


def test_behind_rays_actor_prefix(tmp_path):
    s = load(tmp_path, text(TORCHX), "agent.log")
    # line 11: global_world_sizes=[2]; line 6: group_world_size=2 (two agents, one process each: line 7)
    assert (s.meta.world_size, s.meta.nodes, s.meta.nproc_per_node) == (2, 2, 1)
    assert s.meta.framework == "torchrun" and s.diagnostics.empty


def test_torch_2_4_glog_header_on_every_line_in_a_folder(tmp_path):
    """Variation: the Doc2EDAG dump as torch 2.4+ writes it (a glog header naming api.py before each line),
    alone in a folder (no other line tells a training log)."""
    head = "I0813 10:46:03.123000 4242 torch/distributed/elastic/agent/server/api.py:525] "
    dump = [ln for ln in text(DOC2EDAG).splitlines() if ln.startswith("  ")]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "node1.log").write_text("".join(head + ln + "\n" for ln in dump), encoding="utf-8")
    found = logkit.load_sessions(tmp_path / "run")
    assert len(found) == 1
    s = found[0]
    world = int(re.search(r"global_world_sizes=\[(\d+)", text(DOC2EDAG))[1])
    assert (s.meta.world_size, s.meta.nodes, s.meta.framework) == (world, 1, "torchrun")


def test_the_last_dump_is_the_runs(tmp_path):
    """Variation: the agent met again with two nodes after a restart: the later dump's sizes are the run's."""
    first = text(DOC2EDAG)
    again = first.replace("restart_count=1", "restart_count=2").replace("group_world_size=1", "group_world_size=2") \
        .replace("global_world_sizes=[4, 4, 4, 4]", "global_world_sizes=[8, 8, 8, 8]")
    s = load(tmp_path, first + again)
    assert (s.meta.world_size, s.meta.nodes) == (8, 2)


def test_unequal_world_sizes_state_none(tmp_path):
    """Variation: a dump whose workers disagree on the world size states no world size (and no crash)."""
    s = load(tmp_path, text(DOC2EDAG).replace("global_world_sizes=[4, 4, 4, 4]", "global_world_sizes=[4, 4, 2, 4]"))
    assert s.meta.world_size_from is None or "global_world_sizes" not in s.meta.world_size_from
