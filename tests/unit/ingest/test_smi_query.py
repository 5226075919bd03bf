"""``nvidia-smi -q``'s query report, on excerpts of real reports from public issues
(``tests/data/gpucap/smi_q_*``, cited in its README) and variations said to be made here. Expected values
are read off the excerpts by eye; each says where."""

from __future__ import annotations

import pytest

import logkit
from tests.support.launch import REPO

MIB = 2**20 / 1e6
DATA = REPO / "tests" / "data" / "gpucap"


def load(tmp_path, body: str):
    path = tmp_path / "smi.txt"
    path.write_text(body, encoding="utf-8")
    return logkit.load_session(path)


def test_the_full_report_names_the_gpu_and_the_driver(tmp_path):
    s = load(tmp_path, (DATA / "smi_q_nvidia_docker_1330_gtx_1650.txt").read_text())
    assert [f.value for f in s.meta["formats"]] == ["nvidia_smi_query"]
    assert s.meta["driver_version"] == "440.82"  # line 4
    assert s.meta["cuda_driver_version"] == 10020  # line 5: CUDA Version 10.2
    assert s.meta["gpu_count"] == 1 and s.meta["gpu_count_from"].startswith("stated")  # line 7
    (row,) = s.gpu.to_dict("records")
    assert (row["gpu"], row["gpu_name"], row["bus_id"]) == (0, "GeForce GTX 1650", "00000000:01:00.0")  # lines 8-9
    assert row["uuid"] == "GPU-402283fa-193f-6581-3f85-96a5ac219d8c"  # line 20
    assert s.diagnostics.empty  # each line is the report's


def test_a_report_of_some_sections_reads_the_memory_of_the_frame_buffer(tmp_path):
    s = load(tmp_path, (DATA / "smi_q_d_gnome_applet_356_memory_utilization.txt").read_text())
    (row,) = s.gpu.to_dict("records")
    assert row["memory_used_mb"] == pytest.approx(1934 * MIB)  # line 9, not BAR1's 5 MiB (line 13)
    assert row["memory_total_mb"] == pytest.approx(1995 * MIB)  # line 8
    assert row["utilization_pct"] == 47  # line 17
    assert s.meta.get("cuda_driver_version") is None  # driver 375 prints no CUDA version


def test_two_gpus_and_a_second_report_are_two_rows_of_two_snapshots(tmp_path):
    # variation: the -d MEMORY,UTILIZATION excerpt with a second GPU, and the report twice (nvidia-smi -q -l 1)
    one = (DATA / "smi_q_d_gnome_applet_356_memory_utilization.txt").read_text()
    two = one.replace("Attached GPUs                       : 1", "Attached GPUs                       : 2")
    second = one.split("GPU 0000:01:00.0\n", 1)[1].replace("1934 MiB", "900 MiB").replace("47 %", "3 %")
    body = two + "GPU 0000:02:00.0\n" + second
    s = load(tmp_path, body + body.replace("16:00:35", "16:00:36"))
    assert s.meta["gpu_count"] == 2
    assert sorted(s.gpu.groupby("sample")["gpu"].nunique()) == [2, 2]
    gpu1 = s.gpu[s.gpu["gpu"] == 1]
    assert list(gpu1["memory_used_mb"]) == pytest.approx([900 * MIB] * 2) and list(gpu1["utilization_pct"]) == [3, 3]
    assert list(s.gpu["time_s"].diff().dropna()) == [0.0, 1.0, 0.0]  # the second report is a second later
