"""More sessions than the console lists (``compare.LISTED``): the group is summarised (how many of each
status and world size), the sessions that matter are listed in full (the one that failed, the slowest,
the fastest), the rest counted; the JSON keeps every session. Sessions made of a real 2-rank run's
records (``tests/fuzz/hostile``), one edited to fail and one to take twice as long."""

from __future__ import annotations

import json
import re

from logkit.analysis import analyze
from logkit.report.console import render_compare
from logkit.report.console.compare import LISTED
from logkit.report.json_report import analysis_document
from logkit.run.load import load_sessions
from tests.fuzz.hostile import _many_ranks

SESSIONS = LISTED + 4
FAILED, SLOW = "training_20270101_000005", "training_20270101_000007"


def _edit_end(folder, sid: str, **changes) -> None:
    for path in (folder / sid).glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        records = [{**r, **changes} if r["type"] == "session_end" else r for r in records]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_group_past_the_listed_count_is_summarised_with_the_sessions_that_matter(tmp_path):
    _many_ranks(2 * SESSIONS, SESSIONS)(tmp_path)
    _edit_end(tmp_path, FAILED, status="failed")
    # the real run's session_end says 2.316686 s, 2.224404 s of training: twice as long here
    _edit_end(tmp_path, SLOW, duration_s=2 * 2.316686, training_time_s=2 * 2.224404)
    analysis = analyze(load_sessions(tmp_path))
    text = render_compare(analysis)
    assert f"SESSIONS ({SESSIONS}):" in text
    assert f"  {SESSIONS} sessions: {SESSIONS - 1} completed, 1 failed" in text
    assert f"  World sizes: 2 ranks ({SESSIONS} sessions)" in text
    listed = re.findall(r"^  \[(.*)\]\n  Session: (\S+)", text, re.M)
    tags = {sid: tag for tag, sid in listed}
    assert "failed" in tags[FAILED]
    assert tags[SLOW].startswith("among the slowest")
    assert sum("among the fastest" in t for t in tags.values()) == 3
    assert len(listed) < SESSIONS
    assert f"... and {SESSIONS - len(listed)} more sessions not listed" in text
    assert text.count("\nvs training_") <= LISTED  # the comparisons too
    assert len(analysis_document(analysis, ["compare"])["sessions"]) == SESSIONS


def test_a_group_within_the_listed_count_lists_every_session(tmp_path):
    _many_ranks(2 * LISTED, LISTED)(tmp_path)
    text = render_compare(analyze(load_sessions(tmp_path)))
    assert text.count("  Session: training_") == LISTED
    assert "not listed" not in text
