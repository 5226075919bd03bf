"""A cache of parsed sessions: each session as ``store`` writes it (frames as Parquet, meta and
dtypes as JSON), with the stamp of the files it was parsed from.

Kept in ``$LOGKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/logkit``, else ``~/.cache/logkit``
(never beside the logs: log folders are often read-only or shared). An entry is keyed on the
session's files (real paths) and valid while every file keeps its size and mtime_ns, and
while the readers' code is the same (the code of ``logkit.ingest`` and ``logkit.schema`` is
hashed into the key); anything else rebuilds it. A cache that cannot be written or read is
skipped silently: it only ever saves time.
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
from logkit.ingest.session import Session
from logkit.ingest.store import read_session, write_session
from logkit.schema import SCHEMA_VERSION

CACHE_FORMAT = 3  # the layout of a cache entry (the readers' code is hashed in as well)


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
        session = read_session(entry)
    except Exception:  # noqa: BLE001 - a damaged entry is rebuilt, never fatal
        return None
    session.meta["cache"] = str(entry)
    return session


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
        write_session(session, tmp, "parquet", meta={k: v for k, v in session.meta.items() if k != "cache"})
        (tmp / "stamp.json").write_bytes(orjson.dumps(stamp))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return True
    except Exception:  # noqa: BLE001 - an unwritable cache (read-only home, odd column) only costs time
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False
