"""A cache of parsed sessions: each session's frames as Parquet, its meta as JSON.

Kept in ``$LOGKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/logkit``, else ``~/.cache/logkit``
(never beside the logs: log folders are often read-only or shared). An entry is keyed on the
session's files (real paths) and valid while every file keeps its size and mtime_ns, and
while the readers' code is the same (it is hashed into the key); anything else rebuilds it. A cache that cannot be
written or read is skipped silently: it only ever saves time.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import orjson

from logkit.ingest.discover import SessionSource
from logkit.ingest.session import FRAME_DTYPES, Session
from logkit.schema import SCHEMA_VERSION

__all__ = ["cache_dir", "fingerprint", "load_cached", "store", "CACHE_FORMAT"]

CACHE_FORMAT = 2  # the layout of a cache entry (the readers' code is hashed in as well)
_FRAMES = tuple(FRAME_DTYPES)


def cache_dir() -> Path:
    env = os.environ.get("LOGKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "logkit"


def fingerprint(source: SessionSource) -> list[list] | None:
    """(real path, size, mtime_ns) of every file of the session; None if one cannot be stat'ed."""
    out = []
    for path in source.files:
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append([os.path.realpath(path), st.st_size, st.st_mtime_ns])
    return out


@functools.lru_cache(maxsize=1)
def _readers_fingerprint() -> str:
    """A hash of the code that turns files into frames: a cache written by other readers (an
    upgrade, a checkout of another commit) is never taken for this code's output."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*root.rglob("*.py"), *(root.parent / "schema").rglob("*.py")]):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _entry(source: SessionSource) -> Path:
    ident = orjson.dumps([CACHE_FORMAT, SCHEMA_VERSION, _readers_fingerprint(), source.session_id, source.kind,
                          sorted(os.path.realpath(p) for p in source.files)])
    return cache_dir() / "sessions" / hashlib.sha256(ident).hexdigest()[:32]


def load_cached(source: SessionSource) -> Session | None:
    """The cached session, or None when there is none or a file changed since it was written."""
    entry = _entry(source)
    try:
        stamp = orjson.loads((entry / "stamp.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if stamp != fingerprint(source):
        return None
    try:
        import pyarrow.parquet as pq

        meta = orjson.loads((entry / "meta.json").read_bytes())
        frames = {name: _restore(name, pq.read_table(entry / f"{name}.parquet")) for name in _FRAMES}
    except Exception:  # noqa: BLE001 - a damaged entry is rebuilt, never fatal
        return None
    meta["cache"] = str(entry)
    return Session(meta=meta, **frames)


def _restore(name: str, table):
    import pandas as pd
    import pyarrow as pa

    from logkit.ingest.frame_builder import arrow_frame

    dtypes = FRAME_DTYPES[name]
    extras = [c for c in table.column_names if c not in dtypes and not c.startswith("__")]
    frame = arrow_frame(name, [table.select([c for c in dtypes if c in table.column_names])])
    if not extras:
        return frame
    more = table.select(extras).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    for col in extras:
        data = more[col]
        if data.dtype != object and pd.api.types.is_string_dtype(data.dtype):
            data = data.astype("object")  # extra text is object with None, as make_frame gives it
            data = data.where(data.notna(), None)
        elif str(data.dtype) == "Int64":
            # extra columns were built by pandas' inference: int64, or float64 where some are NaN
            data = data.astype("float64") if data.isna().any() else data.astype("int64")
        elif data.dtype == object and data.isna().any():
            data = data.where(data.notna(), None)
        frame[col] = data
    return frame


def store(source: SessionSource, session: Session) -> bool:
    """Write ``session`` to the cache (atomically: a reader never sees half an entry)."""
    stamp = fingerprint(source)
    if stamp is None:
        return False
    entry = _entry(source)
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        for name in _FRAMES:
            getattr(session, name).to_parquet(tmp / f"{name}.parquet", index=False)
        meta = {k: v for k, v in session.meta.items() if k != "cache"}
        (tmp / "meta.json").write_bytes(orjson.dumps(meta, default=str, option=orjson.OPT_SERIALIZE_NUMPY))
        (tmp / "stamp.json").write_bytes(orjson.dumps(stamp))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return True
    except Exception:  # noqa: BLE001 - an unwritable cache (read-only home, odd column) only costs time
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False
