"""Console renderers: the comparison's lines, every figure with its definition, findings by severity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from logkit.analysis import Analysis, analyze
from logkit.analysis.definitions import DEFINITIONS
from logkit.analysis.kernels.breakdown import straggler_calls
from logkit.analysis.results import (
    Comparison,
    Finding,
    Fit,
    Flag,
    Health,
    LossParity,
    Mfu,
    NanPoint,
    Ratios,
    Scaling,
    SessionSummary,
)
from logkit.analysis.results.frames import ROWS
from logkit.report.console import (
    render_communication,
    render_compare,
    render_diagnose,
    render_performance,
)
from logkit.report.json_report import analysis_document, render_json
from logkit.run.load import load_sessions
from tests.support.launch import REPO
from tests.support.oracles import warmup_oracle

QLORA = REPO / "sample_logs" / "qlora_tiny_cpu" / "logs"


def _table(name: str, records: list[dict]) -> pd.DataFrame:
    """The result frame ``name`` of ``records``, with every declared column (missing ones empty)."""
    return pd.DataFrame(records).reindex(columns=list(ROWS[name].COLUMNS))


def _fake() -> Analysis:
    """An analysis as the facade returns it, with the example numbers of a 1-GPU and a 2-GPU run."""
    single = SessionSummary("training_20241206_140000", mode="SINGLE-GPU", world_size=1, gpu_count=1,
                            duration_s=1200.5, total_steps=1000, steps_per_second=0.83, samples_per_second=6.66,
                            total_batch_size=8, final_loss=1.2345)
    multi = SessionSummary("training_20241206_143022", mode="MULTI-GPU", world_size=2, gpu_count=2,
                           duration_s=650.2, total_steps=1000, steps_per_second=1.54, samples_per_second=12.30,
                           total_batch_size=8, final_loss=1.2340, warmup_steps=10, steady_steps=990,
                           steady_samples_per_second=12.5)
    comparison = Comparison(
        baseline=single.session_id, candidate=multi.session_id, group=None, regime="strong", basis="steady state",
        basis_detail="", headline=Ratios(1.9, 0.95, 1.91), whole_run=Ratios(1.8464, 0.9232, None),
        steady=Ratios(1.9, 0.95, 1.91), speedup_ci=(1.80, 1.90), ci_level=0.95, rank_ratio=2.0,
        flags=(Flag("superlinear", "cache effects", ("cache effects",), 1.9, 2.0, "steady state", False),))
    fit = Fit(group=None, serial_fraction=0.04, serial_fraction_raw=0.04, parallel_fraction=0.96,
              karp_flatt={2: 0.0416}, predicted={4: 3.57}, r2=0.99, points=3, baseline_world_size=1, reliable=True,
              note=None, superlinear_world_sizes=())
    sid = multi.session_id
    comm = _table("communication", [
        {"session_id": sid, "rank": 0, "op": "gradient_sync", "count": 45, "total_bytes": 3025.35e6,
         "mean_bytes": 67.23e6, "p50_ms": 12.34, "p95_ms": 15.1, "algbw_mb_s": 3701.46, "busbw_mb_s": 3701.46,
         "sync_share_of_step_time": 0.123, "link": "PCIe 4.0 x16", "peak_busbw_gb_s": 32.0, "pct_of_peak": 11.6,
         "latency_bound": False, "note": None},
        {"session_id": sid, "rank": 1, "op": "gradient_sync", "count": 45, "total_bytes": 3025.35e6,
         "mean_bytes": 67.23e6, "p50_ms": 13.0, "p95_ms": 16.0, "algbw_mb_s": 3500.0, "busbw_mb_s": 3500.0,
         "sync_share_of_step_time": 0.13, "link": "PCIe 4.0 x16", "peak_busbw_gb_s": 32.0, "pct_of_peak": 10.9,
         "latency_bound": True, "note": "messages of 0.1 MB: per-call latency dominates"},
    ])
    perf = _table("performance", [{"session_id": sid, "rank": r, "steps": 1000, "step_p50_s": 0.4 + r / 10,
                          "step_p95_s": 0.6, "step_max_s": 1.2, "step_mean_s": 0.45, "slow_steps": 3,
                          "data_share": 0.05} for r in (0, 1)])
    strag = _table("stragglers", [{"session_id": sid, "rank": 0, "median_step_s": 0.4, "vs_fastest": 1.0, "score": 0.0,
                           "is_straggler": False},
                          {"session_id": sid, "rank": 1, "median_step_s": 0.5, "vs_fastest": 1.25, "score": 0.25,
                           "is_straggler": True, "p_value": 1.9e-9}])
    gpus = _table("gpus", [{"session_id": single.session_id, "host": "n1", "gpu": 0, "avg_util": 85.2,
                          "peak_util": 98.1, "avg_memory_pct": 78.3}])
    findings = (
        Finding.make("critical", "nccl_timeout", "s", "NCCL timeout", "watchdog", ["console.log:3", "console.log:4"],
                     [0, 1]),
        Finding.make("warning", "straggler", "s", "Rank 1 is a straggler", "1.25x", ["s_rank1.jsonl:12"], [1]),
        Finding.make("info", "unparsed_lines", "s", "1 line not understood", "", ["x.log:9"]),
    )
    return Analysis.empty(
        scaling=Scaling(sessions=(single, multi), comparisons=(comparison,), fits=(fit,), baseline=single.session_id),
        communication=comm, performance=perf, stragglers=strag, gpus=gpus, straggler_calls=straggler_calls(strag),
        mfu={sid: Mfu(mfu=0.352, achieved_tflops=348.2, peak_tflops=989.0, gpu_model="H100 SXM",
                      flops_per_token=4.2e10, tokens_per_second=16581.0, n_gpus=2),
             single.session_id: Mfu(reason="tokens/s not logged")},
        health={sid: Health(nan_steps=(NanPoint(21, 1, "nan_loss", "r1.jsonl:7"),), final_loss=1.234)},
        loss_parity=(LossParity(single.session_id, sid, final_loss_diff=-0.0005, final_loss_rel_diff=-0.0004,
                                max_abs_diff_aligned=0.01, aligned_by="samples seen", points=20),),
        findings=findings,
        definitions={**DEFINITIONS, "speedup": "candidate samples/s / baseline samples/s (throughput ratio)",
                     "mfu": "MFU def"})


FAKE = _fake()


def test_compare_has_its_lines_ci_steady_fit_and_definitions():
    out = render_compare(FAKE)
    for line in ("SINGLE GPU vs MULTI-GPU COMPARISON", "📱 SINGLE GPU SESSIONS (1):", "🔗 MULTI-GPU SESSIONS (1):",
                 "  Duration: 1200.5s (20.0min)", "  Duration: 650.2s (10.8min)", "  GPUs: 2", "  Steps: 1000",
                 "  Final Loss: 1.2345", "  Steps/sec: 0.83",
                 "  GPU 0: 85.2% avg util, 98.1% peak, 78.3% avg memory",
                 "🚀 Multi-GPU Speedup: 1.90x (steady state)", "📊 GPU Efficiency: 95.0% (steady state)",
                 "  Whole run (warm-up included): speedup 1.85x, efficiency 92.3%",
                 "  95% CI of the steady-state speedup: [1.80x, 1.90x]",
                 "  ⚠ superlinear: cache effects", "  Karp-Flatt serial fraction: 2 ranks 0.042",
                 "  Predicted speedup: 4 ranks 3.57x", "  Health: NaN/Inf loss at 1 step(s) (step 21 rank 1 at r1.jsonl:7), no divergence"):
        assert line in out.splitlines(), line
    assert "📈 Scaling fit (amdahl): serial fraction 0.040" in out
    assert "🎯 LOSS PARITY:" in out and "aligned by samples seen over 20 point(s)" in out
    defs = out[out.index("Definitions:"):]
    assert "speedup: candidate samples/s / baseline samples/s (throughput ratio)" in defs
    assert "karp_flatt:" in defs and "speedup_ci:" in defs


def test_communication_block():
    lines = render_communication(FAKE).splitlines()
    i = lines.index("📡 Session: training_20241206_143022")
    assert lines[i + 1: i + 6] == ["  GPUs: 2", "  Communication Operations:", "    gradient_sync: 45 occurrences",
                                   "      Avg data size: 67.23MB", "      Total data: 3025.35MB"]
    text = "\n".join(lines)
    assert "      Duration p50/p95: 12.34 / 15.10 ms" in text
    assert "      Bandwidth: algbw 3701.5 MB/s, busbw 3701.5 MB/s" in text
    assert "      Share of step time: 12.3%" in text
    assert "      Link: PCIe 4.0 x16 (peak 32.0 GB/s busbw): 11.6% of peak" in text
    assert "      Rank 1: 45 ops, 3025.35MB total, p50 13.00 ms, busbw 3500.0 MB/s, 13.0% of step time" in text
    assert "📡 Session: training_20241206_140000" in text and "none logged" in text
    assert "busbw_mb_s:" in text and "pct_of_peak:" in text  # definitions footer


def test_performance_block():
    out = render_performance(FAKE)
    assert ("  Rank 1: 1000 steps, step time p50 0.500s, p95 0.600s, max 1.200s, mean 0.450s; "
            "3 slow step(s); data loading 5.0%") in out
    assert "  ⚠ Straggler: rank 1 (median step 0.500s, 1.25x the fastest rank, score 0.25, p 1.9e-09)" in out
    assert "  GPU 0: 85.2% avg util, 98.1% peak, 78.3% avg memory" in out
    assert ("  MFU: 35.2% (348.2 of 989.0 TFLOP/s peak, H100 SXM; 4.2e+10 FLOPs/token x 1.658e+04 tokens/s / "
            "2 GPU(s))") in out
    assert "  MFU: n/a (tokens/s not logged)" in out
    assert "mfu: MFU def" in out  # the analysis' own definition wins


def test_diagnose_orders_by_severity_with_evidence():
    out = render_diagnose(FAKE)
    assert out.splitlines()[0] == "🩺 DIAGNOSIS: 3 finding(s)"
    order = [out.index(t) for t in ("[CRITICAL] NCCL timeout", "[WARNING] Rank 1", "[INFO] 1 line")]
    assert order == sorted(order)
    assert "    evidence: console.log:3\n    evidence: console.log:4" in out
    assert "(session s, rank(s) 0, 1; nccl_timeout)" in out


def test_json_documents_have_their_keys():
    for section, keys in {"compare": {"sessions", "comparisons", "fit", "loss_parity", "health", "gpus"},
                          "communication": {"communication"},
                          "performance": {"performance", "stragglers", "gpus", "mfu"},
                          "diagnose": {"findings"}}.items():
        doc = json.loads(render_json(analysis_document(FAKE, [section])))
        assert keys | {"definitions"} <= set(doc), section
    doc = json.loads(render_json(analysis_document(FAKE, ["diagnose"])))
    assert [f["severity"] for f in doc["findings"]] == ["critical", "warning", "info"]


@pytest.fixture(scope="module")
def qlora():
    sessions = load_sessions(QLORA)
    return sessions, analyze(sessions)


def test_communication_of_the_real_two_rank_run(qlora):
    sessions, analysis = qlora
    two = next(s for s in sessions if s.meta["world_size"] == 2)
    comm = two.comm[(two.comm["rank"] == 0) & (two.comm["op"] == "gradient_sync")]
    out = render_communication(analysis)
    # figures computed here from the frame, independently of the analysis
    assert f"    gradient_sync: {len(comm)} occurrences" in out
    assert f"      Avg data size: {comm['size_bytes'].mean() / 1e6:.2f}MB" in out
    assert f"      Total data: {comm['size_bytes'].sum() / 1e6:.2f}MB" in out
    p50 = comm["duration_ms"].median()
    assert f"      Duration p50/p95: {p50:.2f} / " in out
    steps = two.steps[two.steps["rank"] == 0]
    assert f"Share of step time: {comm['duration_ms'].sum() / 1e3 / steps['step_time_s'].sum() * 100:.1f}%" in out


def _rank0(folder) -> tuple[np.ndarray, np.ndarray]:
    """Step times and batch sizes of rank 0, read from the JSONL here (json, not logkit)."""
    (path,) = Path(folder).glob("*_rank0.jsonl")
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    recs = sorted((r for r in recs if r["type"] == "training_step_complete"), key=lambda r: r["step"])
    return (np.array([r["timing"]["step_time_seconds"] for r in recs]),
            np.array([r["metrics"]["total_batch_size"] for r in recs], dtype=float))


def test_compare_and_performance_of_the_real_runs(qlora):
    sessions, analysis = qlora
    one, two = sorted(sessions, key=lambda s: s.meta["world_size"])
    out = render_compare(analysis)
    (t1, b1), (t2, b2) = _rank0(one.meta["folder"]), _rank0(two.meta["folder"])
    assert f"  Steps/sec: {len(t1) / t1.sum():.2f}" in out and f"  Steps/sec: {len(t2) / t2.sum():.2f}" in out
    whole = (b2.sum() / t2.sum()) / (b1.sum() / t1.sum())
    k1, k2 = warmup_oracle(t1), warmup_oracle(t2)
    steady = (b2[k2:].sum() / t2[k2:].sum()) / (b1[k1:].sum() / t1[k1:].sum())
    assert f"Multi-process Speedup: {steady:.2f}x (steady state)" in out
    assert f"Scaling Efficiency: {steady / 2 * 100:.1f}% (steady state)" in out
    assert f"  Whole run (warm-up included): speedup {whole:.2f}x, efficiency {whole / 2 * 100:.1f}%" in out
    perf = render_performance(analysis)
    st = two.steps[two.steps["rank"] == 1]["step_time_s"]
    assert f"  Rank 1: {len(st)} steps, step time p50 {st.median():.3f}s" in perf
    assert f"max {st.max():.3f}s, mean {st.mean():.3f}s" in perf


def _flat_summary(root: Path, sid: str, mode: str, gpus: int, duration: float, start: str) -> None:
    folder = root / sid
    folder.mkdir(parents=True)
    doc = {"session_id": sid, "mode": mode, "gpu_count": gpus, "world_size": gpus, "model": "unsloth/qwen-7b-qlora",
           "start_time": start, "duration_seconds": duration, "total_steps": 1000, "final_loss": 1.2345,
           "total_batch_size": 8, "gpus": [], "communication": {}, "status": "completed"}
    (folder / f"{sid}_summary.json").write_text(json.dumps(doc), encoding="utf-8")


def test_the_example_comparison_from_summaries(tmp_path):
    """1200.5 s on 1 GPU against 650.2 s on 2 GPUs for the same samples: 1.85x, 92.3%."""
    _flat_summary(tmp_path, "training_20241206_140000", "SINGLE-GPU", 1, 1200.5, "2024-12-06T14:00:00+00:00")
    _flat_summary(tmp_path, "training_20241206_143022", "MULTI-GPU", 2, 650.2, "2024-12-06T14:30:22+00:00")
    sessions = load_sessions(tmp_path)
    out = render_compare(analyze(sessions))
    speedup = 1200.5 / 650.2  # same samples: the throughput ratio is the inverse ratio of durations
    assert f"{speedup:.2f}x" == "1.85x" and f"{speedup / 2 * 100:.1f}%" == "92.3%"
    assert "🚀 Multi-GPU Speedup: 1.85x" in out and "📊 GPU Efficiency: 92.3%" in out
    assert "  Duration: 1200.5s (20.0min)" in out and "  Duration: 650.2s (10.8min)" in out


SAMPLES = REPO / "sample_logs"
SEED000 = SAMPLES / "text_logs"


def test_text_logs_compare_shows_the_runs_totals():
    sessions = load_sessions(SEED000)
    out = render_compare(analyze(sessions))
    (doc,) = [json.loads(p.read_text(encoding="utf-8")) for p in SEED000.rglob("*_summary.json")]
    for line in (f"  Steps: {doc['total_steps']}", f"  Final Loss: {doc['final_loss']:.4f}",
                 f"  Steps/sec: {doc['steps_per_second']:.2f}", f"  Samples/sec: {doc['samples_per_second']:.2f}",
                 f"  GPUs: {doc['gpu_count']}"):
        assert line in out.splitlines() or any(x.startswith(line + " ") for x in out.splitlines()), line
    assert "  Figures from: run totals from summary.json (the step lines are sampled" in out
    assert "Not compared (1):" in out  # one run of its model: nothing to compare it with, and said so


def test_text_logs_communication_shows_summary_totals_beside_the_sampled_lines():
    sessions = load_sessions(SEED000)
    out = render_communication(analyze(sessions))
    (doc,) = [json.loads(p.read_text(encoding="utf-8")) for p in SEED000.rglob("*_summary.json")]
    op = doc["communication"]["gradient_sync"]
    (log,) = SEED000.rglob("*_multigpu.log")
    sizes = [float(x) for x in re.findall(r"gradient_sync .*Size: ([\d.]+)MB", log.read_text(encoding="utf-8"))]
    lines = out.splitlines()
    i = lines.index(f"    gradient_sync: {op['count']} occurrences (run total, summary.json)")
    assert lines[i + 1] == f"      Avg data size: {op['avg_mb']:.2f}MB"
    assert lines[i + 2] == f"      Total data: {op['total_mb']:.2f}MB"
    assert lines[i + 3].startswith(f"      Sampled log lines: {len(sizes)} of them, {sum(sizes):.2f}MB total")
    bw = float(re.search(r"Bandwidth: ([\d.]+)MB/s", log.read_text(encoding="utf-8"))[1])
    assert "busbw" in out and "(derived: algbw x 2(n-1)/n = 1 (n = 2))" in out
    assert "below peak at large messages" in out and "bandwidth-bound" not in out.split("Definitions:")[0]
    # PCIe 4.0 x16: 16 x 1.969 GB/s (PCI-SIG) x 370/450 (NCCL's protocol overhead, nccl-tests#212) = 25.9 GB/s
    assert f"{min(bw, 3701.46) / 25900 * 100:.1f}% of peak" in out or "14.3% of peak" in out


def test_nccl_tests_console_block():
    folder = SAMPLES / "nccl_tests"
    sessions = load_sessions(folder)
    out = render_communication(analyze(sessions))
    (log,) = folder.glob("*.log")
    text = log.read_text(encoding="utf-8")
    ranks = set(re.findall(r"#\s+Rank\s+(\d+) Group.* device\s+\d+", text))
    assert len(ranks) == 8 and f"  GPUs: {len(ranks)}" in out.splitlines()  # from the header, not "0 (CPU)"
    avg = [float(x) for x in re.findall(r"# Avg bus bandwidth\s*:\s*([\d.]+)", text)]
    for a in avg:
        assert f"      # Avg bus bandwidth (nccl-tests, mean over all sizes): {a:.2f} GB/s" in out
    last_allreduce = [line.split() for line in text.splitlines()
                      if line.strip().startswith("134217728")][0]
    assert f"      busbw at the largest size (134.2 MB): {float(last_allreduce[7]):.2f} GB/s" in out
    # NVLink 3: 300 GB/s line rate x 370/450 (NCCL's protocol overhead, nccl-tests#212) = 246.7 GB/s
    assert f"{float(last_allreduce[7]) / 246.7 * 100:.1f}% of peak at the largest size" in out
    assert "Communication Operations" not in out  # no median over a size sweep


def test_captures_are_not_compared_and_unknown_gpu_counts_say_unknown():
    sessions = load_sessions(SAMPLES / "gpu_captures") + load_sessions(SAMPLES / "console")
    out = render_compare(analyze(sessions))
    head, _, rest = out.partition("🧾 OTHER CAPTURES")
    for s in sessions:
        if s.meta.get("formats") and set(s.meta["formats"]) <= {"nvidia_smi_csv", "nvidia_smi_dmon", "gpustat"}:
            assert f"  Session: {s.session_id}" not in head and f"  {s.session_id}: GPU capture" in rest
    assert "0 (CPU" not in out  # none of these says it ran on a CPU
    assert "  GPUs: unknown (2 rank(s))" in out
