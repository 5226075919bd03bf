"""GPU captures and nccl-tests output as users paste them, on real excerpts (``tests/data/gpucap/``,
sources in its README.md) and variations of them made here and said to be made. Expected values are
read off the excerpts by eye (the comment beside each says where); sizes in MiB are turned into MB
here (x 2^20 / 10^6), independently of the readers."""

from __future__ import annotations

import pytest

import logkit
from logkit.analysis.kernels.communication import session_link
from logkit.analysis.kernels.nccl_sweep import nccl_tests_table
from logkit.ingest.readers.sniff import sniff
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "gpucap"
MIB = 2**20 / 1e6


def text(name: str, first: int = 1, last: int | None = None) -> str:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[first - 1:last])


def load(tmp_path, body: str, name: str = "capture.txt"):
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return logkit.load_session(path)


def formats(s) -> list[str]:
    return [str(f) for f in s.meta["formats"]]


# --- the boxed nvidia-smi table, every driver's layout ----------------------------------------------------
# file: GPUs listed; GPU 0's name, cut by the table, bus id, fan %, temp C, P-state, W / cap, MiB used / total,
# util %; the header's driver and CUDA version (as NCCL's integer: 12.4 -> 12040)
LAYOUTS = [
    # 2014, driver 325: "MB" (MiB), no CUDA version, power and util N/A, no MIG row
    ("smi_325_cbio_39_three_titans_mb.txt", 3, "GeForce GTX TITAN", False, "0000:03:00.0", 31, 44, None, None, None,
     14, 6143, None, "325.15", None),
    # 2018, driver 396, a README's indented copy, names cut to "GeForce GTX 108..."
    ("smi_396_set_gpu_fans_readme_indented.txt", 4, "GeForce GTX 108", True, "00000000:18:00.0", 90, 72, "P2", 202,
     250, 2724, 11178, 100, "396.24", None),
    # 2020, driver 450: the MIG M. row appears
    ("smi_450_nvgpu_15_titan_xp.txt", 1, "TITAN Xp", False, "00000000:17:00.0", 23, 39, "P8", 9, 250, 7, 12196, 0,
     "450.57", 11000),
    ("smi_470_bottlerocket_122_a10g_processes.txt", 1, "NVIDIA A10G", False, "00000000:00:1E.0", 0, 25, "P8", 9, 300,
     0, 22731, 0, "470.256.02", 11040),
    # 2022, driver 515: "NVIDIA A100-SXM..." (cut: the model's form factor and memory are not shown)
    ("smi_515_chtc_24_a100_sxm_truncated.txt", 2, "NVIDIA A100-SXM", True, "00000000:01:00.0", None, 48, "P0", 353,
     500, 7488, 81920, 100, "515.48.07", 11070),
    # 2024, driver 550: the wide layout
    ("smi_550_gpu_burn_114_h100.txt", 2, "NVIDIA H100 80GB HBM3", False, "00000000:19:00.0", None, 39, "P0", 145, 700,
     72790, 81559, 0, "550.90.07", 12040),
    # 2026, driver 580: a '+---+' rule under the header
    ("smi_580_club3090_390_processes.txt", 1, "NVIDIA GeForce RTX 3090", False, "00000000:07:00.0", 79, 66, "P2", 144,
     420, 15005, 24576, 0, "580.142", 13000),
    # 2026, driver 610: "KMD Version" and "CUDA UMD Version"
    ("smi_610_sglang_27487_kmd_b200.txt", 2, "NVIDIA B200", False, "00000000:63:00.0", None, 26, "P0", 139, 1000, 0,
     183359, 0, "610.43.02", 13030),
]


@pytest.mark.parametrize("name, count, gpu_name, cut, bus, fan, temp, pstate, power, cap, used, total, util, driver, "
                         "cuda", LAYOUTS, ids=[row[0].split("_")[1] for row in LAYOUTS])
def test_the_table_of_every_driver(tmp_path, name, count, gpu_name, cut, bus, fan, temp, pstate, power, cap, used,
                                   total, util, driver, cuda):
    s = logkit.load_session(DATA / name)
    assert formats(s) == ["nvidia_smi_table"]
    assert s.diagnostics.empty  # every line read: the table, its rules and titles, the command and prompt
    assert s.meta["gpu_count"] == count == s.gpu["gpu"].nunique()
    assert s.meta["gpu_count_from"].startswith("derived: ") and name in s.meta["gpu_count_from"]
    assert (s.meta["driver_version"], s.meta.get("cuda_driver_version")) == (driver, cuda)
    g = s.gpu[s.gpu["gpu"] == 0].iloc[0]
    assert (g["gpu_name"], bool(g["name_truncated"]), g["bus_id"]) == (gpu_name, cut, bus)
    assert g["temperature_c"] == temp and g["pstate"] == pstate
    assert (g["fan_pct"] if fan is not None else None) == fan
    assert (g["power_w"], g["power_limit_w"]) == ((power, cap) if power is not None else (g["power_w"], None))
    assert g["memory_used_mb"] == pytest.approx(used * MIB) and g["memory_total_mb"] == pytest.approx(total * MIB)
    assert g["utilization_pct"] == util if util is not None else g["utilization_pct"] != g["utilization_pct"]


def test_every_gpu_of_a_mixed_table(tmp_path):
    # set_gpu_fans README lines 16-26: two "GeForce GTX 108..." then two TITAN V; GPU 3 shows its display (On)
    s = logkit.load_session(DATA / "smi_396_set_gpu_fans_readme_indented.txt")
    rows = s.gpu.sort_values("gpu")
    assert rows["gpu_name"].tolist() == ["GeForce GTX 108", "GeForce GTX 108", "TITAN V", "TITAN V"]
    assert rows["name_truncated"].tolist() == [True, True, False, False]
    assert rows["power_w"].tolist() == [202, 196, 142, 151] and rows["temperature_c"].tolist() == [72, 72, 63, 66]
    assert rows["display_active"].tolist() == ["Off", "Off", "Off", "On"]
    assert rows["memory_total_mb"].tolist() == pytest.approx([11178 * MIB] * 2 + [12066 * MIB] * 2)


@pytest.mark.parametrize("paste", ["> ", "    ", ">     "])
def test_a_table_pasted_quoted_or_indented_reads_the_same(tmp_path, paste):
    plain = logkit.load_session(DATA / "smi_450_nvgpu_15_titan_xp.txt")
    s = load(tmp_path, "".join(paste + line for line in text("smi_450_nvgpu_15_titan_xp.txt").splitlines(True)))
    cols = ["gpu", "gpu_name", "bus_id", "power_w", "memory_used_mb", "utilization_pct"]
    assert s.gpu[cols].to_dict("records") == plain.gpu[cols].to_dict("records") and s.diagnostics.empty


def _watch(frame: str, stamp: str) -> str:
    # watch's header (procps: the command, then host and time at the right), a blank line, the frame
    return f"Every 2.0s: nvidia-smi                                  ainode01: {stamp}\n\n" + frame


def test_watch_frames_are_snapshots_with_their_own_time(tmp_path):
    # made here: two watch frames of gpu_burn_114's table (lines 2-17), the second 2 s later with GPU 1 at 97%
    frame = text("smi_550_gpu_burn_114_h100.txt", 2, 17)
    later = frame.replace("Fri Oct 25 11:21:22 2024", "Fri Oct 25 11:21:24 2024").replace(
        "|      4%      Default |", "|     97%      Default |")
    s = load(tmp_path, _watch(frame, "Fri Oct 25 11:21:22 2024") + "\n" + _watch(later, "Fri Oct 25 11:21:24 2024"))
    assert s.diagnostics.empty
    g = s.gpu.sort_values(["sample", "gpu"])
    assert g["sample"].tolist() == [0, 0, 1, 1] and g["gpu"].tolist() == [0, 1, 0, 1]
    times = g.groupby("sample")["time_s"].first()
    assert times[1] - times[0] == 2.0
    assert g["utilization_pct"].tolist() == [0, 4, 0, 97]
    assert s.meta["gpu_count"] == 2  # GPUs, not rows of frames


def test_eight_gpus_and_their_processes(tmp_path):
    # made here: gpu_burn_114's header and GPU block (lines 3-13) with GPUs 0-7 (bus ids made up), then the
    # processes of coolgpus issue 12 (eight /usr/libexec/Xorg, 8MiB each, one per GPU: the rows as posted)
    head, block = text("smi_550_gpu_burn_114_h100.txt", 3, 9), text("smi_550_gpu_burn_114_h100.txt", 10, 13)
    gpus = "".join(block.replace("|   0  ", f"|   {i}  ").replace("00000000:19:00.0", f"00000000:{0x19 + i:02X}:00.0")
                   for i in range(8))
    procs = ("+-----------------------------------------------------------------------------+\n"
             "| Processes:                                                                  |\n"
             "|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |\n"
             "|        ID   ID                                                   Usage      |\n"
             "|=============================================================================|\n"
             + "".join(f"|    {i}   N/A  N/A      {pid}      G   /usr/libexec/Xorg                   8MiB |\n"
                       for i, pid in enumerate((3541, 3543, 3544, 3546, 3548, 3549, 3550, 3552)))
             + "+-----------------------------------------------------------------------------+\n")
    s = load(tmp_path, head + gpus + "\n" + procs)
    assert s.diagnostics.empty and s.meta["gpu_count"] == 8
    g = s.gpu.sort_values("gpu")
    assert g["gpu"].tolist() == list(range(8)) and g["process_count"].tolist() == [1] * 8
    assert g["process_memory_mb"].tolist() == pytest.approx([8 * MIB] * 8)
    assert g["processes"].iloc[7] == "3552 /usr/libexec/Xorg (G, 8 MB)"


def test_mig_devices_go_to_their_gpu(tmp_path):
    # made here: a driver 450 table of A100 GPUs 1 and 2 (MIG on), then nvitop 8's MIG devices of GPU 1
    gpu = ("|   {i}  A100-SXM4-40GB      On   | 00000000:0{b}:00.0 Off |                   On |\n"
           "| N/A   36C    P0    97W / 400W |  24259MiB / 40537MiB |     N/A      Default |\n"
           "|                               |                      |              Enabled |\n"
           "+-------------------------------+----------------------+----------------------+\n")
    head = "".join(text("smi_450_nvgpu_15_titan_xp.txt", 2, 8).replace("450.57 ", "450.80.02").splitlines(True))
    s = load(tmp_path, head + gpu.format(i=1, b="B") + gpu.format(i=2, b="C") + "\n"
             + text("smi_nvitop_8_mig_devices.txt"))
    assert s.diagnostics.empty
    one = s.gpu[s.gpu["gpu"] == 1].iloc[0]
    assert one["mig_mode"] == "Enabled" and one["mig_device_count"] == 3
    # devices GI 3, 5, 6: 14366, 9880 and 13 MiB used of 19968 MiB, 28 SMs each
    assert one["mig_devices"] == "; ".join(f"GI {gi}/CI 0/dev {d}: {used * MIB:.0f} / {19968 * MIB:.0f} MB, 28 SMs"
                                           for gi, d, used in ((3, 0, 14366), (5, 1, 9880), (6, 2, 13)))
    two = s.gpu[s.gpu["gpu"] == 2].iloc[0]
    assert two["mig_devices"] is None or two["mig_devices"] != two["mig_devices"]


def test_a_training_log_that_prints_the_table_stays_a_console_capture(tmp_path):
    # made here: nvgpu_15's table, then a transformers log line
    body = text("smi_450_nvgpu_15_titan_xp.txt") + "{'loss': 2.1, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
    path = tmp_path / "train.log"
    path.write_text(body, encoding="utf-8")
    assert sniff(path) == "console"


def test_a_row_that_does_not_read_is_a_diagnostic_with_its_line(tmp_path):
    # made here: nvgpu_15 with its memory cell garbled (line 10)
    body = text("smi_450_nvgpu_15_titan_xp.txt").replace("7MiB / 12196MiB", "7MiB of 12196MiB")
    s = load(tmp_path, body)
    (d,) = s.diagnostics.to_dict("records")
    assert d["line"] == 10 and "second row" in d["reason"]
    assert s.gpu["gpu_name"].tolist() == ["TITAN Xp"]  # the GPU is kept, with what its first row says


# --- --query-gpu CSV ----------------------------------------------------------------------------------------
def test_a_header_whose_cuda_version_is_na_states_none():
    # "CUDA Version: N/A" (line 4): the driver has no CUDA; the version is stated as none, not left unsaid
    s = logkit.load_session(DATA / "smi_470_ros_docker_gui_12_cuda_na.txt")
    assert "cuda_driver_version" in s.meta and s.meta["cuda_driver_version"] is None
    assert s.meta["driver_version"] == "470.57.02"
    row = s.gpu.iloc[0]  # line 11: "523MiB /  4042MiB", power "N/A /  N/A"
    assert row["memory_used_mb"] == pytest.approx(523 * MIB) and row["power_w"] != row["power_w"]
    assert s.diagnostics.empty  # the "❯ nvidia-smi" line is the command


def test_a_stated_cuda_version_where_na_was(tmp_path):
    # the same table with a version (a variation made here): 11.4 -> 11040, as NCCL encodes it
    body = text("smi_470_ros_docker_gui_12_cuda_na.txt").replace("CUDA Version: N/A     ", "CUDA Version: 11.4    ")
    assert load(tmp_path, body).meta["cuda_driver_version"] == 11040


def test_nvidia_smi_list_gives_uuids_and_the_prompt_the_host():
    s = logkit.load_session(DATA / "smi_535_datadog_33120_list_mig_then_header.txt")
    # line 2: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-...)"; the table is cut before its rows
    row = s.gpu[s.gpu["gpu"] == 0].iloc[0]
    assert (row["gpu_name"], row["uuid"]) == ("NVIDIA A100-SXM4-80GB", "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16")
    assert set(s.gpu["host"]) == {"datadog-agent-linux-zb5fm"}  # line 1: "root@datadog-agent-linux-zb5fm:/#"
    assert s.meta["cuda_driver_version"] == 12020 and s.meta["driver_version"] == "535.216.01"  # line 14
    assert s.diagnostics.empty  # the seven MIG lines (3-9) are the list's


def test_the_list_names_the_table_rows_and_completes_a_cut_name(tmp_path):
    # a variation made here: the list of smi_515_chtc (two A100-SXM4-40GB, names cut to "NVIDIA A100-SXM...")
    # before its table, and GPU 2 listed beyond the excerpt's two GPUs
    listed = ("user@gpu-node:~$ nvidia-smi -L\n"
              "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-1111-2222-3333-444444444444)\n"
              "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-55555555-6666-7777-8888-999999999999)\n"
              "GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)\n")
    s = load(tmp_path, listed + text("smi_515_chtc_24_a100_sxm_truncated.txt"))
    assert sorted(s.gpu["gpu"].unique()) == [0, 1, 2]
    first = s.gpu[s.gpu["gpu"] == 1].iloc[0]
    assert first["gpu_name"] == "NVIDIA A100-SXM4-40GB" and not first["name_truncated"]
    assert first["uuid"] == "GPU-55555555-6666-7777-8888-999999999999"
    assert first["bus_id"] == first["bus_id"]  # the table's own row, not one made of the list
    only_listed = s.gpu[s.gpu["gpu"] == 2].iloc[0]
    assert only_listed["memory_used_mb"] != only_listed["memory_used_mb"]  # listed, not measured
    assert set(s.gpu["host"]) == {"gpu-node"}


def test_the_query_command_above_a_capture_is_no_row():
    s = logkit.load_session(DATA / "csv_gpustat_5_command_noheader_titan_x.csv")
    assert len(s.gpu) == 8 and sorted(s.gpu["gpu"]) == list(range(8))  # lines 2-9
    assert s.gpu[s.gpu["gpu"] == 1].iloc[0]["uuid"] == "GPU-86fe97db-bf54-a056-4e8d-9b07e1a298e7"  # line 3
    assert 1 not in set(s.diagnostics["line"].dropna())  # line 1 is the command, read as such


def test_the_query_command_above_a_header(tmp_path):
    # a variation made here: the same rows under the header the query prints without noheader
    body = text("csv_gpustat_5_command_noheader_titan_x.csv").splitlines(keepends=True)
    header = "index, uuid, name, temperature.gpu, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    s = load(tmp_path, body[0].replace(",noheader,nounits", "") + header + "".join(
        line.replace(", 0, 802, ", ", 0 %, 802 MiB, ") for line in body[1:2]), "q.csv")
    assert len(s.gpu) == 1 and s.gpu.iloc[0]["memory_used_mb"] == pytest.approx(802 * MIB)
    assert s.diagnostics.empty


def test_gpustat_then_the_nvidia_smi_table_in_one_capture(tmp_path):
    # a variation made here: gpustat's block (gpustat#157) then, typed at a prompt, the table of smi_450_nvgpu_15
    body = text("gpustat_157_eight_4090.txt") + "me@box:~$ nvidia-smi\n" + text("smi_450_nvgpu_15_titan_xp.txt")
    s = load(tmp_path, body)
    gpustat, table = s.gpu[s.gpu["sample"] == 0], s.gpu[s.gpu["sample"] == 1]
    assert len(gpustat) == 8 and len(table) == 1
    assert gpustat.iloc[2]["memory_used_mb"] == pytest.approx(15202 * MIB)  # gpustat line 4: "15202 / 24564 MB"
    assert table.iloc[0]["gpu_name"] == "TITAN Xp" and table.iloc[0]["bus_id"] == "00000000:17:00.0"
    # the table's header (its line 3, "CUDA Version: 11.0"); the driver is gpustat's, the first said (line 1)
    assert s.meta["cuda_driver_version"] == 11000 and s.meta["driver_version"] == "535.54.03"
    assert s.diagnostics.empty


def test_a_query_without_index_numbers_gpus_by_their_place(tmp_path):
    # bpytop_26: name, fan, memory total/used, util, temp, power, clocks; two GPUs, no index column
    s = logkit.load_session(DATA / "csv_bpytop_26_no_index_two_gpus.csv")
    g = s.gpu.sort_values("gpu")
    assert g["gpu"].tolist() == [0, 1] and g["gpu_name"].tolist() == ["GeForce GTX 1080 Ti", "GeForce GTX 1060 6GB"]
    assert g["memory_used_mb"].tolist() == pytest.approx([2856 * MIB, 4 * MIB])
    assert g["power_w"].tolist() == [106.56, 5.68] and s.meta["gpu_count"] == 2


def _by_bus(header: bool, units: bool) -> str:
    # made here from set_gpu_fans' table: bus id, utilization, memory used and total of its four GPUs, twice
    values = [("00000000:18:00.0", 100, 2724, 11178), ("00000000:3B:00.0", 100, 2724, 11178),
              ("00000000:86:00.0", 100, 2983, 12066), ("00000000:AF:00.0", 99, 2983, 12066)]
    head = "pci.bus_id, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n" if header else ""
    rows = "".join(f"{b}, {u} %, {m} MiB, {t} MiB\n" if units else f"{b}, {u}, {m}, {t}\n" for b, u, m, t in values)
    return head + rows + rows


@pytest.mark.parametrize("header, units", [(True, True), (True, False), (False, True)])
def test_a_query_keyed_by_bus_id(tmp_path, header, units):
    s = load(tmp_path, _by_bus(header, units), name="query.csv")
    assert formats(s) == ["nvidia_smi_csv"]
    g = s.gpu
    assert g["gpu"].tolist() == [0, 1, 2, 3] * 2  # by first appearance of each bus id
    assert g["bus_id"].tolist()[:4] == ["00000000:18:00.0", "00000000:3B:00.0", "00000000:86:00.0", "00000000:AF:00.0"]
    assert s.meta["gpu_count"] == 4 and "bus_id" in s.meta["gpu_count_from"]
    if header:
        assert g["memory_used_mb"].tolist()[:4] == pytest.approx([2724 * MIB, 2724 * MIB, 2983 * MIB, 2983 * MIB])
        assert s.diagnostics.empty
    else:  # without a header: the total (never changes, tops the other MiB column) is named, the other is not
        assert g["memory_total_mb"].tolist()[:4] == pytest.approx([11178 * MIB] * 2 + [12066 * MIB] * 2)
        (d,) = s.diagnostics.to_dict("records")
        assert d["line"] == 1 and "kept by place: 2 (%), 3 (MiB)" in d["reason"]


def test_a_query_under_watch_takes_each_frame_time(tmp_path):
    # made here: `watch nvidia-smi --query-gpu=pci.bus_id,utilization.gpu --format=csv`, two frames 2 s apart
    frame = "pci.bus_id, utilization.gpu [%]\n00000000:18:00.0, {a} %\n00000000:3B:00.0, {b} %\n"
    head = "Every 2.0s: nvidia-smi --query-gpu=pci.bus_id,utilization.gpu --format=csv       node7: {t}\n\n"
    body = (head.format(t="Mon Nov 25 10:00:00 2024") + frame.format(a=100, b=97)
            + head.format(t="Mon Nov 25 10:00:02 2024") + frame.format(a=99, b=12))
    s = load(tmp_path, body, name="watch_query.txt")
    assert formats(s) == ["nvidia_smi_csv"] and s.diagnostics.empty
    assert s.gpu["gpu"].tolist() == [0, 1, 0, 1] and s.gpu["utilization_pct"].tolist() == [100, 97, 99, 12]
    t = s.gpu["time_s"].tolist()
    assert t[0] == t[1] and t[2] - t[0] == 2.0


def test_a_query_keyed_by_uuid_without_header_names_power(tmp_path):
    # made here: uuid, name, draw and limit (W), as --query-gpu=uuid,name,power.draw,power.limit --format=csv,noheader
    rows = ["GPU-5c6b0d4e-8b6a-4c2e-9f2a-1d2c3b4a5f6e, NVIDIA A100-SXM4-80GB, 250.50 W, 400.00 W",
            "GPU-7d8e9f00-1a2b-3c4d-5e6f-708192a3b4c5, NVIDIA A100-SXM4-80GB, 61.20 W, 400.00 W",
            "GPU-5c6b0d4e-8b6a-4c2e-9f2a-1d2c3b4a5f6e, NVIDIA A100-SXM4-80GB, 391.77 W, 400.00 W"]
    s = load(tmp_path, "\n".join(rows) + "\n", name="q.csv")
    assert s.gpu["gpu"].tolist() == [0, 1, 0] and s.gpu["power_w"].tolist() == [250.5, 61.2, 391.77]
    assert s.gpu["power_limit_w"].tolist() == [400.0] * 3 and s.gpu["gpu_name"].nunique() == 1


# --- nccl-tests output as pasted ----------------------------------------------------------------------------
def test_old_device_lines_over_two_hosts(tmp_path):
    # nccl-tests 82: "#   Rank  0 Pid  14926 on v100-gpu-1 ..." (no Group), broadcast_perf, an "error" column
    s = logkit.load_session(DATA / "nt_82_two_hosts_old_device_lines_broadcast.txt")
    m = s.meta
    assert (m["hosts"], m["nodes"], m["world_size"]) == (["v100-gpu-1", "v100-gpu-5"], 2, 2)
    assert m["nodes_from"].startswith("stated: 2 distinct host(s)") and m["hosts_from"].startswith("stated")
    assert m["facts_source"]["hosts"] == "nt_82_two_hosts_old_device_lines_broadcast.txt:5"
    assert {g["name"] for g in m["gpus"]} == {"Tesla V100-PCIE-16GB"} and m["nccl_version"] == "2.9.6+cuda11.2"
    assert set(s.comm["op"]) == {"broadcast"} and set(s.comm["group_size"]) == {2}
    warns = s.events[s.events["kind"] == "nccl_warn"]
    assert warns["host"].tolist() == ["v100-gpu-1", "v100-gpu-5"]  # lines 8 and 11
    assert s.diagnostics.empty  # the command behind its "(base) user@host:~/nccl-tests$ " prompt is read too


def test_two_hosts_are_judged_against_the_network_never_nvlink(tmp_path):
    # nccl-tests 82: V100-PCIE over two hosts; a V100 alone would be judged against NVLink 2 (150 GB/s)
    s = logkit.load_session(DATA / "nt_82_two_hosts_old_device_lines_broadcast.txt")
    link = session_link(s)
    assert link["peak_busbw_gb_s"] is None and "network" in link["link"]
    table = nccl_tests_table(s)
    assert set(table["verdict"]) == {"no reference"} and "NVLink" not in " ".join(table["link"])


def test_the_same_ranks_on_two_hosts_are_two_tests_of_one_host(tmp_path):
    # nccl-tests 182: ranks 0 and 1 listed by testgpu1 and again by testgpu2 (nccl-tests without MPI)
    s = logkit.load_session(DATA / "nt_182_same_ranks_on_two_hosts.txt")
    m = s.meta
    assert m["hosts"] == ["testgpu1", "testgpu2"] and m["nodes"] == 1 and m["world_size"] == 2
    assert m["ranks_by_host"] == {"testgpu1": [0, 1], "testgpu2": [0, 1]}
    assert "each host ran a test of its own" in m["nodes_from"]
    (d,) = s.diagnostics.to_dict("records")
    assert d["line"] == 8 and "independent tests" in d["reason"]
    assert session_link(s)["link"] == "PCIe 4.0 x16"  # A100-PCIE within one host: its own link, not the network


def test_output_whose_hash_marks_markdown_ate(tmp_path):
    # nccl-tests 249: " nThread 1 nGpus 1 ...", " Using devices", "  Rank  0 Group  0 Pid    127 on nccl-...-worker-0"
    s = logkit.load_session(DATA / "nt_249_hash_eaten_by_markdown.txt")
    assert formats(s) == ["nccl_tests"]
    (gpu,) = s.meta["gpus"]
    assert (gpu["host"], gpu["name"]) == ("nccl-846b9d30a6bb6b529fb3c170f4809fea-1725464730-worker-0", "NVIDIA A10G")
    assert s.diagnostics["line"].tolist() == [1]  # ssh's "Warning: Permanently added ..." is no line of the test


@pytest.mark.parametrize("paste", ["> ", "    ", "> > ", "[1,0]<stdout>:"])
def test_output_quoted_indented_or_prefixed_reads_the_same(tmp_path, paste):
    # made here: the DGX Spark output with each line quoted, indented as in a README, or behind mpirun's prefix
    plain = logkit.load_session(DATA / "nt_dgx_spark_103_two_hosts_gb10.txt")
    body = "".join(paste + line for line in text("nt_dgx_spark_103_two_hosts_gb10.txt").splitlines(True))
    s = load(tmp_path, body, name="nt_dgx_spark_103_two_hosts_gb10.txt")
    cols = ["op", "size_bytes", "busbw_mb_s", "group_size", "placement", "source"]
    assert s.comm[cols].to_dict("records") == plain.comm[cols].to_dict("records") and len(s.comm) == 8
    assert (s.meta["hosts"], s.meta["nodes"]) == (["spark-d708", "spark-dbf4"], 2) and s.diagnostics.empty


def test_sixteen_ranks_over_two_hosts(tmp_path):
    # nccl-tests 294: ranks 0-7 on h100-2, 8-11 on h100-4 (the excerpt's last whole line)
    s = logkit.load_session(DATA / "nt_294_h100_two_hosts_device_table.txt")
    m = s.meta
    assert m["ranks_by_host"] == {"h100-2": list(range(8)), "h100-4": list(range(8, 12))}
    assert (m["nodes"], m["world_size"], m["gpu_count"]) == (2, 12, 12)
    # the excerpt ends inside the table (the README: a 16-rank run, ranks 0-11 shown): 12 is a lower bound
    assert m["world_size_from"] == ("inferred (lower bound): 12 rank(s) in nccl-tests' device table "
                                    "(nt_294_h100_two_hosts_device_table.txt:4-15), which the file ends inside "
                                    "(more may follow)")
    assert m["nodes_from"].startswith("inferred (lower bound)")


def test_avg_bus_bandwidth_quoted_behind_the_launcher_prefix(tmp_path):
    # aws-k8s-tester 503: ">        [1,0]<stdout>:# Avg bus bandwidth    : 92.3405 "
    s = logkit.load_session(DATA / "nt_503_quoted_mpirun_prefix.txt")
    assert [t["avg_busbw_gb_s"] for t in s.meta["nccl_tests"]] == [92.3405] and s.diagnostics.empty


def test_rows_behind_the_launcher_prefix(tmp_path):
    # aws-k8s-tester 503 (p5 example): "[1,0]<stdout>:           8             2     float     sum ..." 8, 16, 32 B
    s = logkit.load_session(DATA / "nt_503_p5_mpirun_prefix_rows.txt")
    out = s.comm[s.comm["placement"] == "out-of-place"]
    assert out["size_bytes"].tolist() == [8, 16, 32]
    assert out["duration_ms"].tolist() == pytest.approx([12.90 / 1000, 12.88 / 1000, 22.25 / 1000])


@pytest.mark.parametrize("indent", ["", "        "])
def test_rows_without_their_header_read_as_nccl_tests_prints_them(tmp_path, indent):
    # a variation made here: the p5 example's three rows (lines 4-6) without the header lines above them, as a
    # test harness keeps them (and indented, as its log indents them)
    rows = text("nt_503_p5_mpirun_prefix_rows.txt", 4, 6)
    s = load(tmp_path, "".join(indent + line for line in rows.splitlines(True)), "rows.log")
    out, inp = s.comm[s.comm["placement"] == "out-of-place"], s.comm[s.comm["placement"] == "in-place"]
    assert out["size_bytes"].tolist() == [8, 16, 32] and out["count"].tolist() == [2, 4, 8]
    assert inp["duration_ms"].tolist() == pytest.approx([12.87 / 1000, 12.83 / 1000, 13.34 / 1000])
    assert set(s.comm["redop"]) == {"sum"} and set(s.comm["op"]) == {"allreduce"}  # no op named: sum's
    assert set(s.comm["wrong"]) == {"0"}
    said = s.diagnostics[s.diagnostics["line"] == 1]["reason"].tolist()
    assert len(said) == 1 and "without their header" in said[0]  # said once, at the first row


def test_a_row_of_another_shape_without_a_header_is_a_diagnostic(tmp_path):
    # the first row cut after its out-of-place columns (a variation made here): no columns to read it by
    row = text("nt_503_p5_mpirun_prefix_rows.txt", 4, 4).split("      0    12.87")[0] + "\n"
    s = load(tmp_path, row + text("nt_503_p5_mpirun_prefix_rows.txt", 5, 6), "rows.log")
    assert s.comm["size_bytes"].unique().tolist() == [16, 32]
    assert 1 in set(s.diagnostics["line"])


def test_a_cut_device_table_is_a_lower_bound_with_the_hosts_nccl_names(tmp_path):
    # nccl-tests 185: only "#   Rank  1 Pid 2152176 on  dgxh100-3 ..." kept; NCCL's lines name dgxh100-4 too
    s = logkit.load_session(DATA / "nt_185_old_device_lines_roce_nics.txt")
    m = s.meta
    assert m["world_size"] == 2 and m["world_size_from"].startswith("inferred (lower bound)")
    assert m["hosts"] == ["dgxh100-3", "dgxh100-4"] and "lower bound" in m["nodes_from"]
    assert m["network"] == "IB" and [n["name"] for n in m["nics"]] == ["mlx5_10", "mlx5_11"]
    assert {n["link"] for n in m["nics"]} == {"RoCE"} and m["facts_source"]["network"].endswith(":8")


def _spark_with_nics(speed: int) -> str:
    # made here: NCCL INFO lines in NCCL's own format (its NET/IB device line, src/transport/net_ib), naming the
    # DGX Spark hosts of the playbook PR and the 200 Gb/s link it describes, before the test's output
    lines = ["spark-d708:1666603:1666620 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:"
             "10.0.0.1<0>",
             f"spark-d708:1666603:1666620 [0] NCCL INFO NET/IB: [0] rocep1s0f1:uverbs0:1/RoCE provider=Mlx5 "
             f"speed={speed} context=0x55d0c0a8 pciPath=/sys/devices/pci000f:00/000f:00:00.0/000f:01:00.1 ar=0",
             "spark-d708:1666603:1666620 [0] NCCL INFO Using network IB"]
    return "\n".join(lines) + "\n" + text("nt_dgx_spark_103_two_hosts_gb10.txt")


def test_a_two_host_run_is_judged_against_the_nic_rate_nccl_names(tmp_path):
    s = load(tmp_path, _spark_with_nics(200000), name="all_reduce.log")
    assert s.meta["link_speed_gbps"] == 200.0 and s.meta["nodes"] == 2
    table = nccl_tests_table(s)
    row = table[table["placement"] == "out-of-place"].iloc[0]
    # 200 Gb/s / 8 = 25 GB/s line rate, one RoCE NIC, of which RDMA achieves 91% (4 x 200 Gb/s NICs gave 91 GB/s
    # busbw in NVIDIA/nccl-tests#100): 22.75 GB/s; busbw at the largest size (65536 B): 0.96 GB/s
    assert row["peak_busbw_gb_s"] == pytest.approx(22.75) and row["pct_of_peak"] == pytest.approx(0.96 / 22.75 * 100)
    assert row["verdict"] == "below peak" and "NVLink" not in row["link"] and "check the network" in row["note"]


def test_an_ibstat_rate_beside_the_output_is_the_link_rate(tmp_path):
    # nccl 1591's ibstat block ("Rate: 400") pasted after the DGX Spark output
    s = load(tmp_path, text("nt_dgx_spark_103_two_hosts_gb10.txt") + text("ibstat_1591_rate_400.txt"))
    assert s.meta["link_speed_gbps"] == 400.0


def test_the_network_of_the_nccl_log_in_the_same_folder(tmp_path):
    # made here: the DGX Spark output, and beside it a log of NCCL's lines (as above, without the speed line)
    # and nccl 1591's ibstat block ("Rate: 400")
    (tmp_path / "all_reduce_perf.log").write_text(text("nt_dgx_spark_103_two_hosts_gb10.txt"), encoding="utf-8")
    nccl = [line for line in _spark_with_nics(0).split("# nccl-tests version")[0].splitlines(True) if "speed=" not in line]
    (tmp_path / "nccl_debug.log").write_text("".join(nccl) + text("ibstat_1591_rate_400.txt"), encoding="utf-8")
    sessions = logkit.load_sessions(tmp_path)
    (bench,) = [s for s in sessions if s.meta["formats"] == ["nccl_tests"]]
    assert nccl_tests_table(bench)["peak_busbw_gb_s"].isna().all()  # alone, its own logs name no network
    table = nccl_tests_table(bench, sessions)
    assert table["peak_busbw_gb_s"].tolist() == pytest.approx([45.5] * len(table))  # 400 Gb/s / 8 x 0.91, one NIC
    assert "same folder" in session_link(bench, sessions)["source"]
