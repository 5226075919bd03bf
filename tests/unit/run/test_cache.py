"""The Parquet cache of parsed sessions, the fast JSONL path against the per-line reader, and the
progress bar (a folder larger than memory: tests/unit/analysis/test_engine_big_folder.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import logkit
from logkit.ingest import load as load_module
from logkit.run import engine
from logkit.run.load import load_sessions  # the ingest layer's own reader: every record, the session cache
from tests.support.launch import REPO, analyze_logs, fixture_session
from tests.support.synth import append_bytes, rank_file, write_session

FRAMES = ("steps", "comm", "perf", "gpu", "evals", "events", "diagnostics")
SAMPLES = REPO / "sample_logs"


def assert_same(a, b):
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_dtype=True)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def count_builds(monkeypatch):
    calls = []
    real = load_module.build_session

    def counting(source, **kwargs):
        calls.append(source.session_id)
        return real(source, **kwargs)

    monkeypatch.setattr(engine, "build_session", counting)  # where the run floor calls it
    return calls


def test_second_load_reads_the_cache_and_a_changed_file_invalidates_it(tmp_path, cache_dir, count_builds):
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLES / "qlora_tiny_cpu" / "logs", logs)
    shutil.copytree(SAMPLES / "console", logs / "console")
    first = load_sessions(logs, cache=True)
    assert len(count_builds) == len(first) == 5
    second = load_sessions(logs, cache=True)
    assert len(count_builds) == 5  # nothing parsed again
    for a, b in zip(first, second, strict=True):
        assert_same(a, b)
        assert {k: v for k, v in a.meta.items() if k != "cache"} == {k: v for k, v in b.meta.items() if k != "cache"}
    sid = first[1].session_id
    stream = logs / sid / f"{sid}_rank1.jsonl"
    append_bytes(stream, b'{"type": "training_ste')  # the file changes: size and mtime
    third = load_sessions(logs, cache=True)
    assert count_builds[5:] == [sid]  # only that session is parsed again
    assert len(third[1].diagnostics) == 1


def test_no_cache_means_no_cache_files(tmp_path, cache_dir):
    load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs")
    assert not cache_dir.exists()


@pytest.mark.parametrize("folder", ["qlora_tiny_cpu 2 ranks", "synth"])
def test_fast_jsonl_path_equals_the_per_line_reader(tmp_path, monkeypatch, folder):
    path = write_session(tmp_path, "s", world_size=2, gpu_count=2, step_times=[0.3] * 6) if folder == "synth" \
        else fixture_session(2)
    fast = logkit.load_session(path)
    monkeypatch.setattr(load_module, "FAST_JSONL", False)
    slow = logkit.load_session(path)
    assert_same(fast, slow)
    assert fast.meta == slow.meta


def test_a_stream_the_fast_path_cannot_take_falls_back_per_file(tmp_path):
    folder = write_session(tmp_path, "mix", world_size=2, step_times=[0.5] * 3, summary=False)
    append_bytes(rank_file(folder, "mix", 1), b'{"type": "performance", "step": "three"}\n\n')
    s = logkit.load_session(folder)
    assert len(s.steps) == 6 and list(s.steps["rank"]) == [0, 0, 0, 1, 1, 1]
    assert list(s.perf["step"].isna()) == [False, False, True]  # the odd value is NA, not an error


def test_progress_bar_on_request(tmp_path, capsys):
    load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs", progress=True)
    assert "reading logs" in capsys.readouterr().err
    proc = analyze_logs("--progress", "--no-cache", str(SAMPLES / "qlora_tiny_cpu" / "logs"))
    assert proc.returncode == 0 and "reading logs" in proc.stderr


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    from logkit.run.cache import cache_dir

    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("LOGKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "logkit"
    assert os.fspath(cache_dir())


def test_fast_jsonl_path_in_small_chunks_equals_the_per_line_reader(tmp_path, monkeypatch):
    from logkit.ingest import jsonl_arrow

    path = write_session(tmp_path, "s", world_size=2, gpu_count=2, step_times=[0.3] * 40)
    monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 1000)  # many chunks, lines cut at their edges
    fast = logkit.load_session(path)
    monkeypatch.setattr(load_module, "FAST_JSONL", False)
    slow = logkit.load_session(path)
    assert_same(fast, slow)
    assert fast.meta == slow.meta


def test_a_stream_refused_after_some_chunks_leaves_no_rows_behind(tmp_path, monkeypatch):
    """Rank 1's stream turns out unreadable by the fast path only in a late chunk: the rows its
    earlier chunks gave are taken back, and the per-line reader reads it (with a diagnostic)."""
    from logkit.ingest import jsonl_arrow

    path = write_session(tmp_path, "s", world_size=2, gpu_count=2, step_times=[0.3] * 40)
    append_bytes(rank_file(path, "s", 1), b'{"type": "training_step_complete", "step": 41, "rank": 1, "elapsed\n')
    monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 2000)
    fast = logkit.load_session(path)
    monkeypatch.setattr(load_module, "FAST_JSONL", False)
    slow = logkit.load_session(path)
    assert_same(fast, slow)
    assert (fast.steps["rank"] == 1).sum() == 40 and (fast.steps["rank"] == 0).sum() == 40
    assert fast.diagnostics["line"].notna().all() and len(fast.diagnostics) == 1


# An entry is valid while every file keeps its size and its mtime and the readers' code is the
# same: each of the three alone must rebuild it (a key on one of them would hand back a session
# parsed from other bytes or by other code).


@pytest.fixture
def one_session(tmp_path, cache_dir, count_builds):
    """A 2-rank session read once through the cache: (its rank-0 stream, the first session)."""
    folder = write_session(tmp_path / "logs", "s", world_size=2, step_times=[0.5] * 4)
    (first,) = load_sessions(folder.parent, cache=True)
    assert count_builds == ["s"]
    return rank_file(folder, "s", 0), first


def reload(path):
    (session,) = load_sessions(path.parent.parent, cache=True)
    return session


def first_loss(session):
    rank0 = session.steps[session.steps["rank"] == 0]
    return float(rank0.loc[rank0["step"] == 1, "loss"].iloc[0])


def test_cache_reused_while_nothing_changed(one_session, count_builds):
    stream, first = one_session
    again = reload(stream)
    assert count_builds == ["s"] and "cache" in again.meta
    assert_same(first, again)


def test_cache_rebuilt_when_only_the_size_changed(one_session, count_builds):
    stream, _ = one_session
    st = stream.stat()
    append_bytes(stream, b'{"type": "training_ste\n')  # a cut line: one diagnostic once it is read
    os.utime(stream, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime as it was
    assert stream.stat().st_mtime_ns == st.st_mtime_ns and stream.stat().st_size == st.st_size + 23
    again = reload(stream)
    assert count_builds == ["s", "s"]
    assert len(again.diagnostics) == 1


def test_cache_rebuilt_when_only_the_mtime_changed(one_session, count_builds):
    stream, first = one_session
    data = stream.read_bytes()
    assert b'"loss":3.0,' in data and first_loss(first) == 3.0
    st = stream.stat()
    stream.write_bytes(data.replace(b'"loss":3.0,', b'"loss":4.0,', 1))  # an edit of the same length
    os.utime(stream, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert stream.stat().st_size == st.st_size
    assert first_loss(reload(stream)) == 4.0  # the value now in the file, not the cached one
    assert count_builds == ["s", "s"]
    os.utime(stream, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # touched: same bytes
    reload(stream)
    assert count_builds == ["s", "s", "s"]


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """The cache's code key pointed at a copy of the package (to change its code), and back after."""
    from logkit.run import cache

    copy = tmp_path / "code" / "logkit"
    shutil.copytree(Path(cache.__file__).resolve().parents[1], copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_PACKAGE", copy)
    cache.code_key.cache_clear()
    yield copy
    monkeypatch.undo()
    cache.code_key.cache_clear()  # the real code's key for the tests after


def test_cache_rebuilt_when_the_readers_code_changed(one_session, count_builds, package_copy):
    """The key hashes the code the session's maker imports, followed through its imports: point it at a
    copy of the package; a byte changed in a module it does not import keeps the entry, one changed in a
    reader it imports (through ``readers.READERS``) rebuilds it."""
    from logkit.run import cache

    stream, _ = one_session
    reload(stream)
    assert count_builds == ["s"]  # the same code, copied: the same entry
    for unrelated in (package_copy / "report" / "html.py", package_copy / "analysis" / "kernels" / "scaling.py"):
        unrelated.write_bytes(unrelated.read_bytes() + b"#")
    cache.code_key.cache_clear()
    reload(stream)
    assert count_builds == ["s"]
    reader = package_copy / "ingest" / "readers" / "nccl.py"
    reader.write_bytes(reader.read_bytes() + b"#")
    cache.code_key.cache_clear()
    reload(stream)
    assert count_builds == ["s", "s"]


def test_the_rank_entries_key_follows_the_reducers_code(package_copy):
    """A rank partial's key covers the comm reducer the engine imports (no list of files to keep)."""
    from logkit.run import cache

    before = cache.code_key("logkit.run.engine"), cache.code_key("logkit.ingest.load")
    reducer = package_copy / "analysis" / "kernels" / "comm_reduce.py"
    reducer.write_bytes(reducer.read_bytes() + b"#")
    cache.code_key.cache_clear()
    after = cache.code_key("logkit.run.engine"), cache.code_key("logkit.ingest.load")
    assert after[0] != before[0] and after[1] == before[1]


# Where an entry lives and what store says: read off the folder, not from cache's own helpers.


def _entries(cache_dir: Path) -> list[Path]:
    return sorted(p for p in (cache_dir / "sessions").iterdir())


def test_the_default_cache_dir_is_under_the_home_cache(monkeypatch, tmp_path):
    from logkit.run.cache import cache_dir

    monkeypatch.delenv("LOGKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "logkit"


def test_an_entry_is_one_folder_named_by_32_hex_digits_under_sessions(one_session, cache_dir):
    stream, first = one_session
    (entry,) = _entries(cache_dir)
    assert len(entry.name) == 32 and set(entry.name) <= set("0123456789abcdef")
    assert (entry / "stamp.json").is_file()
    again = reload(stream)
    assert again.meta["cache"] == str(entry)  # the session says which entry it came from
    assert "cache" not in first.meta  # a parsed session has none


def test_a_rebuilt_entry_replaces_the_old_one_and_is_read_next_time(one_session, cache_dir, count_builds):
    stream, _ = one_session
    (old,) = _entries(cache_dir)
    old_stamp = (old / "stamp.json").read_bytes()
    append_bytes(stream, b'{"type": "training_ste\n')
    reload(stream)
    assert count_builds == ["s", "s"]
    (entry,) = _entries(cache_dir)  # the same key, its content replaced: no second folder, no temp left
    assert entry == old and (entry / "stamp.json").read_bytes() != old_stamp
    assert len(reload(stream).diagnostics) == 1 and count_builds == ["s", "s"]  # the new entry is used


def test_store_says_whether_it_wrote_and_leaves_nothing_behind_when_it_cannot(tmp_path, cache_dir, monkeypatch):
    from logkit.ingest import store
    from logkit.ingest.discover import discover
    from logkit.ingest.load import build_session
    from logkit.run import cache

    folder = write_session(tmp_path / "logs", "s", world_size=1, step_times=[0.5] * 4)
    (source,) = discover(folder.parent)
    session = build_session(source)
    assert cache.store(source, session) is True
    assert cache.load_cached(source) is not None
    # the temporary folder is made beside the entries, whatever the system's temp dir is
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no_such_dir"))
    assert cache.store(source, session) is True
    monkeypatch.undo()
    # a write that fails: False, and no half-written folder left
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(cache_dir))

    def failing(*args, **kwargs):
        raise OSError("disk full")

    real = store.write_session
    monkeypatch.setattr(store, "write_session", failing)  # where the cache takes it from, when it writes
    shutil.rmtree(cache_dir)
    assert cache.store(source, session) is False
    assert list((cache_dir / "sessions").iterdir()) == []
    monkeypatch.setattr(store, "write_session", real)
    # a file that cannot be stat'ed: nothing to key the entry on
    rank_file(folder, "s", 0).unlink()
    assert cache.store(source, session) is False


def _parsed(tmp_path):
    from logkit.ingest.discover import discover
    from logkit.ingest.load import build_session

    folder = write_session(tmp_path / "logs", "s", world_size=1, step_times=[0.5] * 4)
    (source,) = discover(folder.parent)
    return source, build_session(source)


def test_store_returns_false_when_the_cache_is_cleared_while_it_writes(tmp_path, cache_dir, monkeypatch):
    """Another process empties the cache (``rm -rf ~/.cache/logkit``) during the write: our
    temporary folder is gone too, and cleaning it up must not raise into the analysis."""
    from logkit.ingest import store
    from logkit.run import cache

    source, session = _parsed(tmp_path)

    def cleared_meanwhile(*args, **kwargs):
        shutil.rmtree(cache_dir)
        raise FileNotFoundError("the folder was removed")

    monkeypatch.setattr(store, "write_session", cleared_meanwhile)  # where the cache takes it from
    assert cache.store(source, session) is False
    assert not cache_dir.exists()


def test_an_entry_keeps_the_sessions_meta_but_not_where_it_was_read_from(tmp_path, cache_dir):
    import orjson

    from logkit.run import cache

    source, session = _parsed(tmp_path)
    session.meta.update({"cache": "another/entry", "status_detail": "kept"})
    assert cache.store(source, session) is True
    (entry,) = _entries(cache_dir)
    stored = orjson.loads((entry / "meta.json").read_bytes())["meta"]
    assert stored["status_detail"] == "kept" and "cache" not in stored



def test_the_code_key_finds_every_import_the_syntax_tree_has():
    """``code_key`` reads imports with a regular expression (parsing every module cost 0.3-0.5 s a run): on
    every module of the package it finds at least the logkit modules ``ast`` finds, lazy imports and
    parenthesised, commented name lists included."""
    import ast

    from logkit.run import cache

    def by_tree(path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        return {m for m in found if m.startswith("logkit.")}

    modules = sorted((REPO / "logkit").rglob("*.py"))
    assert len(modules) > 50
    for path in modules:
        assert by_tree(path) <= cache._imports(path), path


def test_the_code_key_reads_odd_import_statements(tmp_path):
    from logkit.run import cache

    module = tmp_path / "m.py"
    module.write_text("import os, logkit.a as a, logkit.b\n"
                      "def f():\n"
                      "    from logkit.c import (x,  # a comment, y\n"
                      "                          z as w)\n"
                      "    from logkit.d import e; import logkit.f\n"
                      "LAZY = {'g': 'logkit.g.h'}\n")
    assert cache._imports(module) == {"logkit.a", "logkit.b", "logkit.c", "logkit.c.x", "logkit.c.z", "logkit.d",
                                      "logkit.d.e", "logkit.f", "logkit.g.h"}
