"""The record specs drive both JSONL engines: a record laid out by ``spec.build`` lands, field by
field, in its frame's columns whichever engine reads it. So a key path changed in
``logkit/schema/records.py`` is followed by both, or this fails."""

from __future__ import annotations

import math

import orjson
import pandas as pd
import pyarrow as pa
import pytest

from logkit.ingest import jsonl_arrow, jsonl_lines
from logkit.ingest.assemble import Frames
from logkit.ingest.discover import session_folder
from logkit.ingest.mapping import RAW_SCHEMA, column, map_records, raw_records
from logkit.schema.frames import FRAMES
from logkit.schema.records import EVENT, FRAME_SPECS, RecordSpec

EVENT_TYPE = "custom_event"  # no frame of its own: an events row
RANK = 7  # the stream's rank: every record of a rank's stream names it (others' are left out)


def _values(spec: RecordSpec, start: int) -> dict:
    """A distinct value for every frame field of ``spec`` (the stream's rank for ``rank``)."""
    out = {}
    for i, f in enumerate(spec.frame_fields, start=start):
        out[f.name] = {float: 0.25 + i, int: 100 + i, str: f"text{i}"}[f.type]
    if "rank" in out:
        out["rank"] = RANK
    return out


def _records() -> tuple[list[dict], dict[str, dict]]:
    """One record per frame spec and an event, each with every frame field; and, per frame, the
    values its columns must hold."""
    records, want = [], {}
    for n, (frame, spec) in enumerate(FRAME_SPECS.items()):
        values = _values(spec, 100 * n)
        record = spec.build(type=spec.type, **values)
        if spec.items is not None:
            device = _values(spec.items, 100 * n + 50)
            record[spec.items_key] = [spec.items.build(**device)]
            values.update(device)
        records.append(record)
        want[frame] = values
    values = _values(EVENT, 900)
    values["kind"] = EVENT_TYPE
    records.append(EVENT.build(**values))
    want["events"] = values
    return records, want


def _check(frames: dict, want: dict[str, dict]) -> None:
    for frame, values in want.items():
        table = frames[frame]
        assert len(table) == 1, frame
        for col in FRAMES[frame]:
            if col.source is None or col.source.name not in values:
                continue
            got, expected = table[col.name].iloc[0], values[col.source.name]
            assert got == expected, f"{frame}.{col.name} ({'.'.join(col.source.raw)}): {got!r} != {expected!r}"


@pytest.mark.parametrize("engine", ["fast", "per-line"])
def test_every_frame_field_lands_in_its_column(tmp_path, engine):
    records, want = _records()
    path = tmp_path / f"s_rank{RANK}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    frames = Frames()
    if engine == "fast":
        assert jsonl_arrow.read_stream(path, RANK, frames) is not None
    else:
        assert not jsonl_lines.read_stream(path, RANK, frames.add).diagnostics
    _check(frames.result(), want)


def test_every_frame_column_of_our_records_is_in_the_raw_schema_with_its_type():
    arrow = {"float64": pa.float64(), "Int64": pa.int64()}
    for frame, spec in FRAME_SPECS.items():
        for col in FRAMES[frame]:
            if col.source is None:
                continue
            kind = RAW_SCHEMA
            if spec.items is not None and col.source in spec.items:
                kind = RAW_SCHEMA.field(spec.items_key).type.value_type
            for key in col.source.raw:
                kind = kind.field(key).type
            assert kind == arrow.get(col.dtype, pa.string()), (frame, col.name)


def test_a_torn_last_line_is_read_as_the_per_line_engine_reads_it(tmp_path):
    records, _ = _records()
    path = tmp_path / f"s_rank{RANK}.jsonl"
    whole = b"".join(orjson.dumps(r) + b"\n" for r in records)
    for tail in (b'{"type": "training_ste', orjson.dumps(records[0]), b"  "):
        path.write_bytes(whole + tail)
        fast, lines = Frames(), Frames()
        read = jsonl_arrow.read_stream(path, RANK, fast)
        by_line = jsonl_lines.read_stream(path, RANK, lines.add)
        assert read is not None and read.diagnostics == by_line.diagnostics and read.last_time == by_line.last_time
        for name, frame in fast.result().items():
            pd.testing.assert_frame_equal(frame, lines.result()[name], obj=name)


def test_a_wrong_type_is_missing_and_a_device_that_is_no_object_is_left_out():
    snapshot = FRAME_SPECS["gpu"]
    rec = snapshot.build(type=snapshot.type, rank="1", time_s=True, host=3)
    rec[snapshot.items_key] = [7, None, {"index": 2, "power_w": "x"}]
    frames = map_records(raw_records([rec], [1]), "s_rank0.jsonl", 5)
    gpu = frames["gpu"].to_pylist()
    assert len(gpu) == 1 and gpu[0]["gpu"] == 2 and gpu[0]["power_w"] is None
    assert gpu[0]["rank"] == 5 and gpu[0]["time_s"] is None and gpu[0]["host"] == ""
    assert column(raw_records([rec], [1]), ("rank",)).to_pylist() == [None]


def test_nan_loss_is_an_event_in_file_order():
    steps = FRAME_SPECS["steps"]
    recs = [EVENT.build(kind="anomaly", message="before"),
            steps.build(type=steps.type, step=3, loss=math.nan, grad_norm=math.inf),
            EVENT.build(kind="anomaly", message="after")]
    events = map_records(raw_records(recs, [1, 2, 3]), "s_rank0.jsonl", 0)["events"].to_pylist()
    assert [(e["kind"], e["source"]) for e in events] == [
        ("anomaly", "s_rank0.jsonl:1"), ("nan_detected", "s_rank0.jsonl:2"), ("anomaly", "s_rank0.jsonl:3")]
    assert events[1]["subkind"] == "nan_loss" and events[1]["message"] == "loss logged as nan, grad_norm logged as inf"


def test_session_folder_under_a_base_or_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "logs" / "sessions" / "v1").mkdir(parents=True)
    (tmp_path / "other" / "v2").mkdir(parents=True)
    assert session_folder("v1", tmp_path / "logs") == tmp_path / "logs" / "sessions" / "v1"
    assert session_folder("v2", tmp_path / "other") == tmp_path / "other" / "v2"
    monkeypatch.chdir(tmp_path)
    assert session_folder("v1").resolve() == (tmp_path / "logs" / "sessions" / "v1").resolve()
    with pytest.raises(FileNotFoundError, match=r"no session folder 'v3' \(looked for .*; sessions found: v1"):
        session_folder("v3")
