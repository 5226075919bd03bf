"""The fuzz suite's bounded share, in the fast suite (seconds): folders drawn from every format's strategy
(``tests.fuzz.strategies``) and every hostile folder at its small scale (``tests.fuzz.hostile``), each
through what ``analyze_logs`` does (``tests.fuzz.check.examine``): never an exception, never a wait past
the time limit, never an impossible fact, and for a hostile folder a diagnostic that names what it met.
``make fuzz`` runs the same at full scale, 10,000 inputs and more."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from logkit.cli import analyze_logs
from tests.fuzz.check import examine, time_limit, write_files
from tests.fuzz.hostile import Growing, corpus, limits_for
from tests.fuzz.strategies import GENERATORS

EXAMPLES = 25  # per generator: ~1-2 s each


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_folders_drawn_from_the_format_strategies_are_read(generator):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(files=GENERATORS[generator])
    def check(files):
        folder = Path(tempfile.mkdtemp(prefix="logkit-fuzz-"))
        try:
            write_files(folder, files)
            with time_limit(30):
                examine(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    check()


@pytest.mark.parametrize("name", sorted(corpus("fast")))
def test_a_hostile_folder_is_answered_with_what_it_met(name, tmp_path):
    made = corpus("fast")[name](tmp_path)
    growing = made if isinstance(made, Growing) else None
    if growing is not None:
        growing.start()
    try:
        with limits_for("fast"), time_limit(30):
            said = examine(tmp_path)["said"]
    finally:
        if growing is not None:
            growing.end()
    words = () if made is None or growing is not None else (made,) if isinstance(made, str) else made
    assert not words or any(w in s for w in words for s in said), said[:10]


def test_a_folder_of_only_a_fifo_exits_2_saying_so(tmp_path):
    import os

    os.mkfifo(tmp_path / "train_rank0.jsonl")
    with time_limit(30):
        result = CliRunner().invoke(analyze_logs, [str(tmp_path), "--no-cache"])
    assert result.exit_code == 2
    assert "FIFO" in result.output and "no logkit sessions found" in result.output


def test_what_was_readable_is_analysed_and_the_rest_noted(tmp_path):
    corpus("fast")["fifo_rank_stream"](tmp_path)
    with time_limit(30):
        result = CliRunner().invoke(analyze_logs, [str(tmp_path), "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    assert "not read: a FIFO" in result.output
