"""Our text logs read by columns (``text_columns.read_bulk``) give what reading every line
with ``LineReader`` gives: the same frames, events, notes, meta and line counts."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkit.ingest.assemble import frame_of
from logkit.ingest.readers import logkit_text, sniff
from logkit.ingest.readers.base import Read, ReadResult, read_bytes, text_lines
from logkit.ingest.readers.logkit_lines import LineReader
from logkit.ingest.readers.text_columns import read_bulk
from logkit.schema import COMMUNICATION, MULTIGPU_STEP, PERFORMANCE, STEP_LINE
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"
DAY = date(2024, 12, 6)


def by_lines(path: Path) -> Read:
    read = Read(path, "logkit_text")
    reader = LineReader(read, DAY)
    for number, line in enumerate(text_lines(read_bytes(path, read), read), start=1):
        reader.line(number, line)
    return read


def frames(read: Read | ReadResult) -> dict[str, pd.DataFrame]:
    tables = (read.result() if isinstance(read, Read) else read).tables
    return {name: frame_of(name, [tables[name]] if name in tables else [], extra_columns=True)
            for name in ("steps", "comm", "perf", "evals", "events")}


def assert_same(bulk: Read, lines: Read) -> None:
    fb, fl = frames(bulk), frames(lines)
    for name in fb:
        pd.testing.assert_frame_equal(fb[name], fl[name], check_dtype=True, obj=name)
    assert bulk.meta == lines.meta
    assert repr(bulk.diagnostics) == repr(lines.diagnostics)
    assert (bulk.lines, bulk.used) == (lines.lines, lines.used)


P = "2024-12-06 14:{m:02d}:{s:02d} | {level:<8} | MainProcess  | {msg}"


def realistic(steps: int) -> dict[str, list[str]]:
    """Lines of the three logs as the emitter writes them, with a few of every other kind."""
    main = ["14:30:22 | INFO  | Session ID: training_20241206_143022", "14:30:22 | INFO  | Mode: MULTI-GPU",
            "14:30:22 | INFO  | GPU Count: 2", "", "📡 MULTI-GPU CONFIGURATION:", "  • Accelerator processes: 2",
            "  • Mixed precision: bf16", ""]
    multigpu = [P.format(m=30, s=25, level="INFO", msg="Distributed backend: nccl"),
                P.format(m=30, s=25, level="INFO", msg="World size: 2")]
    perf = []
    for step in range(1, steps + 1):
        m, s = divmod(step, 60)
        loss = "nan" if step == 7 else f"{3 - step / steps:.4f}"
        main.append(STEP_LINE.format(step=step, max_steps=steps, percent=100 * step / steps, loss=float(loss),
                                     learning_rate=1e-4, steps_per_second=2.5, eta_minutes=1.0))
        main.append(f"  └─ Metrics: step_duration: {0.4 + step % 3 / 100:.3f}, samples_per_second: 5.0")
        if step % 50 == 0:
            main += ["", "📊 EVALUATION RESULTS:", f"  • eval_loss: {2 - step / steps:.4f}", ""]
        multigpu.append(P.format(m=m % 60, s=s, level="INFO", msg=MULTIGPU_STEP.format(
            step=step, processes=2, local_rank=0, process_index=0)))
        for rank in (0, 1):
            multigpu.append(P.format(m=m % 60, s=s, level="INFO", msg=COMMUNICATION.format(
                op="gradient_sync", rank=rank, size_mb=26.21, duration_ms=3.1 + rank, bandwidth_mb_s=8456.1)))
        if step % 10 == 0:
            perf.append(P.format(m=m % 60, s=s, level="INFO", msg=PERFORMANCE.format(
                step=step, avg_step_time_s=0.41, throughput_samples_s=9.8, total_batch_size=4)))
        if step == 40:
            perf.append(P.format(m=m % 60, s=s, level="WARNING", msg="Slow training detected: 15.1s per step"))
            multigpu.append(P.format(m=m % 60, s=s, level="WARNING", msg="NCCL communication timeout"))
    return {"main": main, "multigpu": multigpu, "performance": perf}


def write(folder: Path, kind: str, lines: list[str]) -> Path:
    path = folder / f"training_20241206_143022_{kind}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_realistic_logs_are_read_by_columns_and_equal_line_by_line(tmp_path):
    for kind, lines in realistic(3000).items():
        path = write(tmp_path, kind, lines)
        bulk = read_bulk(path, path.read_bytes(), DAY)
        assert bulk is not None, kind
        assert_same(bulk, by_lines(path))
    bulk = read_bulk(tmp_path / "training_20241206_143022_main.log",
                     (tmp_path / "training_20241206_143022_main.log").read_bytes(), DAY)
    assert bulk.tables["steps"].num_rows == 3000 and len(bulk.rows["evals"]) == 60
    (nan,) = [e for e in bulk.rows["events"] if e["kind"] == "nan_detected"]
    number = next(i for i, line in enumerate(realistic(3000)["main"], 1) if line.startswith("Step    7/"))
    assert nan["step"] == 7 and nan["source"] == f"training_20241206_143022_main.log:{number}"


def test_read_logkit_text_takes_the_column_reader_for_long_files(tmp_path, monkeypatch):
    path = write(tmp_path, "multigpu", realistic(1000)["multigpu"])
    calls = []
    from logkit.ingest.readers import text_columns

    real = text_columns.read_bulk
    monkeypatch.setattr(text_columns, "read_bulk", lambda *a: calls.append(a[0]) or real(*a))
    read = logkit_text.read_logkit_text(path)
    assert calls == [path] and read.tables["comm"].num_rows == 2000
    assert_same(read, by_lines(path))


@pytest.mark.parametrize("path", sorted(str(p) for p in SAMPLES.rglob("*.log") if sniff(p) == "logkit_text"))
def test_every_text_fixture_reads_the_same_by_columns(path):
    path = Path(path)
    bulk = read_bulk(path, path.read_bytes(), DAY)
    if bulk is not None:
        assert_same(bulk, by_lines(path))


ODD = [
    "", "   ", "garbage | line", "Step 2/10 | Loss: broken", "14:30:22 | INFO  | World size: 4",
    "23:59:59 | INFO  | late", "00:00:01 | WARNING | wrapped past midnight", "99:99:99 | INFO  | bad clock",
    "📊 EVALUATION RESULTS:", "  • eval_loss: 1.8765", "  • eval_acc: x", "  └─ Metrics: step_duration: 0.4, samples_per_second: 5.0",
    "Step    5/10 ( 50.0%) | Loss: inf | LR: 1.00e-04 | Speed: 2.5 steps/s | ETA: 6.3min",
    "Step    6/10 ( 60.0%) | Loss: 2.0000 | LR: 1.00e-04 | Speed: 2.5 steps/s | ETA: 6.3min",
    "2024-12-06 14:30:45 | INFO     | MainProcess  | Multi-GPU Step 20 | Processes: 2 | Local rank: 0 | Process index: 0",
    "2024-12-06 14:30:45 | INFO     | MainProcess  | Communication | allreduce | Size: 45.67MB | Bandwidth: 3701.46MB/s",
    "2024-13-45 14:30:45 | INFO     | MainProcess  | Communication | gradient_sync | Rank 1 | Size: 1.5MB | "
    "Duration: 2.00ms | Bandwidth: 750.00MB/s",
    "2024-12-06 23:59:60 | INFO     | MainProcess  | Performance | Step 100 | Avg step time: 0.380s | "
    "Throughput: 10.5 samples/s | Total batch size: 4",
    "2024-12-06 14:32:15 | WARNING  | MainProcess  | GPU 1 utilization low: 45.2%",
    "2024-12-06 14:32:15 | ERROR    | MainProcess  | Communication | gradient_sync | Size: nanMB | Bandwidth: 1MB/s",
    "Communication | gradient_sync | Rank 0 | Size: 1.00MB | Duration: 1.00ms | Bandwidth: 1.00MB/s",
    "14:30:22 | INFO  | Step    1/10 ( 10.0%) | Loss: 2.0000 | LR: 1.00e-04 | Speed: 2.5 steps/s | ETA: 6.3min",
    "2024-12-06 14:30:45,250 | INFO     | MainProcess  | Performance | Step 1 | Avg step time: 0.380s | "
    "Throughput: 10.5 samples/s | Total batch size: 4",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(ODD), min_size=1, max_size=60), st.integers(0, 3), st.randoms())
def test_odd_lines_anywhere_read_the_same_or_line_by_line(tmp_path, odd, which, rnd):
    lines = list(realistic(60)[("main", "multigpu", "performance", "main")[which]])
    for line in odd:
        lines.insert(rnd.randrange(len(lines) + 1), line)
    path = write(tmp_path, "main", lines)
    bulk = read_bulk(path, path.read_bytes(), DAY)
    if bulk is not None:
        assert_same(bulk, by_lines(path))
