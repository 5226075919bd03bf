"""--export: every frame of every session written, and read back equal (dtypes included)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from logkit.ingest import load_sessions
from logkit.report.export import (
    FRAMES,
    export_sessions,
    export_tensorboard,
    read_export,
    safe_name,
    tensorboard_available,
)

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
ROOTS = ["qlora_tiny_cpu/logs", "seed002_sessions", "console", "gpu_captures", "verbose_jsonl"]


@pytest.fixture(scope="module")
def sessions():
    out = []
    for root in ROOTS:
        out += load_sessions(SAMPLES / root)
    return out


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_round_trips_every_frame(sessions, tmp_path, fmt):
    folders, notes = export_sessions(sessions, fmt, tmp_path, tensorboard=False)
    assert notes == [] and len(folders) == len(sessions)
    for s, folder in zip(sessions, folders, strict=True):
        assert folder == tmp_path / safe_name(s.session_id)
        for name in FRAMES:
            assert (folder / f"{name}.{fmt}").is_file()
        back = read_export(folder)
        assert back["session_id"] == s.session_id
        assert back["meta"]["world_size"] == s.meta.get("world_size")
        for name in FRAMES:
            pd.testing.assert_frame_equal(getattr(s, name).reset_index(drop=True), back[name], check_dtype=True)


def test_list_columns_and_empty_text_survive_csv(tmp_path):
    from logkit.ingest import Session
    from logkit.ingest.session import make_frame

    s = Session.empty({"session_id": "v1/multi_gpu"})
    s.events = make_frame("events", [{"kind": "collective_mismatch", "ranks": [0, 2], "ops": ["A", "B"],
                                      "message": ""}, {"kind": "x", "message": None}])
    (folder,), _ = export_sessions([s], "csv", tmp_path, tensorboard=False)
    assert folder.name == "v1_multi_gpu"
    back = read_export(folder)["events"]
    assert back.loc[0, "ranks"] == [0, 2] and back.loc[0, "message"] == "" and back.loc[1, "message"] is None
    assert orjson.loads((folder / "meta.json").read_bytes())["session_id"] == "v1/multi_gpu"


def test_tensorboard_skipped_with_a_note_or_written(sessions, tmp_path):
    notes = export_tensorboard(sessions[:2], tmp_path)
    if tensorboard_available() is None:
        assert notes == ["TensorBoard scalars skipped: the tensorboard package is not installed "
                         "(pip install tensorboard)"]
    else:
        assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


def test_unknown_format_is_refused(sessions, tmp_path):
    with pytest.raises(ValueError, match="unknown export format"):
        export_sessions(sessions[:1], "xlsx", tmp_path)
