"""Export the frames of sessions: Parquet or CSV files, and TensorBoard scalars.

    >>> from logkit.report.export import export_sessions, read_export     # doctest: +SKIP
    >>> export_sessions(sessions, "parquet", "out")                         # doctest: +SKIP
    >>> read_export("out/training_20241206_143022")["steps"]                # doctest: +SKIP

Layout: ``DIR/<session folder>/<frame>.parquet`` (or ``.csv``) for every frame of
``FRAMES``, and ``DIR/<session folder>/meta.json`` with the session's ``meta``, its id, and
each frame's column dtypes (CSV loses them; ``read_export`` puts them back). The session
folder is the session id with every character outside ``[A-Za-z0-9._-]`` made ``_``
(``v1/multi_gpu`` -> ``v1_multi_gpu``). TensorBoard scalars go to
``DIR/tensorboard/<session folder>/`` when the ``tensorboard`` package is importable.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from logkit.report.view import plain

__all__ = ["FRAMES", "FORMATS", "export_sessions", "export_session", "read_export", "export_tensorboard",
           "safe_name", "tensorboard_available", "TB_MAX_POINTS"]

FRAMES: tuple[str, ...] = ("steps", "comm", "perf", "gpu", "evals", "events", "diagnostics")
FORMATS: tuple[str, ...] = ("parquet", "csv")
TB_MAX_POINTS = 10_000  # per scalar series: longer series are thinned to every k-th step


def safe_name(session_id) -> str:
    """A folder name for ``session_id``: characters outside [A-Za-z0-9._-] become "_"."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(session_id or "session"))
    return "_" + name if name in (".", "..") else name


def _json_text(v) -> str:
    return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def _needs_json(series, fmt: str) -> bool:
    """An object column that the file format cannot hold as it is: lists or dicts (both formats),
    and for CSV also non-text values or empty strings (CSV cannot tell "" from missing)."""
    values = series.dropna()
    if values.empty:
        return False
    if values.map(lambda v: isinstance(v, (list, tuple, dict))).any():
        return True
    if fmt == "csv":
        return bool(values.map(lambda v: not isinstance(v, str) or v == "").any())
    return False


def _prepare(frame, fmt: str):
    """The frame as written, and the names of its columns written as JSON text (None stays missing)."""
    import pandas as pd

    frame = frame.reset_index(drop=True).copy()
    json_cols = []
    for col in frame.columns:
        text = frame[col].dtype == object or str(frame[col].dtype) == "category"
        if text and _needs_json(frame[col].astype("object"), fmt):
            frame[col] = pd.Series([None if v is None else _json_text(v) for v in frame[col]],
                                   index=frame.index, dtype="object")
            json_cols.append(str(col))
    return frame, json_cols


def export_session(session, fmt: str, out_dir) -> Path:
    """Write one session's frames and meta under ``out_dir/<session folder>``; returns that folder."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")
    folder = Path(out_dir) / safe_name(session.session_id)
    folder.mkdir(parents=True, exist_ok=True)
    dtypes, json_columns, categories = {}, {}, {}
    for name in FRAMES:
        original = getattr(session, name)
        dtypes[name] = {str(c): str(t) for c, t in original.dtypes.items()}
        categories[name] = {str(c): {"values": plain(list(t.categories)), "dtype": str(t.categories.dtype),
                                     "ordered": bool(t.ordered)}
                            for c, t in original.dtypes.items() if str(t) == "category"}
        frame, json_columns[name] = _prepare(original, fmt)
        path = folder / f"{name}.{fmt}"
        if fmt == "parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
    doc = {"session_id": session.session_id, "format": fmt, "frames": dtypes, "json_columns": json_columns,
           "categories": categories, "meta": session.meta}
    (folder / "meta.json").write_bytes(orjson.dumps(
        doc, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    return folder


def read_export(folder) -> dict:
    """Read one exported session folder back: ``{"meta": {...}, "steps": DataFrame, ...}`` with
    the dtypes the frames had."""
    import pandas as pd

    folder = Path(folder)
    doc = orjson.loads((folder / "meta.json").read_bytes())
    out = {"meta": doc["meta"], "session_id": doc["session_id"]}
    for name, dtypes in doc["frames"].items():
        path = folder / f"{name}.{doc['format']}"
        json_cols = set(doc.get("json_columns", {}).get(name, []))
        if doc["format"] == "parquet":
            frame = pd.read_parquet(path)
        else:
            text_cols = [c for c, t in dtypes.items() if t in ("object", "str", "string", "category")]
            frame = pd.read_csv(path, dtype={c: "object" for c in text_cols})
        cats = doc.get("categories", {}).get(name, {})
        for col, dtype in dtypes.items():
            if col not in frame:
                continue
            if dtype == "category" and col in cats:
                c = cats[col]
                kind = pd.CategoricalDtype(pd.Index(c["values"], dtype=c["dtype"]), ordered=c["ordered"])
                values = frame[col].astype("object")
                values = values.where(values.notna(), None)
                if col in json_cols:
                    values = pd.Series([None if v is None else orjson.loads(v) for v in values],
                                       index=values.index, dtype="object")
                frame[col] = values.astype(kind)
            elif dtype in ("object", "str", "string"):
                values = frame[col].astype("object")
                values = values.where(values.notna(), None)
                if col in json_cols:
                    values = pd.Series([None if v is None else orjson.loads(v) for v in values],
                                       index=values.index, dtype="object")
                # text columns come back with the dtype they had (object, or pandas' str/string)
                frame[col] = values if dtype == "object" else values.astype(dtype)
            elif str(frame[col].dtype) != dtype:
                frame[col] = frame[col].astype(dtype)
        out[name] = frame
    return out


def tensorboard_available() -> str | None:
    """The module that writes TensorBoard files here (``tensorboard`` / ``torch.utils.tensorboard``), or None."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        return None  # torch.utils.tensorboard needs the tensorboard package too
    try:
        if importlib.util.find_spec("torch") is not None:
            return "torch.utils.tensorboard"
    except (ImportError, ValueError):
        pass
    return "tensorboard"


def _writer(logdir: Path):
    kind = tensorboard_available()
    if kind == "torch.utils.tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(logdir))
    # tensorboard's own (TF-free) summary writer
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    class _Writer:
        def __init__(self, path):
            self.w = EventFileWriter(str(path))

        def add_scalar(self, tag, value, step):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            self.w.add_event(Event(step=int(step), summary=summary))

        def close(self):
            self.w.close()

    return _Writer(logdir)


def export_tensorboard(sessions, out_dir) -> list[str]:
    """TensorBoard scalars (loss, learning rate, samples/s, step time; step time per rank) of
    each session under ``out_dir/tensorboard/<session folder>``. Returns notes for the user
    (one saying it was skipped when no TensorBoard writer is importable)."""
    kind = tensorboard_available()
    if kind is None:
        return ["TensorBoard scalars skipped: the tensorboard package is not installed "
                "(pip install tensorboard)"]
    notes = []
    for s in sessions:
        steps = s.steps
        if steps.empty:
            continue
        logdir = Path(out_dir) / "tensorboard" / safe_name(s.session_id)
        writer = _writer(logdir)
        try:
            main = steps[steps["rank"] == steps["rank"].min()] if steps["rank"].notna().any() else steps
            derived = main["total_batch_size"].astype("float64") / main["step_time_s"].where(main["step_time_s"] > 0)
            series = {"train/loss": main["loss"], "train/learning_rate": main["learning_rate"],
                      "train/samples_per_s": main["samples_per_s"].astype("float64").fillna(derived),
                      "train/step_time_s": main["step_time_s"], "train/grad_norm": main["grad_norm"]}
            for rank, part in steps.groupby("rank", sort=True):
                series[f"step_time_s/rank{int(rank)}"] = part.set_index("step")["step_time_s"]
            for tag, values in series.items():
                if values.index.name != "step":
                    values = values.set_axis(main["step"])
                values = values.dropna()
                values = values[values.index.notna()]
                stride = max(1, -(-len(values) // TB_MAX_POINTS))
                for step, v in values.iloc[::stride].items():
                    writer.add_scalar(tag, float(v), int(step))
                if stride > 1:
                    notes.append(f"{s.session_id}: {tag} thinned to every {stride}th step for TensorBoard")
        finally:
            writer.close()
        notes.append(f"TensorBoard scalars of {s.session_id} written to {logdir}")
    return notes


def export_sessions(sessions, fmt: str, out_dir, tensorboard: bool = True) -> tuple[list[Path], list[str]]:
    """Export every session; returns (session folders written, notes for the user)."""
    folders = [export_session(s, fmt, out_dir) for s in sessions]
    names = [f.name for f in folders]
    notes = []
    if len(set(names)) < len(names):
        notes.append("two sessions map to the same export folder; the later one overwrote the earlier")
    if tensorboard:
        notes += export_tensorboard(sessions, out_dir)
    return folders, notes
