"""--export: every frame of every session written, and read back equal (dtypes included)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from logkit.report.export import (
    FRAMES,
    export_sessions,
    export_tensorboard,
    read_export,
    safe_name,
    tensorboard_available,
)
from logkit.run.load import load_sessions
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"
ROOTS = ["qlora_tiny_cpu/logs", "pipeline_sessions", "console", "gpu_captures", "verbose_jsonl"]


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


def test_tensorboard_skipped_with_a_note_when_not_installed(sessions, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    assert tensorboard_available() is None
    notes = export_tensorboard(sessions[:2], tmp_path)
    assert notes == ["TensorBoard scalars skipped: the tensorboard package is not installed "
                     "(pip install tensorboard)"]
    assert not (tmp_path / "tensorboard").exists()


def test_tensorboard_scalars_read_back(sessions, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    s = next(x for x in sessions if x.session_id.startswith("training_") and x.meta.get("world_size") == 2)
    export_tensorboard([s], tmp_path)
    (logdir,) = {p.parent for p in (tmp_path / "tensorboard").rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    # rank 0's losses and rank 1's step times, read from the JSONL here (json, not logkit)
    folder = Path(s.meta["folder"])
    want_loss, want_t1 = {}, {}
    for rank, target in ((0, want_loss), (1, want_t1)):
        (path,) = folder.glob(f"*_rank{rank}.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines():
            r = orjson.loads(line)
            if r["type"] == "training_step_complete":
                target[r["step"]] = r["metrics"]["loss"] if rank == 0 else r["timing"]["step_time_seconds"]
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert set(loss) == set(want_loss)
    for step, value in want_loss.items():
        assert loss[step] == pytest.approx(value, rel=1e-6)  # float32 in the event file
    t1 = {e.step: e.value for e in acc.Scalars("step_time_s/rank1")}
    assert t1 == {k: pytest.approx(v, rel=1e-6) for k, v in want_t1.items()}


def test_unknown_format_is_refused(sessions, tmp_path):
    with pytest.raises(ValueError, match="unknown export format"):
        export_sessions(sessions[:1], "xlsx", tmp_path)


def test_tensorboard_train_scalars_are_the_lowest_ranks(tmp_path):
    """Three ranks that logged different values: the train/* series are rank 0's (the main rank),
    read from its JSONL here; a samples/s the record lacks is its batch over its step time."""
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.support.synth import rank_file, write_session

    folder = write_session(tmp_path / "logs", "ranks", world_size=3, step_times=[0.5, 0.4, 0.6, 0.5])
    want = {}
    for rank in (2, 1, 0):
        lines = []
        for line in rank_file(folder, "ranks", rank).read_bytes().splitlines():
            r = orjson.loads(line)
            if r["type"] == "training_step_complete":
                m, t = r["metrics"], r["timing"]
                m["loss"] = round(2.0 + rank + r["step"] / 8, 4)
                m["learning_rate"] = 1e-4 * (rank + 1)
                m["grad_norm"] = 0.5 + rank
                t["step_time_seconds"] = round(t["step_time_seconds"] * (1 + rank / 4), 4)
                m["samples_per_second"] = None if r["step"] == 2 else round(8 / t["step_time_seconds"] + rank, 4)
                if rank == 0:
                    want[r["step"]] = {
                        "train/loss": m["loss"], "train/learning_rate": m["learning_rate"],
                        "train/grad_norm": m["grad_norm"], "train/step_time_s": t["step_time_seconds"],
                        "train/samples_per_s": m["samples_per_second"] or m["total_batch_size"] / t["step_time_seconds"]}
            lines.append(orjson.dumps(r))
        rank_file(folder, "ranks", rank).write_bytes(b"\n".join(lines) + b"\n")
    (s,) = load_sessions(folder.parent)
    export_tensorboard([s], tmp_path / "out")
    acc = EventAccumulator(str(tmp_path / "out" / "tensorboard" / "ranks"))
    acc.Reload()
    assert sorted(t for t in acc.Tags()["scalars"] if t.startswith("train/")) == sorted(want[1])
    for tag in want[1]:
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert got == {step: pytest.approx(w[tag], rel=1e-6) for step, w in want.items()}, tag


def test_sessions_sharing_a_folder_name_never_collide(tmp_path):
    """Ids that differ only in characters a folder cannot hold, or only in case, get folders of
    their own; each folder reads back its own session's steps."""
    from tests.support.synth import write_session

    ids = ["v1/run", "v1_run", "V1_RUN"]
    roots = [tmp_path / "logs" / str(i) for i in range(len(ids))]
    sessions = []
    for i, (sid, root) in enumerate(zip(ids, roots, strict=True)):
        write_session(root, "run", step_times=[0.5 + i / 10] * (3 + i))
        (s,) = load_sessions(root)
        s.meta["session_id"] = sid
        sessions.append(s)
    folders, notes = export_sessions(sessions, "parquet", tmp_path / "out", tensorboard=False)
    assert [f.name for f in folders] == ["v1_run", "v1_run_2", "V1_RUN_3"]
    assert len({f.name.casefold() for f in folders}) == 3
    for i, folder in enumerate(folders):
        back = read_export(folder)
        assert back["session_id"] == ids[i]
        assert back["steps"]["step_time_s"].tolist() == [0.5 + i / 10] * (3 + i)
    assert notes == ["v1_run exported as v1_run_2 (v1_run was taken by another session)",
                     "V1_RUN exported as V1_RUN_3 (V1_RUN was taken by another session)"]
    if tensorboard_available():
        export_tensorboard(sessions, tmp_path / "out")
        assert sorted(p.name for p in (tmp_path / "out" / "tensorboard").iterdir()) == ["V1_RUN_3", "v1_run",
                                                                                         "v1_run_2"]
