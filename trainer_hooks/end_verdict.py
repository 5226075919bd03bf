"""The verdict when training ends: rank 0 prints what ``analyze_logs`` says of the session it just
wrote, and the commands that show more, and appends the same lines to summary.txt.

The emitter never imports the analysis (the layering: ``trainer_hooks`` imports only
``logkit.schema``; the analysis is pandas and pyarrow), so the analysis runs as a separate
process, ``python -m logkit.cli SESSION_FOLDER --verdict --no-cache``: the same kernels, the same
sentences and the same renderer (``render_verdict``) as ``analyze_logs``, on the session's files.
The order at the end of a completed session:

1. every rank writes its ``session_end`` and closes its stream (the writer thread is joined);
2. rank 0 writes summary.json and summary.txt;
3. rank 0 waits, at most ``RANKS_WAIT_S``, for the other ranks' streams to end with their
   ``session_end`` (a stream that is not in the folder, another node's, is not waited for); the
   verdict of a session whose ranks had not all ended says it is rank 0's view;
4. rank 0 runs the analysis, at most ``timeout_s`` seconds, its output captured; prints the verdict
   on stdout and appends it to summary.txt.

Whatever goes wrong here (no analysis installed, a crash, a timeout, Ctrl-C) ends in at most one
line on stderr saying the verdict is not available: never an exception into training, never a
change of the run's exit status. The other ranks print nothing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import orjson

from logkit.schema.files import SUMMARY, SessionFiles
from logkit.schema.records import SESSION_END

RANKS_WAIT_S = 10.0  # how long rank 0 waits for the other ranks' session_end
_POLL_S = 0.05
_TAIL_BYTES = 64 * 1024  # a stream's last record is in its last 64 KiB
_MAX_OTHERS = 200  # sessions of the log folder looked at for a baseline (the most recent)
RULE = "=" * 60


def command(folder: Path) -> list[str]:
    """The analysis of one session folder, printing its verdict's lines only."""
    return [sys.executable, "-m", "logkit.cli", str(folder), "--verdict", "--no-cache"]


# -- the other ranks ----------------------------------------------------------------------------
def stream_ended(path: Path) -> bool | None:
    """True when the last whole line of the stream ``path`` is a ``session_end``; None when there
    is no such file (another node's stream, on a folder that is not shared)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - _TAIL_BYTES))
            tail = fh.read()
    except FileNotFoundError:
        return None
    except OSError:
        return False
    if not tail.endswith(b"\n"):
        return False  # a line being written
    try:
        record = orjson.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict) and SESSION_END["type"].get(record) == SESSION_END.type


def wait_for_ranks(folder: Path, session_id: str, world_size: int, bound_s: float | None = None
                   ) -> tuple[list[int], list[int]]:
    """Wait until every other rank's stream ends with its ``session_end``, at most ``bound_s``
    (``RANKS_WAIT_S``). Returns (the ranks whose streams had not ended, the ranks with no stream in
    ``folder``)."""
    files = SessionFiles(session_id)
    waiting, absent = set(range(1, world_size)), []
    deadline = time.monotonic() + (RANKS_WAIT_S if bound_s is None else bound_s)
    while True:
        for rank in sorted(waiting):
            ended = stream_ended(folder / files.rank_jsonl(rank))
            if ended is None:
                absent.append(rank)
            if ended is not False:
                waiting.discard(rank)
        if not waiting or time.monotonic() >= deadline:
            return sorted(waiting), sorted(absent)
        time.sleep(_POLL_S)


# -- a baseline to compare with -------------------------------------------------------------------
def baselines(log_dir: Path, session_id: str, model, world_size: int) -> list[tuple[str, int]]:
    """Other sessions under ``log_dir`` of the same model on another number of ranks, newest first,
    as (session id, world size): from their summary.json (the ``_MAX_OTHERS`` newest folders)."""
    try:
        folders = [p for p in log_dir.iterdir() if p.name != session_id and p.is_dir()]
        folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    found = []
    for folder in folders[:_MAX_OTHERS]:
        try:
            summary = orjson.loads((folder / SessionFiles(folder.name).summary_json).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(summary, dict):
            continue
        other = SUMMARY["world_size"].get(summary)
        if SUMMARY["model"].get(summary) == model and isinstance(other, int) and other != world_size:
            found.append((folder.name, other))
    return found


# -- the analysis ---------------------------------------------------------------------------------
def analyse(folder: Path, timeout_s: float) -> tuple[str | None, str | None]:
    """Run the analysis of ``folder``: (its verdict's text, None), or (None, why there is none)."""
    env = {k: v for k, v in os.environ.items() if k != "LOGKIT_DASK_SCHEDULER"}  # this machine only
    env["PYTHONIOENCODING"] = "utf-8"
    try:
        proc = subprocess.Popen(command(folder), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        return None, f"the analysis could not start ({exc.strerror or exc})"
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None, f"the analysis took longer than {timeout_s:g} s"
    except KeyboardInterrupt:
        _stop(proc)
        return None, "interrupted"
    if proc.returncode != 0:
        last = next((line for line in reversed(err.decode("utf-8", "replace").splitlines()) if line.strip()), "")
        return None, f"the analysis exited with status {proc.returncode}" + (f": {last.strip()[:200]}" if last else "")
    return out.decode("utf-8", "replace").strip("\n"), None


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass


# -- what is printed ------------------------------------------------------------------------------
def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def more_lines(log_dir: Path, folder: Path, others: list[tuple[str, int]]) -> list[str]:
    """The commands that show more: the session's report, and the comparison with a baseline."""
    lines = [f"More: analyze_logs {shlex.quote(str(folder))} --performance --diagnose "
             "(--report writes the HTML report)"]
    if others:
        sizes = sorted({n for _, n in others})
        runs = (f"the {sizes[0]}-rank run {others[0][0]}" if len(others) == 1 else
                f"{len(others)} other runs ({', '.join(map(str, sizes))} ranks)")
        lines.append(f"Compared with {runs} of the same model: analyze_logs {shlex.quote(str(log_dir))} --compare")
    return lines


def verdict_lines(text: str, not_ended: list[int], absent: list[int]) -> list[str]:
    """The verdict's lines as the analysis printed them, with what rank 0 could not see."""
    lines = text.splitlines() if text else ["VERDICT", RULE, "No verdict from this session's logs alone."]
    if not_ended:
        theirs = "its stream" if len(not_ended) == 1 else "their streams"
        lines.append(f"(Rank 0's view: {_ranks(not_ended)} had not ended {theirs} after {RANKS_WAIT_S:g} s.)")
    if absent:
        lines.append(f"(Rank 0's view: the streams of {_ranks(absent)} are not in this folder.)")
    return lines


def end_verdict(log_dir: Path, session_id: str, world_size: int, model, timeout_s: float,
                summary_txt: Path | None) -> float:
    """Rank 0, once the session is closed: wait for the other ranks, run the analysis, print the
    verdict (stdout) and append it to ``summary_txt`` (None: not written). Returns the seconds it
    took. Never raises: what goes wrong is one line on stderr (and in summary.txt)."""
    t0 = time.perf_counter()
    folder = log_dir / session_id
    try:
        not_ended, absent = wait_for_ranks(folder, session_id, world_size) if world_size > 1 else ([], [])
        text, why = analyse(folder.resolve(), timeout_s)
        if why is not None:
            lines = None
            print(f"logkit: the verdict is not available: {why} (analyze_logs {shlex.quote(str(folder))} "
                  "gives the report)", file=sys.stderr, flush=True)
        else:
            lines = [*verdict_lines(text, not_ended, absent), "",
                     *more_lines(log_dir, folder, baselines(log_dir, session_id, model, world_size))]
            print("\n" + "\n".join(lines), flush=True)
    except KeyboardInterrupt:
        lines, why = None, "interrupted"
        print("logkit: the verdict is not available: interrupted", file=sys.stderr, flush=True)
    except Exception as exc:  # a fault of the verdict must never reach training
        lines, why = None, f"{type(exc).__name__}: {exc}"
        print(f"logkit: the verdict is not available: {why}", file=sys.stderr, flush=True)
    spent = time.perf_counter() - t0
    if summary_txt is not None:
        _append(summary_txt, lines, why, spent)
    return spent


def _append(summary_txt: Path, lines: list[str] | None, why: str | None, spent: float) -> None:
    """The verdict (or why there is none) at the end of summary.txt, and what it cost."""
    text = ("\n" + "\n".join(lines) + f"\n(made in {spent:.2f} s at the end of the session, on rank 0)\n"
            if lines is not None else f"\nVerdict: not available: {why}\n")
    try:
        with open(summary_txt, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError:
        pass
