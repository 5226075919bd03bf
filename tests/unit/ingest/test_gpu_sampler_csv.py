"""GPU captures a training script writes itself (not nvidia-smi's own CSV): its own column names, seconds since
it started or ISO stamps, a quoted cell over two lines, one GPU sampled faster than once a second. On shapes of
public samplers (``tests/data/gpu_sampler/``, each cited in its README) and variations made here. Expected
values are read off the files by eye; each says where."""

from __future__ import annotations

import logkit
from logkit.ingest.readers.gpu_sampler_columns import sampler_field
from logkit.ingest.readers.sniff import sniff
from tests.support.excerpts import reader

text = reader("gpu_sampler")
MIB = 2**20 / 1e6


def _load(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    return path, logkit.load_session(path)


def test_a_sampler_s_own_names_say_the_query_fields_and_units():
    # names from the corpus's dcconv/machine_translation headers and profgpu's export_samples_csv.py
    assert sampler_field("gpu_util_pct") == ("utilization.gpu", "%")
    assert sampler_field("util_mem") == ("utilization.memory", None)
    assert sampler_field("mem_used_mb") == ("memory.used", "MiB")  # what NVML / nvidia-smi report: MiB
    assert sampler_field("memory_total") == ("memory.total", "MiB")
    assert sampler_field("used_mib") == ("memory.used", "MiB")
    assert sampler_field("vram_used_gb") == ("memory.used", "GiB")
    assert sampler_field("t_s")[0] == sampler_field("elapsed_sec")[0] == "elapsed"
    assert sampler_field("gpu_idx") == ("index", None)
    assert sampler_field("memory_usage") is None  # MiB or %: not said, not guessed
    assert sampler_field("epoch") is None


def test_profgpu_s_samples_are_a_gpu_capture(tmp_path):
    # profgpu_export_samples_shape.csv: t_s 0.0/0.2/0.4, util_gpu 0/87/91, mem_used_mb 412/10240/10244, temp 38-53
    path, s = _load(tmp_path, "gpu_samples.csv", text("profgpu_export_samples_shape.csv"))
    assert sniff(path) == "nvidia_smi_csv"
    assert list(s.gpu["utilization_pct"]) == [0, 87, 91]
    assert list(s.gpu["memory_used_mb"]) == [412 * MIB, 10240 * MIB, 10244 * MIB]
    assert list(s.gpu["temperature_c"]) == [38, 52, 53] and list(s.gpu["memory_util_pct"]) == [0, 41, 44]
    assert list(s.gpu["time_s"].round(3)) == [0.0, 0.2, 0.4]
    # one GPU sampled every 0.2 s: three samples of GPU 0, not three GPUs
    assert set(s.gpu["gpu"]) == {0} and list(s.gpu["sample"]) == [0, 1, 2] and s.meta["gpu_count"] == 1
    assert s.diagnostics.empty


def test_two_gpus_per_poll_with_iso_stamps(tmp_path):
    # gpu_mem_sampler_two_gpus_iso.csv: gpu_idx 0 and 1 at each of two stamps 0.2 s apart; 81920 MiB each
    _, s = _load(tmp_path, "gpu_mem_trace.csv", text("gpu_mem_sampler_two_gpus_iso.csv"))
    assert list(s.gpu["gpu"]) == [0, 1, 0, 1] and list(s.gpu["sample"]) == [0, 0, 1, 1]
    assert s.meta["gpu_count"] == 2
    assert set(s.gpu["memory_total_mb"]) == {81920 * MIB}
    assert list(s.gpu["memory_used_mb"]) == [1234 * MIB, 0, 1300 * MIB, 2 * MIB]
    assert list(s.gpu["time_s"].round(6)) == [0.0, 0.0, 0.200544, 0.200544]  # 10:00:00.324000 - .123456
    assert s.diagnostics.empty


def test_a_quoted_cell_over_two_lines_is_one_row(tmp_path):
    # made here after the corpus's dcconv capture: its power cell written quoted over two lines
    body = 'elapsed_sec,gpu_util_pct,mem_used_mb,mem_total_mb,temp_c,power_w\n0.08,0,472,49140,29,"26.11\n0"\n' \
           '0.34,2,502,49140,29,"36.51\n0"\n0.59,7,504,49140,29,"43.96\n0"\n'
    path, s = _load(tmp_path, "gpu_usage.csv", body)
    assert sniff(path) == "nvidia_smi_csv"
    assert len(s.gpu) == 3 and list(s.gpu["utilization_pct"]) == [0, 2, 7]
    assert list(s.gpu["power_w"]) == [26.11, 36.51, 43.96]
    assert s.meta["gpu_count"] == 1 and s.diagnostics.empty


def test_nvidia_smi_s_gpus_stamped_milliseconds_apart_stay_apart(tmp_path):
    # made here: a query without index (two GPUs per poll, stamped 3 ms apart, polled each second): two GPUs,
    # as before the cadence rule (the rule only narrows "one time" where the capture samples faster)
    body = "timestamp, name, utilization.gpu [%]\n" + "".join(
        f"2024/05/01 10:00:0{t}.{ms:03d}, NVIDIA A10, {t * 10 + g} %\n" for t in range(3)
        for g, ms in ((0, 100), (1, 103)))
    _, s = _load(tmp_path, "smi.csv", body)
    assert list(s.gpu["gpu"]) == [0, 1] * 3 and s.meta["gpu_count"] == 2
    assert list(s.gpu["sample"]) == [0, 0, 1, 1, 2, 2]


def test_camel_case_names_are_read_by_their_words():
    # GPUtil's attribute names as a script writes them (gpu.memoryUsed, gpu.memoryTotal: MiB), and others' spellings
    assert sampler_field("memoryUsed") == ("memory.used", "MiB")
    assert sampler_field("memoryTotal") == ("memory.total", "MiB")
    assert sampler_field("memUsedMB") == ("memory.used", "MiB")
    assert sampler_field("vramUsedGB") == ("memory.used", "GiB")
    assert sampler_field("gpuUtil") == ("utilization.gpu", None)
    assert sampler_field("GPUUtilPct") == ("utilization.gpu", "%")
    assert sampler_field("gpuId") == ("index", None)


def test_a_gputil_style_capture(tmp_path):
    # made here: a script writing GPUtil's fields each second for two GPUs
    body = ("elapsed_sec,gpu_id,load,memoryUsed,memoryTotal\n"
            "0.0,0,0.10,1024,81920\n0.0,1,0.20,2048,81920\n1.0,0,0.90,40960,81920\n1.0,1,0.80,40000,81920\n")
    path, s = _load(tmp_path, "gpus.csv", body)
    assert sniff(path) == "nvidia_smi_csv"
    assert list(s.gpu["gpu"]) == [0, 1, 0, 1] and s.meta["gpu_count"] == 2
    assert list(s.gpu["memory_used_mb"]) == [1024 * MIB, 2048 * MIB, 40960 * MIB, 40000 * MIB]
    assert set(s.gpu["memory_total_mb"]) == {81920 * MIB}
    assert list(s.gpu["time_s"]) == [0.0, 0.0, 1.0, 1.0]
