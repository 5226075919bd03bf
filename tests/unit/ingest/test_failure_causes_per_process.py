"""Why each process failed, once per process, where no line names a rank: each traceback that ends in an
exception of no kind the causes name is one process's (two launched processes failing alike print two), a
traceback chained to the one before it is the same process's, and torch's repeats of a ranked line stay one.
The launcher lines and tracebacks are DeepSpeed's launcher output as its issue 618 shows them (two processes
failing with the same NameError); the variations are made here and say so; expected values read off the
lines by eye."""

from __future__ import annotations

from tests.support.excerpts import events_of, load

_LAUNCH = ("[2020-12-24 16:25:13,902] [INFO] [launch.py:100:main] dist_world_size=2\n"
           "[2020-12-24 16:25:13,902] [INFO] [launch.py:102:main] Setting CUDA_VISIBLE_DEVICES=0,1\n")
_TRACE = ('Traceback (most recent call last):\n  File "fail.py", line 1, in <module>\n    garbageeeeee\n'
          "NameError: name 'garbageeeeee' is not defined\n")


def _causes(s) -> list[tuple]:
    return [(int(e["source"].rsplit(":", 1)[1]), e["cause"], e["error"]) for e in events_of(s, "failure_cause")]


def test_two_unranked_tracebacks_are_two_processes_causes(tmp_path):
    s = load(tmp_path, _LAUNCH + _TRACE + _TRACE)
    # lines 6 and 10: each process's NameError
    assert _causes(s) == [(6, "exception", "NameError"), (10, "exception", "NameError")]


def test_a_chained_traceback_is_the_same_processs(tmp_path):
    # variation: one process whose handler raised again (python's chained traceback): one cause, the first
    chained = _TRACE + "\nDuring handling of the above exception, another exception occurred:\n\n" + \
        _TRACE.replace("NameError: name 'garbageeeeee' is not defined", "RuntimeError: cleanup failed")
    s = load(tmp_path, _LAUNCH + chained)
    assert _causes(s) == [(6, "exception", "NameError")]


def test_ranked_repeats_stay_one_cause(tmp_path):
    # variation: both tracebacks behind the same rank's prefix (a rank printing its traceback twice): one cause
    ranked = "".join(f"[rank0]: {line}\n" for line in (_TRACE + _TRACE).splitlines())
    s = load(tmp_path, _LAUNCH + ranked)
    assert [(c[1], c[2]) for c in _causes(s)] == [("exception", "NameError")]
