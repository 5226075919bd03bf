"""Ingest: JSONL rank streams and summary.json into Session frames; discovery; robustness."""

from __future__ import annotations

import gzip
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logkit
from logkit.ingest import Session
from logkit.ingest.discover import discover
from logkit.ingest.jsonl_lines import read_jsonl
from logkit.run.load import load_session, load_sessions
from logkit.schema import FRAME_COLUMNS
from tests.support.synth import append_bytes, rank_file, summary_file, write_session

FRAMES = ("steps", "comm", "perf", "gpu", "evals", "events", "diagnostics")


def test_frames_have_the_contract_columns(tmp_path):
    folder = write_session(tmp_path, "s1", world_size=2, gpu_count=2)
    session = load_session(folder)
    for name in FRAMES:
        frame = getattr(session, name)
        assert tuple(frame.columns[: len(FRAME_COLUMNS[name])]) == FRAME_COLUMNS[name], name
    assert str(session.steps["step"].dtype) == "Int64"
    assert session.steps["step_time_s"].dtype == "float64"
    empty = Session.empty()
    for name in FRAMES:
        assert list(getattr(empty, name).columns[: len(FRAME_COLUMNS[name])]) == list(FRAME_COLUMNS[name])
        assert getattr(empty, name).empty


def test_step_rows_carry_the_record_values(tmp_path):
    times = [0.5, 0.25, 0.4]
    folder = write_session(tmp_path, "s1", step_times=times, total_batch_size=6, losses=[3.0, None, 2.5])
    steps = load_session(folder).steps
    assert list(steps["step"]) == [1, 2, 3]
    assert list(steps["step_time_s"]) == times
    assert list(steps["samples_per_s"]) == pytest.approx([6 / t for t in times])
    assert list(steps["data_time_s"]) == pytest.approx([t / 10 for t in times])
    assert list(steps["total_batch_size"]) == [6, 6, 6]
    assert steps["loss"].iloc[0] == 3.0 and math.isnan(steps["loss"].iloc[1])
    # time_s is the record's elapsed_s: 1 s of set-up, then the steps
    assert list(steps["time_s"]) == pytest.approx([1.5, 1.75, 2.15])
    assert list(steps["epoch"]) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_comm_perf_gpu_evals_and_events(tmp_path):
    folder = write_session(tmp_path, "s2", world_size=2, gpu_count=2, step_times=[0.3] * 4)
    s = load_session(folder)
    assert len(s.comm) == 8 and set(s.comm["rank"]) == {0, 1}
    row = s.comm.iloc[0]
    assert (row["op"], row["size_bytes"], row["group_size"], row["bucket"]) == ("gradient_sync", 4_000_000, 2, 0)
    assert row["timing_source"] == "wall"
    assert row["source"] == "s2_rank0.jsonl:3"  # session_start is line 1, step 1 line 2
    assert len(s.perf) == 2 and s.perf["throughput_samples_s"].iloc[0] == pytest.approx(8 * 4 / 1.2)
    assert len(s.gpu) == 4 and set(s.gpu["gpu"]) == {0, 1} and set(s.gpu["host"]) == {"host-a"}
    assert set(s.evals["name"]) == {"eval_loss", "eval_perplexity"} and len(s.evals) == 4
    kinds = s.events[s.events["rank"] == 0]["kind"].tolist()
    assert kinds == ["session_start", "resource_warning", "session_end"]
    warn = s.events[s.events["kind"] == "resource_warning"].iloc[0]
    assert (warn["level"], warn["subkind"], warn["value"], warn["threshold"]) == ("WARNING", "memory_high", 91.0, 90.0)
    assert s.events[s.events["kind"] == "session_start"]["time_s"].tolist() == [0.0, 0.0]


def test_meta_from_start_end_and_summary(tmp_path):
    folder = write_session(tmp_path, "s3", world_size=2, step_times=[0.5] * 4, total_batch_size=16)
    meta = load_session(folder).meta
    assert meta["session_id"] == "s3"
    assert (meta["mode"], meta["world_size"], meta["gpu_count"], meta["backend"]) == ("MULTI-CPU", 2, 0, "gloo")
    assert (meta["model"], meta["total_batch_size"], meta["max_steps"]) == ("tiny-llama", 16, 4)
    assert meta["status"] == "completed" and meta["duration_s"] == pytest.approx(3.5)
    assert meta["start_time"] == "2026-11-22T01:40:04.123456+00:00"
    assert meta["end_time"].startswith("2026-11-22T01:40:07.623456")
    assert meta["ranks_found"] == [0, 1]
    assert [Path(f).name for f in meta["files"]] == ["s3_rank0.jsonl", "s3_rank1.jsonl", "s3_summary.json"]


def test_torn_last_line_becomes_a_diagnostic(tmp_path):
    folder = write_session(tmp_path, "torn", step_times=[0.5] * 3, end=False, summary=False)
    path = rank_file(folder, "torn", 0)
    n_lines = len(path.read_bytes().splitlines())
    append_bytes(path, b'{"timestamp": "2026-11-22T01:40:09", "type": "training_ste')
    s = load_session(folder)
    assert len(s.steps) == 3  # every whole record kept
    assert len(s.diagnostics) == 1
    d = s.diagnostics.iloc[0]
    assert Path(d["file"]).name == "torn_rank0.jsonl" and d["line"] == n_lines + 1
    assert "torn" in d["reason"] and d["text"].startswith('{"timestamp"')
    assert s.meta["status"] == "incomplete" and s.meta["duration_from"] == "last record"


def test_invalid_utf8_does_not_crash(tmp_path):
    folder = write_session(tmp_path, "bad", step_times=[0.5] * 2, summary=False)
    path = rank_file(folder, "bad", 0)
    good = orjson.loads(path.read_bytes().splitlines()[0])
    good["message"] = "caf\u00e9"
    line = orjson.dumps(good).replace("é".encode(), b"\xff\xfe")
    append_bytes(path, line + b"\n" + b"\xc3\x28 not json\n")
    s = load_session(folder)
    reasons = s.diagnostics["reason"].tolist()
    assert len(reasons) == 2
    assert "invalid UTF-8" in reasons[0] and "invalid JSON" in reasons[1]
    assert "caf\ufffd" in s.events["message"].iloc[-1]  # record kept, bad bytes replaced
    assert len(s.steps) == 2


def test_non_objects_and_records_without_type(tmp_path):
    folder = write_session(tmp_path, "odd", step_times=[0.5], summary=False)
    path = rank_file(folder, "odd", 0)
    append_bytes(path, b'[1, 2]\n"text"\n{"message": "no type"}\n\n   \n{"type": 7}\n')
    s = load_session(folder)
    assert s.diagnostics["reason"].tolist() == [
        "not a JSON object (list)", "not a JSON object (str)", "record without a 'type'", "record without a 'type'",
    ]
    assert len(s.steps) == 1


def test_gzipped_stream(tmp_path):
    folder = write_session(tmp_path, "gz", world_size=2, step_times=[0.5] * 3, summary=False)
    plain = rank_file(folder, "gz", 1)
    plain.with_name(plain.name + ".gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    s = load_session(folder)
    assert s.meta["ranks_found"] == [0, 1] and len(s.steps) == 6 and s.diagnostics.empty


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    folder = write_session(tmp_path, "gz", step_times=[0.5] * 50, summary=False)
    plain = rank_file(folder, "gz", 0)
    data = gzip.compress(plain.read_bytes())
    plain.with_name(plain.name + ".gz").write_bytes(data[: len(data) // 2])
    plain.unlink()
    s = load_session(folder)
    assert len(s.diagnostics) >= 1 and len(s.steps) < 50


def test_summary_json_alone_is_a_session(tmp_path):
    folder = write_session(tmp_path, "only", world_size=4, step_times=[0.25] * 8, jsonl=False)
    s = load_session(folder)
    assert s.steps.empty
    assert (s.meta["session_id"], s.meta["world_size"], s.meta["status"]) == ("only", 4, "completed")
    assert s.meta["duration_from"] == "summary.json" and s.meta["duration_s"] == pytest.approx(3.5)
    assert s.meta["ranks_found"] == []


def test_broken_summary_json_is_a_diagnostic(tmp_path):
    folder = write_session(tmp_path, "bs", step_times=[0.5], summary=False)
    summary_file(folder, "bs").write_text("{not json", encoding="utf-8")
    s = load_session(folder)
    assert len(s.steps) == 1 and "invalid JSON" in s.diagnostics["reason"].iloc[0]


def test_discovery_nested_flat_and_sorted(tmp_path):
    write_session(tmp_path / "a" / "b", "late", start="2026-11-23T00:00:00.000000+00:00")
    write_session(tmp_path, "early", start="2026-11-21T00:00:00.000000+00:00")
    flat = tmp_path / "flat"
    for sid, start in (("y", "2026-11-22T00:00:00+00:00"), ("x", "2026-11-22T00:00:00+00:00")):
        write_session(tmp_path / "tmp", sid, start=start)
        flat.mkdir(exist_ok=True)
        for f in (tmp_path / "tmp" / sid).iterdir():
            f.rename(flat / f.name)
    (tmp_path / "tmp" / "x").rmdir()
    (tmp_path / "tmp" / "y").rmdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a session", encoding="utf-8")
    ids = [s.session_id for s in load_sessions(tmp_path)]
    assert ids == ["early", "x", "y", "late"]  # by start time, ties by session id


def test_symlinked_session_folders_are_followed_once(tmp_path):
    write_session(tmp_path / "runs", "r1")
    gathered = tmp_path / "all"
    gathered.mkdir()
    (gathered / "r1").symlink_to(tmp_path / "runs" / "r1", target_is_directory=True)
    (gathered / "r1_again").symlink_to(tmp_path / "runs" / "r1", target_is_directory=True)
    (gathered / "loop").symlink_to(gathered, target_is_directory=True)
    assert [s.session_id for s in load_sessions(gathered, follow_links=True)] == ["r1"]


def test_links_out_of_the_folder_are_noted_not_followed_unless_asked(tmp_path):
    write_session(tmp_path / "runs", "r1")
    gathered = tmp_path / "all"
    write_session(gathered, "here")
    (gathered / "r1").symlink_to(tmp_path / "runs" / "r1", target_is_directory=True)
    (gathered / "here" / "stolen.log").symlink_to(tmp_path / "runs" / "r1" / "r1_rank0.jsonl")
    (gathered / "here" / "here_rank1.jsonl").symlink_to(gathered / "here" / "here_rank0.jsonl")  # inside: read
    notes: list = []
    (source,) = discover(gathered, notes=notes)
    assert source.session_id == "here" and sorted(source.rank_files) == [0, 1]
    assert [n["file"] for n in notes] == [str(gathered / "r1")]
    assert "a link out of the folder read" in notes[0]["reason"]
    assert [n["file"] for n in source.notes] == [str(gathered / "here" / "stolen.log")]
    assert [s.session_id for s in load_sessions(gathered, follow_links=True)] == ["here", "r1"]


def test_load_session_from_a_file_and_a_parent(tmp_path):
    folder = write_session(tmp_path / "logs", "one", world_size=2, step_times=[0.5] * 2)
    assert load_session(rank_file(folder, "one", 1)).meta["ranks_found"] == [0, 1]
    assert load_session(tmp_path).session_id == "one"  # the only session below
    write_session(tmp_path / "logs", "two", start="2026-11-20T00:00:00+00:00")
    chosen = load_session(tmp_path / "logs")
    assert chosen.session_id == "two" and "folder holds 2 sessions" in chosen.diagnostics["reason"].iloc[-1]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_session(empty).steps.empty and len(load_session(empty).diagnostics) == 1
    assert load_sessions(empty) == []


def test_missing_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_session(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        load_sessions(tmp_path / "nope")


def test_logkit_exposes_the_loaders_lazily():
    assert logkit.load_session is load_session and logkit.Session is Session


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=80) | st.sampled_from([b'{"type": "x"}', b'{"type": "performance", "step": "a"}',
                                                            b'{"type": "training_step_complete", "metrics": 3}']),
                max_size=12))
def test_any_bytes_never_raise(chunks):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h_rank0.jsonl"
        path.write_bytes(b"\n".join(chunks))
        read = read_jsonl(path)
        assert all(d["line"] >= 1 for d in read.diagnostics)
        session = load_session(tmp)
        assert session.session_id == "h"


@pytest.mark.parametrize("module", ["logkit", "logkit.ingest", "logkit.cli"])
def test_import_does_not_load_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"
    if module == "logkit":
        assert out[1] == "False"  # importing logkit stays cheap
