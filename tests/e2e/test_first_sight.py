"""The first-sight scorer on entries of facts.json: a fact the file holds scores right, a fact it
does not hold (a loss the file never states, a framework for a bare watchdog paste) scores wrong,
and a key no check knows is reported, never skipped."""

from __future__ import annotations

import json

from tests.e2e.test_real_world import FACTS
from tests.support import first_sight

CRLF = "console/checkpoint_of_cpt_windows_crlf_cmd.log"  # a transformers run with a final summary
WATCHDOG = "console/basicsr_737_watchdog_pg_guid.log"  # five watchdog lines, no training record


def test_an_entry_whose_facts_hold_is_right():
    assert first_sight.score(FACTS[CRLF]) == []


def test_facts_the_file_does_not_hold_are_named():
    entry = {**FACTS[CRLF], "final_loss": -1.0}  # no loss in the file is negative
    assert first_sight.score(entry) == ["final_loss"]
    entry = {**FACTS[WATCHDOG], "framework": "trl", "mystery_key": 1}
    assert first_sight.score(entry) == ["framework", "mystery_key (no check)"]


def test_the_report_and_its_file(tmp_path, capsys):
    facts = tmp_path / "incoming.json"
    facts.write_text(json.dumps([{**FACTS[WATCHDOG], "added": 2, "framework": "trl"},
                                 {**FACTS[CRLF], "added": 1}]))
    out = tmp_path / "first_sight.json"
    assert first_sight.main([str(facts), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[:2] == ["1", "right"] and printed[1].split()[:2] == ["2", "wrong"]
    assert printed[-1].startswith("right: 1/2 (50%) of all files")
    scored = json.loads(out.read_text())
    assert scored[WATCHDOG]["failed"] == ["framework"] and scored[CRLF]["right"] is True
    assert {r["added"] for r in scored.values()} == {1, 2} and all(r["commit"] for r in scored.values())
