"""NCCL's initialisation wording across versions: a missing IB verbs library (a WARN in 2.3-2.10, an INFO
later), NCCL 2.3's one-port-per-line IB list and its ``Using internal Network IB``, and the CUDA driver
version NCCL prints under nccl-tests' device table. Real excerpts from public issues
(``tests/data/ncclfacts/``, cited in its README) and variations said to be made here; expected values are
read off the lines by eye."""

from __future__ import annotations

from logkit.ingest.readers.nccl import parse_nccl_debug
from tests.support.excerpts import load, reader

text = reader("ncclfacts")


def test_an_info_failed_to_open_libibverbs_says_no_ib(tmp_path):
    # nccl#1653 lines 1-4: "NCCL INFO Failed to open libibverbs.so[.1]", then "Using network Socket" on eth0
    s = load(tmp_path, text("nccl_1653_info_failed_libibverbs.log"))
    assert s.meta["ib"] is False
    assert s.meta["network"] == "Socket"
    assert [n["name"] for n in s.meta["nics"]] == ["eth0"]
    assert s.meta["world_size"] == 2  # line 9: "rank 0 nranks 2"


def test_the_older_warn_says_no_ib_and_stays_a_warn(tmp_path):
    # variation: the same excerpt with NCCL 2.3-2.10's wording, a WARN with its source location
    body = text("nccl_1653_info_failed_libibverbs.log").replace(
        "NCCL INFO Failed to open", "misc/ibvwrap.cc:63 NCCL WARN Failed to open")
    s = load(tmp_path, body)
    assert s.meta["ib"] is False
    warns = s.events[s.events["kind"] == "nccl_warn"]
    assert sorted(warns["source"]) == ["capture.log:1", "capture.log:5"]


def test_a_warn_of_another_kind_says_nothing_of_ib():
    n = parse_nccl_debug("h:1:1 [0] misc/socket.cc:484 NCCL WARN Net : Connection closed by remote peer")
    assert n["what"] == "warn" and "ib" not in n


def test_nccl_2_3_lists_ib_ports_one_per_line(tmp_path):
    # variation of NCCL 2.3's shape (net_ib.cc printed "NET/IB: [%d] %s:%d/%s" per port, then
    # "Using internal Network IB"), with two ports of other names
    body = ("gpu7:311:311 [0] NCCL INFO NET/IB : Using interface ib0 for sideband communication\n"
            "gpu7:311:311 [0] NCCL INFO NET/IB: [0] mlx4_0:1/IB\n"
            "gpu7:311:311 [0] NCCL INFO NET/IB: [1] mlx4_0:2/RoCE\n"
            "gpu7:311:311 [0] NCCL INFO Using internal Network IB\n"
            "NCCL version 2.3.7+cuda9.2\n")
    s = load(tmp_path, body)
    assert [(n["name"], n["port"], n["link"]) for n in s.meta["nics"]] == [("mlx4_0", 1, "IB"), ("mlx4_0", 2, "RoCE")]
    assert s.meta["network"] == "IB"
    assert s.meta["network_from"].startswith("stated")


def test_nccl_tests_keeps_the_cuda_driver_version_nccl_prints(tmp_path):
    # nccl-tests#339 line 10: "cudaDriverVersion 12090" under the device table of 8 ranks
    s = load(tmp_path, text("nccl_tests_339_device_table_cuda_driver.log"))
    assert s.meta["cuda_driver_version"] == 12090
    assert s.meta["facts_source"]["cuda_driver_version"].endswith(":10")
