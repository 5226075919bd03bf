"""Hosts, scope, transport and the right peak of sessions built in memory (``kernels/fabric.py``), and the
fabric findings. Every expected value is written out from the rows given here or from the cited sources."""

from __future__ import annotations

import pytest

from logkit.analysis.findings.fabric_findings import fabric_findings
from logkit.analysis.kernels.communication import communication_table
from logkit.analysis.kernels.fabric import (
    fabric,
    host_rows,
    host_sync_busbw,
    scope_of,
    session_link,
    transport_of,
)
from logkit.analysis.kernels.performance import gpu_table
from tests.support.analysis_synth import comm_rows, gpu_rows, session

H100 = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(2)]
TWO_HOSTS = {"node0": [0, 1], "node1": [2, 3]}


def _two_nodes(**meta):
    base = dict(world_size=4, nodes=2, nodes_from="stated: test", hosts=["node0", "node1"], ranks_by_host=TWO_HOSTS,
                local_ranks_by_host={"node0": [0, 1], "node1": [0, 1]}, gpus=H100, gpu_count=4, backend="nccl",
                mode="MULTI-GPU")
    return {**base, **meta}


def test_hosts_with_their_gpus_from_the_samples_of_each_host():
    # two hosts with two GPUs each, sampled by each host's local rank 0 (each sample carries its host)
    gpu = gpu_rows({0: [50.0, 60.0], 1: [70.0, 80.0]}, host="node0") + gpu_rows({0: [10.0], 1: [20.0]}, host="node1")
    s = session("g", gpu=gpu, **_two_nodes())
    assert host_rows(s) == ({"host": "node0", "ranks": [0, 1], "local_ranks": [0, 1], "gpus": [0, 1]},
                            {"host": "node1", "ranks": [2, 3], "local_ranks": [0, 1], "gpus": [0, 1]})
    # the GPU view: one row per (host, GPU), never node1's GPU 0 folded into node0's
    rows = gpu_table(s)
    assert sorted(zip(rows["host"], rows["gpu"], strict=True)) == [("node0", 0), ("node0", 1), ("node1", 0),
                                                                   ("node1", 1)]
    means = {(h, g): u for h, g, u in zip(rows["host"], rows["gpu"], rows["avg_util"], strict=True)}
    assert means[("node0", 1)] == pytest.approx(75.0) and means[("node1", 0)] == pytest.approx(10.0)


def test_a_monitor_capture_of_another_node_adds_that_host():
    # a session of one host whose GPU samples also name a second (monitor_gpu run there, joined by host)
    s = session("m", gpu=gpu_rows({0: [1.0]}, host="a") + gpu_rows({3: [2.0]}, host="b"), world_size=1,
                ranks_by_host={"a": [0]})
    assert [(h["host"], h["ranks"], h["gpus"]) for h in host_rows(s)] == [("a", [0], [0]), ("b", [], [3])]


def test_scope_by_the_hosts_of_the_group():
    one = session("one", world_size=2, nodes=1, ranks_by_host={"h": [0, 1]})
    two = session("two", **_two_nodes())
    assert scope_of(one, 2) == "intra-node"
    assert scope_of(two, 4) == "inter-node" and scope_of(two, None) == "inter-node"  # the world crosses hosts
    assert scope_of(two, 3) == "inter-node"  # 3 ranks cannot fit on a host of 2
    assert scope_of(two, 2) is None  # a sub-group of 2: which ranks is not known
    assert scope_of(session("none", world_size=2), 2) is None  # no host named


@pytest.mark.parametrize(("env", "network", "nics", "want"), [
    ({"NCCL_IB_DISABLE": "1"}, None, None, "Socket"),
    ({"NCCL_NET": "Socket"}, "IB", None, "Socket"),  # the environment forces it, whatever else is said
    ({}, "IB", [{"name": "mlx5_0", "port": 1, "link": "RoCE"}], "RoCE"),
    ({}, "IBext_v8", [{"name": "mlx5_0", "port": 1, "link": "IB"}], "IB"),
    ({}, "Socket", None, "Socket"),
    ({}, None, None, None),
])
def test_inter_node_transport(env, network, nics, want):
    s = session("t", **_two_nodes(system_info={"env": env}, network=network, nics=nics))
    assert transport_of(s, "inter-node")[0] == want


def test_no_infiniband_device_means_sockets_and_the_interface_speed_gives_the_peak():
    # the emitter found no InfiniBand device and one 100 Gb/s interface (psutil's speed is in Mb/s)
    info = {"env": {}, "network": {"interfaces": {"eth0": 100_000}, "infiniband": []}}
    comm = [r | {"rank": rank} for rank in range(4) for r in comm_rows([50e6] * 3, [50.0] * 3, group=4)]
    s = session("sock", comm=comm, **_two_nodes(system_info=info))
    row = fabric(s, "inter-node")
    assert row["transport"] == "Socket" and "no InfiniBand device" in row["transport_from"]
    # 100 Gb/s = 12.5 GB/s line rate x 0.8 over TCP sockets = 10 GB/s
    assert row["peak_busbw_gb_s"] == pytest.approx(10.0) and "100 GbE" in row["peak_source"]
    t = communication_table(s)
    busbw = 50e6 / 0.050 / 1e6 * 2 * 3 / 4  # MB/s: 1000 MB/s algbw x 2(n-1)/n over 4 ranks
    assert set(t["scope"]) == {"inter-node"} and set(t["transport"]) == {"Socket"}
    assert t["pct_of_peak"].tolist() == pytest.approx([busbw / 10_000 * 100] * 4)
    (f,) = [f for f in fabric_findings(s, t) if f.kind == "fabric"]
    assert f.detail.startswith("Inter-node gradient sync goes over TCP sockets (no InfiniBand device on the host")
    assert "1.5 GB/s bus bandwidth" in f.detail and "where 100 GbE (eth0, the host's only network interface) gives " \
        "about 10 GB/s (15% of it)" in f.detail and f.severity.value == "warning"


def test_an_unknown_fabric_has_no_peak_and_never_nvlink():
    comm = comm_rows([50e6] * 3, [5.0] * 3, group=4)
    s = session("u", comm=comm, **_two_nodes())
    row = communication_table(s).iloc[0]
    assert row["scope"] == "inter-node" and row["transport"] is None
    assert row["peak_busbw_gb_s"] != row["peak_busbw_gb_s"]  # NaN: no peak
    assert "NVLink" not in row["link"] and "NVLink" not in row["peak_source"]


def test_p2p_disabled_within_a_node_is_shm_without_a_gpu_link_peak():
    s = session("p", world_size=2, nodes=1, ranks_by_host={"h": [0, 1]}, gpus=H100, gpu_count=2, backend="nccl",
                mode="MULTI-GPU", system_info={"env": {"NCCL_P2P_DISABLE": "1"}}, comm=comm_rows([50e6], [5.0]))
    row = communication_table(s).iloc[0]
    assert (row["scope"], row["transport"]) == ("intra-node", "SHM") and row["peak_busbw_gb_s"] != row["peak_busbw_gb_s"]
    kinds = {f.kind for f in fabric_findings(s, communication_table(s))}
    assert "p2p_disabled" in kinds


def test_nvls_and_nvml_facts_within_a_node():
    nvls = session("n", world_size=2, nodes=1, ranks_by_host={"h": [0, 1]}, gpus=H100, gpu_count=2, backend="nccl",
                   mode="MULTI-GPU", transports={"NVLS": 8})
    # NVLink SHARP on 8 H100: ~480 GB/s busbw (NCCL's maintainer, NVIDIA/nccl-tests#212)
    assert fabric(nvls, "intra-node")["peak_busbw_gb_s"] == 480.0
    pcie_gpus = [{"index": i, "name": "NVIDIA H100 PCIe", "pcie_gen": 4, "pcie_width": 8, "nvlinks": 0} for i in (0, 1)]
    slow = session("x8", world_size=2, nodes=1, ranks_by_host={"h": [0, 1]}, gpus=pcie_gpus, gpu_count=2,
                   backend="nccl", mode="MULTI-GPU")
    row = fabric(slow, "intra-node")
    # NVML says Gen4 x8 (not the card's Gen5 x16): 8 x 1.969 GB/s x 370/450 = 12.95 GB/s
    assert row["transport"] == "PCIe P2P" and row["link"] == "PCIe 4.0 x8"
    assert row["peak_busbw_gb_s"] == pytest.approx(round(8 * 1.969 * 370 / 450, 1))


def test_a_host_slower_to_sync_by_its_best_records():
    # node1's ranks never sync faster than 400 MB/s busbw, node0's reach 1500 (each rank's fastest record)
    comm = []
    for rank, durations in {0: [20.0, 40.0], 1: [20.0, 30.0], 2: [75.0, 90.0], 3: [75.0, 80.0]}.items():
        comm += [r | {"rank": rank} for r in comm_rows([20e6, 20e6], durations, group=4)]
    s = session("h", comm=comm, **_two_nodes())
    # best busbw = 20 MB / duration x 1.5: node0 1500 MB/s (20 ms), node1 400 MB/s (75 ms)
    assert host_sync_busbw(s) == {"node0": pytest.approx(1500.0), "node1": pytest.approx(400.0)}
    (f,) = [f for f in fabric_findings(s, communication_table(s)) if f.kind == "host_slower_sync"]
    assert f.extra["host"] == "node1" and f.ranks == (2, 3) and "27%" in f.detail
    even = session("e", comm=[r | {"rank": k} for k in range(4) for r in comm_rows([20e6], [20.0], group=4)],
                   **_two_nodes())
    assert not [f for f in fabric_findings(even, communication_table(even)) if f.kind == "host_slower_sync"]


def test_clock_skew_only_beyond_its_uncertainty():
    clocks = {"node0": {"offset_s": 0.0, "uncertainty_s": 0.0, "ranks": [0, 1]},
              "node1": {"offset_s": 0.0004, "uncertainty_s": 0.001, "ranks": [2, 3]},  # within: nothing to say
              "node2": {"offset_s": -2.5, "uncertainty_s": 0.002, "ranks": [4]}}
    s = session("c", **_two_nodes(clock_offsets=clocks))
    (f,) = [f for f in fabric_findings(s, communication_table(s)) if f.kind == "clock_skew"]
    assert f.extra["host"] == "node2" and f.ranks == (4,) and "-2.500000 s" in f.detail


def test_monitor_gpu_on_each_node_joins_the_session_by_host():
    # the job's streams under runs/job/logs/s; monitor_gpu run on node1 wrote runs/job/node1_gpus.jsonl (GPUs 0-3)
    # and on a host of another job, other/; only the first shares a host with the job and sits above its folder
    job = session("s", folder="runs/job/logs/s", **_two_nodes())
    mon = session("node1_gpus", folder="runs/job", gpu=gpu_rows({g: [90.0] for g in range(4)}, host="node1"),
                  world_size=1, status=None)
    stranger = session("other", folder="runs/job", gpu=gpu_rows({7: [5.0]}, host="elsewhere"), world_size=1,
                       status=None)
    below = session("deeper", folder="runs/job/logs/s/sub", gpu=gpu_rows({5: [5.0]}, host="node0"), world_size=1,
                    status=None)
    rows = {h["host"]: h for h in host_rows(job, [job, mon, stranger, below])}
    assert set(rows) == {"node0", "node1"}  # no host of another job
    assert rows["node1"]["gpus"] == [0, 1, 2, 3] and rows["node1"]["ranks"] == [2, 3]
    assert rows["node0"]["gpus"] == []  # a capture below the job's folder is not above it: not joined


def test_a_group_of_one_rank_crosses_no_link():
    # a one-GPU run's DDP all-reduces (as on the lent H200: sample_logs/gpu_sharded): its bus factor is 0,
    # nothing leaves the GPU, so neither NVLink's peak nor a scope applies; a 2-rank group on the same H100s does
    one = session("one", comm=comm_rows([4e6] * 4, [1.0] * 4, group=1), world_size=1, nodes=1, gpus=H100[:1],
                  gpu_count=1, backend="nccl", mode="SINGLE-GPU", ranks_by_host={"h": [0]})
    row = communication_table(one).iloc[0]
    assert row["link"] == "none (a group of one rank)" and row["peak_busbw_gb_s"] != row["peak_busbw_gb_s"]
    assert row["scope"] is None and row["transport"] is None and row["verdict"] == "no reference"
    two = session("two", comm=comm_rows([4e6] * 4, [1.0] * 4, group=2), world_size=2, nodes=1, gpus=H100,
                  gpu_count=2, backend="nccl", mode="MULTI-GPU", ranks_by_host={"h": [0, 1]})
    row = communication_table(two).iloc[0]
    assert row["scope"] == "intra-node" and row["transport"] == "NVLink" and row["peak_busbw_gb_s"] == 370.0
    # where the link is decided: a session of one rank has no scope and the no-link row, not H100's NVLink
    assert scope_of(one, None) is None and scope_of(one, 1) is None
    assert fabric(one, "intra-node")["link"] == session_link(one)["link"] == "none (a group of one rank)"
    assert fabric(one, "intra-node")["peak_busbw_gb_s"] is None and session_link(one)["peak_busbw_gb_s"] is None
    assert session_link(two)["peak_busbw_gb_s"] == 370.0


def test_one_gpu_runs_of_every_strategy_cross_no_link_and_are_not_communication_bound():
    # sample_logs/gpu_sharded: four runs on one H200, each session_start saying "world_size":1 (DDP, FSDP1 twice,
    # DeepSpeed); the FSDP1 run's all-reduce takes a large share of its steps, yet moves nothing between GPUs
    import json
    from pathlib import Path

    import logkit

    folder = Path(__file__).resolve().parents[3] / "sample_logs" / "gpu_sharded"
    runs = sorted(p for p in folder.iterdir() if p.is_dir())
    for run in runs:
        (start,) = [r for r in map(json.loads, next(run.glob("*_rank0.jsonl")).read_text().splitlines())
                    if r["type"] == "session_start"]
        assert start["world_size"] == 1 and start["gpu_count"] == 1
    analysis = logkit.analyze([logkit.load_session(run) for run in runs])
    (link,) = analysis.run_links.to_dict("records")
    assert link["link"] == "none (a group of one rank)" and link["peak_busbw_gb_s"] is None
    assert sorted(link["session_ids"]) == [run.name for run in runs]
    assert not [f for f in analysis.findings if f.kind == "communication_bound"]
