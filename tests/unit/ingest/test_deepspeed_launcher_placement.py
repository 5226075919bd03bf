"""Where DeepSpeed's launcher put each process: ``WORLD INFO DICT`` gives each host's CUDA devices
(``devices``: what ``--include`` / ``--num_gpus`` chose, each process's CUDA_VISIBLE_DEVICES), and
``global_rank_mapping`` each host's global ranks (``ranks_by_host``), both stated with their line. Real
excerpts (``tests/data/launchers/``, cited in its README, and ``tests/data/frameworks/``) and variations
said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

from tests.support.excerpts import load, reader

launchers, frameworks = reader("launchers"), reader("frameworks")


def test_one_host_of_eight_gpus(tmp_path):
    s = load(tmp_path, launchers("deepspeed_1923_world_info_algo_1_eight_gpus.log"), "ds.log")
    # line 1: WORLD INFO DICT: {'algo-1': [0, 1, 2, 3, 4, 5, 6, 7]}; line 3: global_rank_mapping ... [0, ..., 7]
    assert s.meta.devices == {"algo-1": list(range(8))}
    assert s.meta.ranks_by_host == {"algo-1": list(range(8))}
    assert s.meta.hosts == ["algo-1"] and s.meta.world_size == 8  # line 4: dist_world_size=8
    assert s.meta.facts_source["devices"] == "ds.log:1" and s.meta.facts_source["ranks_by_host"] == "ds.log:3"


def test_the_other_real_launch(tmp_path):
    s = load(tmp_path, frameworks("deepspeed_launcher_37505.log"), "ds.log")
    # lines 3 and 5: {'localhost': [0, 1]} both
    assert s.meta.devices == {"localhost": [0, 1]} and s.meta.ranks_by_host == {"localhost": [0, 1]}


def test_include_a_subset_on_two_hosts(tmp_path):
    """Variation: ``--include`` of GPUs 2,3 on one host and 0,5 on another: the devices are the GPUs, the
    ranks numbered from 0 across hosts in the launcher's order (launch.py's global_rank_mapping)."""
    body = launchers("deepspeed_1923_world_info_algo_1_eight_gpus.log")
    body = body.replace("{'algo-1': [0, 1, 2, 3, 4, 5, 6, 7]})", "{'n1': [0, 1], 'n2': [2, 3]})")
    body = body.replace("{'algo-1': [0, 1, 2, 3, 4, 5, 6, 7]}", "{'n1': [2, 3], 'n2': [0, 5]}")
    body = body.replace("nnodes=1, num_local_procs=8", "nnodes=2, num_local_procs=2").replace("=8", "=4")
    s = load(tmp_path, body)
    assert s.meta.devices == {"n1": [2, 3], "n2": [0, 5]}
    assert s.meta.ranks_by_host == {"n1": [0, 1], "n2": [2, 3]}
    assert (s.meta.nodes, s.meta.world_size, s.meta.hosts) == (2, 4, ["n1", "n2"])


def test_a_mapping_that_is_no_dict_of_lists_is_no_fact(tmp_path):
    """Variation: a mapping cut short by the paste states nothing (and is no crash)."""
    body = launchers("deepspeed_1923_world_info_algo_1_eight_gpus.log").replace(
        "{'algo-1': [0, 1, 2, 3, 4, 5, 6, 7]})", "{'algo-1': [0, 1, 2,")
    s = load(tmp_path, body)
    assert s.meta.get("ranks_by_host") is None and s.meta.devices == {"algo-1": list(range(8))}


# --- the launcher's lines logged again by a wrapper's logger -------------------------------------------------
RELOGGED = "deepspeed_3262_include_3_5_relogged_by_wrapper.log"


def test_lines_relogged_by_a_wrapper(tmp_path):
    # DeepSpeed#3262 line 5: "2023-04-15 22:25:49 INFO [__main__] [2023-04-15 22:25:49,992] [INFO]
    # [launch.py:229:main] WORLD INFO DICT: {'localhost': [3, 5]}" (--include localhost:3,5); line 7: nnodes=1,
    # num_local_procs=2
    s = load(tmp_path, launchers(RELOGGED), "ds.log")
    assert s.meta.framework == "deepspeed" and s.meta.devices == {"localhost": [3, 5]}
    assert s.meta.facts_source["devices"] == "ds.log:5"
    assert s.meta.world_size == 2 and s.meta.world_size_from.startswith("derived:")
    assert s.events.empty and s.diagnostics.empty  # line 1's WARNING is the launcher's note, no failure


def test_the_records_own_level_is_kept(tmp_path):
    """Variation: the wrapper logs at INFO a record another logger wrote as ERROR: the record's own level and
    time count."""
    body = launchers(RELOGGED).replace("[WARNING] [runner.py:190:fetch_hostfile] Unable", "[ERROR] Unable")
    s = load(tmp_path, body)
    assert s.events["level"].tolist() == ["ERROR"] and s.events["source"].tolist() == ["capture.log:1"]
