"""The engine (each rank's stream read in small chunks, its comm records reduced chunk by chunk) gives
``analyze_logs DIR --json --performance --communication --compare`` exactly as the sessions read whole
do: the same CLI and renderers, only the reading differs (``logkit.ingest.load_sessions``, every record
in a frame, for the whole-read path). On every folder of ``sample_logs/`` at once and on a generated
fleet whose records name no group size (busbw waits for the world size) and with ranks without step
records (their sync share is merged centrally)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from benchmarks.fleet import write_fleet
from logkit.analysis.kernels import comm_reduce
from logkit.cli import analyze_logs
from logkit.ingest import jsonl_arrow
from logkit.run import load
from logkit.run.engine import Loaded
from logkit.run.load import load_sessions as whole_sessions
from tests.support.launch import REPO

ARGS = ("--no-cache", "--json", "--performance", "--communication", "--compare")


def _whole(root) -> Loaded:
    sessions = whole_sessions(root, cache=False)
    return Loaded(sessions, [None] * len(sessions))


def _json(folder) -> dict:
    r = CliRunner().invoke(analyze_logs, [str(folder), *ARGS], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _both(folder, monkeypatch) -> tuple[dict, dict, int]:
    """(engine's document, whole-read document, comm chunks the engine reduced)."""
    chunks = []
    real = comm_reduce.CommReducer.add
    monkeypatch.setattr(comm_reduce.CommReducer, "add", lambda self, t: chunks.append(t.num_rows) or real(self, t))
    monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 4096)  # many chunks a stream, lines cut at their edges
    mapped = _json(folder)
    monkeypatch.setattr(load, "load_for_analysis", lambda root, **kw: _whole(root))
    whole = _json(folder)
    return mapped, whole, len(chunks)


def test_sample_logs_give_the_whole_read_figures(monkeypatch):
    mapped, whole, chunks = _both(REPO / "sample_logs", monkeypatch)
    assert chunks > 20
    assert len(whole["communication"]) >= 6  # why_slow's, qlora's and the real runs' ranks
    assert mapped == whole


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(root, 6, steps=30, buckets=5)
    write_fleet(root, 4, steps=25, buckets=3, sid="training_20270101_000500", keep_world_size=False,
                stepless_ranks=(0, 2))
    return root


def test_a_generated_fleet_gives_the_whole_read_figures(fleet, monkeypatch):
    mapped, whole, chunks = _both(fleet, monkeypatch)
    assert chunks >= 10 * 10  # every stream in several chunks
    rows = {(r["session_id"], r["rank"]): r for r in whole["communication"]}
    assert len(rows) == 10
    assert rows[("training_20270101_000500", 1)]["busbw_from"].endswith("(n = 4)")
    assert rows[("training_20270101_000500", 0)]["matched_steps"] == 25  # rank 1's step times
    assert mapped == whole


def test_the_public_load_sessions_keeps_every_record_and_the_engine_gives_its_figures(fleet):
    """``logkit.load_sessions``: every record in ``session.comm``, one Session shape; the engine's read
    (``load_for_analysis``: comm records reduced per rank, as analyze_logs reads) gives the same figures."""
    import logkit

    loaded = load.load_for_analysis(fleet)
    whole = logkit.load_sessions(fleet)
    assert [s.session_id for s in loaded.sessions] == [s.session_id for s in whole]
    for m, parts, w in zip(loaded.sessions, loaded.comm_parts, whole, strict=True):
        assert m.comm.empty and len(parts) == len(w.meta["ranks_found"]) and len(w.comm) > 0
        pd.testing.assert_frame_equal(m.steps, w.steps)
    result = logkit.analyze(loaded.sessions, comm_parts=loaded.comm_parts)
    reference = logkit.analyze(whole)
    pd.testing.assert_frame_equal(result.communication, reference.communication, check_exact=True)
    assert int(result.communication["count"].sum()) == sum(len(w.comm) for w in whole)
