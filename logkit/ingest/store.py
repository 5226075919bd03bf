"""A ``Session`` on disk and back: each frame as a Parquet (or CSV) file, and ``meta.json`` with
the session's meta and each frame's column dtypes, so that reading it back gives the frames
with the dtypes they had. The Parquet cache of parsed sessions (``cache``) and the export of
frames (``logkit.report.export``) both go through here.

Layout of a session folder: ``<frame>.parquet`` (or ``.csv``) for every frame of ``FRAMES``,
and ``meta.json``: ``{"session_id", "format", "frames": {frame: {column: dtype}},
"json_columns": {frame: [column]}, "categories": {frame: {column: {values, dtype, ordered}}},
"meta"}``. A column the format cannot hold as it is (lists or dicts; for CSV also values
that are not text, and empty text, which CSV cannot tell from missing) is written as JSON
text and read back from it.

    >>> from logkit.ingest.store import export_session, read_export     # doctest: +SKIP
    >>> read_export(export_session(session, "csv", "out"))["steps"]       # doctest: +SKIP
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pandas as pd

from logkit.ingest.session import Session
from logkit.schema.frames import FRAME_NAMES

FRAMES: tuple[str, ...] = FRAME_NAMES
FORMATS: tuple[str, ...] = ("parquet", "csv")
_TEXT = ("object", "str", "string")


def safe_name(session_id) -> str:
    """A folder name for ``session_id``: characters outside [A-Za-z0-9._-] become "_"
    (``v1/multi_gpu`` -> ``v1_multi_gpu``)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(session_id or "session"))
    return "_" + name if name in (".", "..") else name


def _json_text(v) -> str:
    return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def _needs_json(series: pd.Series, fmt: str) -> bool:
    values = series.dropna()
    if values.empty:
        return False
    if values.map(lambda v: isinstance(v, (list, tuple, dict))).any():
        return True
    if fmt == "csv":
        return bool(values.map(lambda v: not isinstance(v, str) or v == "").any())
    return False


def _prepare(frame: pd.DataFrame, fmt: str) -> tuple[pd.DataFrame, list[str]]:
    """The frame as written, and the names of its columns written as JSON text (None stays missing)."""
    # Parquet holds categories as they are; CSV only text.
    json_cols = [str(c) for c in frame.columns
                 if (frame[c].dtype == object or (fmt == "csv" and str(frame[c].dtype) == "category"))
                 and _needs_json(frame[c].astype("object"), fmt)]
    if not json_cols:
        return frame, []
    frame = frame.reset_index(drop=True).copy()
    for col in json_cols:
        frame[col] = pd.Series([None if v is None else _json_text(v) for v in frame[col]], index=frame.index,
                               dtype="object")
    return frame, json_cols


def write_session(session: Session, folder: str | Path, fmt: str = "parquet", meta: dict | None = None) -> Path:
    """Write ``session``'s frames and meta (``meta``: instead of the session's) into ``folder``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtypes, json_columns, categories = {}, {}, {}
    for name in FRAMES:
        original = getattr(session, name)
        dtypes[name] = {str(c): str(t) for c, t in original.dtypes.items()}
        categories[name] = {str(c): {"values": t.categories.tolist(), "dtype": str(t.categories.dtype),
                                     "ordered": bool(t.ordered)}
                            for c, t in original.dtypes.items() if str(t) == "category"}
        frame, json_columns[name] = _prepare(original, fmt)
        path = folder / f"{name}.{fmt}"
        if fmt == "parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
    doc = {"session_id": session.session_id, "format": fmt, "frames": dtypes, "json_columns": json_columns,
           "categories": categories, "meta": session.meta if meta is None else meta}
    (folder / "meta.json").write_bytes(orjson.dumps(
        doc, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    return folder


def _text(values: pd.Series, from_json: bool) -> pd.Series:
    """``values`` as objects, None where missing (and decoded from JSON text when ``from_json``)."""
    values = pd.Series(values.to_numpy(dtype=object, na_value=None), index=values.index, dtype="object")
    if from_json:
        values = pd.Series([None if v is None else orjson.loads(v) for v in values], index=values.index,
                           dtype="object")
    return values


def _restore(frame: pd.DataFrame, dtypes: dict, json_cols: set, cats: dict, csv: bool) -> pd.DataFrame:
    """The frame's columns with the dtypes they were written with (``csv``: read from CSV, where a
    missing text is NaN; Parquet gives it back as None)."""
    for col, dtype in dtypes.items():
        if col not in frame:
            continue
        data = frame[col]
        if dtype == "category" and col in cats:
            c = cats[col]
            kind = pd.CategoricalDtype(pd.Index(c["values"], dtype=c["dtype"]), ordered=c["ordered"])
            if col in json_cols or not (data.dtype == kind and data.cat.categories.dtype == kind.categories.dtype):
                frame[col] = _text(data, col in json_cols).astype(kind)
        elif dtype in _TEXT:
            if col in json_cols or str(data.dtype) != dtype or (csv and dtype == "object"):
                values = _text(data, col in json_cols)
                # text columns come back with the dtype they had (object, or pandas' str/string)
                frame[col] = values if dtype == "object" else values.astype(dtype)
        elif str(data.dtype) != dtype:
            frame[col] = data.astype(dtype)
    return frame


def read_export(folder: str | Path) -> dict:
    """One session folder read back: ``{"meta": {...}, "session_id": ..., "steps": DataFrame, ...}``
    with the dtypes the frames had."""
    folder = Path(folder)
    doc = orjson.loads((folder / "meta.json").read_bytes())
    out = {"meta": doc["meta"], "session_id": doc["session_id"]}
    for name, dtypes in doc["frames"].items():
        path = folder / f"{name}.{doc['format']}"
        if doc["format"] == "parquet":
            frame = pd.read_parquet(path)
        else:
            text_cols = [c for c, t in dtypes.items() if t in (*_TEXT, "category")]
            frame = pd.read_csv(path, dtype={c: "object" for c in text_cols})
        json_cols = set(doc.get("json_columns", {}).get(name, []))
        out[name] = _restore(frame, dtypes, json_cols, doc.get("categories", {}).get(name, {}), doc["format"] == "csv")
    return out


def read_session(folder: str | Path) -> Session:
    """A session written by ``write_session``."""
    found = read_export(folder)
    return Session(meta=found["meta"], **{name: found[name] for name in FRAMES if name in found})


def export_session(session: Session, fmt: str, out_dir: str | Path, name: str | None = None) -> Path:
    """Write one session under ``out_dir/<name>`` (by default ``safe_name`` of its id); returns that folder."""
    return write_session(session, Path(out_dir) / (name or safe_name(session.session_id)), fmt)
