"""A real 3-rank accelerate launch on CPU (gloo): the all-reduce bus factor 2(n-1)/n is 4/3 here.

On 2 ranks the factor is 1, so busbw equals algbw and a dropped factor goes unseen; on 3 ranks
every communication record's busbw must be 4/3 of its algbw, and algbw must be the record's own
bytes over its own duration. The text logs and the summary must say the same."""

from __future__ import annotations

import orjson
import pytest

from logkit.schema import COMMUNICATION, PROCESS_LINE, SessionFiles
from tests.support.launch import accelerate_launch, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

RANKS, STEPS = 3, 4
BUS_FACTOR = 2 * (RANKS - 1) / RANKS  # nccl-tests' all-reduce factor, 4/3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("three_ranks")
    accelerate_launch("examples/train_accelerate_loop.py", [
        "--log-dir", str(tmp / "logs"), "--steps", str(STEPS), "--batch-size", "4", "--hidden", "1024",
        "--log-setting", "comm_log_interval=1"], RANKS, cwd=tmp)
    (session,) = session_dirs(tmp / "logs")
    files = SessionFiles(session.name)
    return session, files, {rank: read_jsonl(session / files.rank_jsonl(rank)) for rank in range(RANKS)}


def _algbw(record) -> float:
    # MB/s (10^6 bytes) from the record's own size and duration
    return record["size_bytes"] / 1e6 / (record["duration_ms"] / 1e3)


def test_busbw_is_four_thirds_of_algbw_on_three_ranks(run):
    _, _, streams = run
    assert BUS_FACTOR == pytest.approx(4 / 3)
    for rank, records in streams.items():
        comm = [r for r in records if r["type"] == "communication"]
        assert sorted({r["step"] for r in comm}) == list(range(1, STEPS + 1)), rank
        for r in comm:
            assert (r["op"], r["group_size"], r["world_size"]) == ("gradient_sync", RANKS, RANKS)
            # both written to 4 decimals, the duration to the nanosecond
            assert r["algbw_mb_s"] == pytest.approx(_algbw(r), rel=1e-5, abs=5.1e-5)
            assert r["busbw_mb_s"] == pytest.approx(_algbw(r) * BUS_FACTOR, rel=1e-5, abs=5.1e-5)
            assert r["busbw_mb_s"] != pytest.approx(r["algbw_mb_s"], rel=0.1)  # not the 2-rank factor of 1
        assert records[-1]["status"] == "completed"


def test_summary_and_text_lines_agree_with_the_records(run):
    session, files, streams = run
    comm = [r for r in streams[0] if r["type"] == "communication"]
    summary = orjson.loads((session / files.summary_json).read_bytes())
    sync = summary["communication"]["gradient_sync"]
    mean_algbw = sum(_algbw(r) for r in comm) / len(comm)
    assert sync["count"] == len(comm) and summary["world_size"] == RANKS
    assert sync["avg_algbw_mb_s"] == pytest.approx(mean_algbw, rel=1e-5, abs=5.1e-5)
    assert sync["avg_busbw_mb_s"] == pytest.approx(mean_algbw * BUS_FACTOR, rel=1e-5, abs=5.1e-5)
    text = (session / files.summary_txt).read_text()
    assert f"busbw {sync['avg_busbw_mb_s']:.2f}MB/s" in text and f"algbw {sync['avg_algbw_mb_s']:.2f}MB/s" in text
    # multigpu.log's Communication lines: algbw ("Bandwidth"), each from its record
    lines = [COMMUNICATION.parse(p["message"]) for p in map(PROCESS_LINE.parse,
                                                            (session / files.multigpu_log).read_text().splitlines())
             if p and COMMUNICATION.parse(p["message"])]
    # every sync has its line (comm_log_interval=1), in the records' order
    assert len(lines) == len(comm)
    for line, record in zip(lines, comm, strict=True):
        assert line["bandwidth_mb_s"] == pytest.approx(_algbw(record), abs=0.006)
        assert line["size_mb"] == pytest.approx(record["size_bytes"] / 1e6, abs=0.006)
