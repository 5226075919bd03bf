"""One cache for what reading costs, two kinds of entry made the same way:

- a parsed **session** (``load_cached`` / ``store``): its frames as Parquet, meta and dtypes as JSON
  (``ingest.store``), keyed on the session's files;
- an engine map's **rank partial** (``load_rank`` / ``store_rank``): one rank stream's frame tables
  (Arrow IPC), its comm reductions, and one JSON document (the stream's whole records and diagnostics):
  keyed on the stream and the world size its comm records assumed. No pickle.

Kept in ``$LOGKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/logkit``, else ``~/.cache/logkit`` (never beside
the logs: log folders are often read-only or shared). An entry is valid while every file keeps its
size and mtime_ns, and while the code that made it is the same: the key holds a hash of the sources
of the modules the maker imports, followed through their imports (``code_key``), so a module split or
renamed changes the key with no list to keep. Every entry is written to a temporary folder and
renamed into place (a reader never sees half an entry). A cache that cannot be written or read only
costs time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from logkit.ingest.safe_io import display
from logkit.schema import SCHEMA_VERSION

if TYPE_CHECKING:  # imported where used: the answers' cache (``run.answers``) runs without pandas
    from logkit.ingest.discover import SessionSource
    from logkit.ingest.session import Session

FORMAT = 5  # the layout of an entry (the code that makes it is hashed in as well)
_PACKAGE = Path(__file__).resolve().parents[1]  # logkit/


def cache_dir() -> Path:
    env = os.environ.get("LOGKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "logkit"


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    for path in (_PACKAGE.joinpath(*parts).with_suffix(".py"), _PACKAGE.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


# ``from logkit.x import a, (b, c)`` and ``import logkit.x, logkit.y`` statements, at any indentation (lazy
# imports count) or after a semicolon, and any quoted "logkit.x.y" (a module named for importlib, as the
# lazy table of readers does).
# A regular expression, not the syntax tree: parsing every module cost 0.3-0.5 s per process, on every run.
# It finds every import the tree has (a test checks it on the whole package); anything more it finds (an
# import written in a docstring) only makes the key cover one more module.
_IMPORT = re.compile(rb"(?:^|;)[ \t]*(?:from[ \t]+(logkit(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n;]*)"
                     rb"|import[ \t]+([^\n;]*))", re.M)
_QUOTED = re.compile(rb"""["'](logkit(?:\.\w+)+)["']""")
_COMMENT = re.compile(rb"#[^\n]*")


def _imports(path: Path, source: bytes | None = None) -> set[str]:
    """The logkit modules ``path`` imports (at any depth: lazy imports count), and the ones it names."""
    source = path.read_bytes() if source is None else source
    found = {m.decode() for m in _QUOTED.findall(source)}
    for module, names, plain in _IMPORT.findall(source):
        if module:
            found.add(module.decode())
            names = _COMMENT.sub(b"", names).strip(b"()")
            found.update(f"{module.decode()}.{n.split()[0].decode()}" for n in names.split(b",") if n.strip())
        else:
            found.update(n.split()[0].decode() for n in _COMMENT.sub(b"", plain).split(b",") if n.strip())
    return {m for m in found if m.startswith("logkit.")}


_SOURCES: dict[Path, tuple[tuple[int, int], bytes, set[str]]] = {}  # path -> (size, mtime), hash, imports


def _source(path: Path) -> tuple[bytes, set[str]]:
    """A module's hash and imports, read once per process while its size and mtime stay (the keys of one
    run share most modules)."""
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    known = _SOURCES.get(path)
    if known is None or known[0] != stamp:
        source = path.read_bytes()
        known = _SOURCES[path] = (stamp, hashlib.sha256(source).digest(), _imports(path, source))
    return known[1], known[2]


@functools.lru_cache(maxsize=8)
def code_key(*roots: str) -> str:
    """A hash of the sources of ``roots`` (module names) and of every logkit module they import, followed
    through the imports: what an entry's maker runs."""
    seen: dict[str, bytes] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name], imports = _source(path)
        todo.extend(imports - set(seen))
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(name.encode())
        digest.update(seen[name])
    return digest.hexdigest()


def stamps(paths) -> list[list] | None:
    """(real path, size, mtime_ns) of every file; None if one cannot be stat'ed."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append([display(os.path.realpath(path)), st.st_size, st.st_mtime_ns])
    return out


def _entry(kind: str, ident: list) -> Path:
    key = [FORMAT, SCHEMA_VERSION, *ident]
    try:
        text = orjson.dumps(key)
    except TypeError:  # a path that is not UTF-8 (its bytes as surrogates): escaped, one key per path
        text = json.dumps(key, ensure_ascii=True, default=str).encode()
    return cache_dir() / kind / hashlib.sha256(text).hexdigest()[:32]


def _write(entry: Path, stamp: list | None, fill: Callable[[Path], None]) -> bool:
    """``fill(folder)`` into a temporary folder beside ``entry``, its stamp added, then renamed into place."""
    if stamp is None:
        return False
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        fill(tmp)
        (tmp / "stamp.json").write_bytes(orjson.dumps(stamp))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return True
    except Exception:  # noqa: BLE001 - an unwritable cache (read-only home, odd column) only costs time
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False


def _read(entry: Path, stamp: list | None, read: Callable[[Path], object]):
    """``read(entry)`` when the entry's stamp is ``stamp``; None when there is none, a file changed, or
    the entry is damaged."""
    try:
        if stamp is None or orjson.loads((entry / "stamp.json").read_bytes()) != stamp:
            return None
        return read(entry)
    except Exception:  # noqa: BLE001 - a damaged or partial entry is rebuilt, never fatal
        return None


# --- sessions ---------------------------------------------------------------------------------------

def _session_entry(source: SessionSource) -> Path:
    return _entry("sessions", [code_key("logkit.ingest.load"), source.session_id, source.kind,
                               sorted(os.path.realpath(p) for p in source.files)])


def load_cached(source: SessionSource) -> Session | None:
    """The cached session, or None when there is none or a file changed since it was written."""
    from logkit.ingest.store import read_session

    entry = _session_entry(source)
    session = _read(entry, stamps(source.files), read_session)
    if session is not None:
        session.meta.cache = str(entry)
    return session


def store(source: SessionSource, session: Session) -> bool:
    """Write ``session`` to the cache."""
    from logkit.ingest.store import write_session

    meta = {k: v for k, v in session.meta.items() if k != "cache"}
    return _write(_session_entry(source), stamps(source.files),
                  lambda folder: write_session(session, folder, "parquet", meta=meta))


# --- rank partials ----------------------------------------------------------------------------------

def _rank_entry(path: str, rank: int, world_size) -> Path:
    return _entry("ranks", [code_key("logkit.run.engine"), os.path.realpath(path), rank, world_size])


def load_rank(path: str, rank: int, world_size, read: Callable[[Path], object]):
    """The cached partial result of the rank stream ``path`` as ``read(folder)`` makes it, or None."""
    return _read(_rank_entry(path, rank, world_size), stamps([path]), read)


def store_rank(path: str, rank: int, world_size, fill: Callable[[Path], None]) -> bool:
    """Write the partial result of the rank stream ``path`` (``fill(folder)`` writes its files)."""
    return _write(_rank_entry(path, rank, world_size), stamps([path]), fill)

