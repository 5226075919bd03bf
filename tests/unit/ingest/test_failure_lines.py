"""Why processes failed and what a failed collective said, on excerpts of real logs from public issues
(``tests/data/failures/``, each cited in its README) and on variations of them said to be made here.
Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import pandas as pd

import logkit
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "failures"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def load(tmp_path, body: str, name: str = "capture.log"):
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return logkit.load_session(path)


def kind(s, name: str) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == name].to_dict("records")


# --- python cannot open the script: once per process ------------------------------------------------------
def test_a_script_python_cannot_open_is_one_cause(tmp_path):
    # simmim_38 line 1: "/root/miniconda3/bin/python: can't open file 'main_simmim.py--cfg': [Errno 2] ..."
    s = load(tmp_path, text("simmim_38_cant_open_file.log"))
    (c,) = kind(s, "failure_cause")
    assert (c["cause"], c["error"], c["source"]) == ("file_not_found", "main_simmim.py--cfg", "capture.log:1")


def test_each_worker_that_cannot_open_the_script_is_a_cause_of_its_own(tmp_path):
    # made here: simmim_38's python line printed by three workers of one launch (CPython prints it once per
    # interpreter, then exits 2), before the agent's line: three failures, none of them ranked
    first, agent = text("simmim_38_cant_open_file.log").splitlines()
    s = load(tmp_path, "\n".join([first] * 3 + [agent]) + "\n")
    found = kind(s, "failure_cause")
    assert [c["source"] for c in found] == ["capture.log:1", "capture.log:2", "capture.log:3"]
    assert {c["cause"] for c in found} == {"file_not_found"} and all(pd.isna(c["rank"]) for c in found)


def test_a_missing_module_said_twice_by_one_rank_is_one_cause(tmp_path):
    # made here: a ranked exception line said twice (a rank's traceback, then its what(): echo) stays one cause
    line = "[rank1]: ModuleNotFoundError: No module named 'flash_attn'\n"
    (c,) = kind(load(tmp_path, line * 2), "failure_cause")
    assert (c["rank"], c["cause"], c["source"]) == (1, "module_not_found", "capture.log:1")
