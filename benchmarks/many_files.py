"""Cost by what is there, not by how many files: ``analyze_logs DIR --json`` on folders of many small
files, against the same records in few files, in the same run (whole processes, as a user waits).

Two pairs of folders, each pair holding the same records (the same bytes but for the file names):

- **20,000 rank streams in 50 sessions** (400 ranks each, every stream a session start, one step, one
  communication record and a session end, from a real 2-rank run: ``tests/fuzz/hostile``'s builder),
  against the **reference**: 50 sessions of 2 ranks whose streams hold the same number of records
  (200 steps each, the same record shapes);
- **20,000 tiny console captures** beside 20,000 files that are no logs (a cluster's output folder),
  against one console capture holding the 20,000 captures' lines and one file of the 20,000 notes.

Each command runs in a fresh process with an empty cache (``--no-cache``) in alternated rounds; printed:
wall time and peak RSS (``VmHWM``) of each, and each many-files folder against its reference as ratios
(target: time and memory within a small factor of the reference's: cost follows the bytes and records,
not the files).

    python benchmarks/many_files.py              # 20,000 files, 3 rounds
    python benchmarks/many_files.py --files 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cli import _CLI, _load, _run  # noqa: E402
from tests.fuzz.hostile import SAMPLE, SID, _many_ranks  # noqa: E402

SESSIONS = 50


def _few_ranks(folder: Path, files: int) -> None:
    """The reference for ``_many_ranks(files, SESSIONS)``: per session 2 ranks whose streams hold as many
    records as its ``files // SESSIONS`` streams together (the same record shapes, steps numbered on)."""
    records = [json.loads(line) for line in (SAMPLE / f"{SID}_rank1.jsonl").read_text().splitlines()]
    first: dict = {}
    for r in records:
        first.setdefault(r["type"], r)
    start, end = records[0], records[-1]
    middle = [first[t] for t in ("training_step_complete", "communication") if t in first]
    per = max(1, files // SESSIONS)  # streams per session in the many-files folder
    for s in range(SESSIONS):
        sid = f"training_20270101_{s:06d}"
        (folder / sid).mkdir(parents=True)
        for rank in range(2):
            lines = [json.dumps({**start, "session_id": sid, "rank": rank, "world_size": 2})]
            for step in range(1, per):  # 2 ranks x (2 + 2 (per - 1)) records = per streams x 4 records
                lines += [json.dumps({**r, "session_id": sid, "rank": rank, "world_size": 2, "step": step})
                          for r in middle]
            lines.append(json.dumps({**end, "session_id": sid, "rank": rank, "world_size": 2}))
            (folder / sid / f"{sid}_rank{rank}.jsonl").write_text("\n".join(lines) + "\n")


CONSOLE_LINE = b"NCCL INFO Bootstrap : Using eth0\n"
NOTE = b"nothing to see\n"


def _many_console(folder: Path, files: int) -> None:
    logs, other = folder / "logs", folder / "other"
    logs.mkdir(parents=True)
    other.mkdir()
    for i in range(files):
        (logs / f"job_{i}.log").write_bytes(CONSOLE_LINE)
        (other / f"note_{i}.txt").write_bytes(NOTE)


def _one_console(folder: Path, files: int) -> None:
    (folder / "logs").mkdir(parents=True)
    (folder / "other").mkdir()
    (folder / "logs" / "job.log").write_bytes(CONSOLE_LINE * files)
    (folder / "other" / "note.txt").write_bytes(NOTE * files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20_000, help="files in each many-files folder (default 20,000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (medians; default 3)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="logkit-bench-files-"))
    try:
        folders = {
            "ranks": (tmp / "many_ranks", tmp / "few_ranks"),
            "console": (tmp / "many_console", tmp / "one_console"),
        }
        (tmp / "many_ranks").mkdir()
        _many_ranks(args.files, SESSIONS)(tmp / "many_ranks")
        _few_ranks(tmp / "few_ranks", args.files)
        _many_console(tmp / "many_console", args.files)
        _one_console(tmp / "one_console", args.files)
        for name, (many, few) in folders.items():
            count = sum(1 for p in many.rglob("*") if p.is_file())
            size = [sum(p.stat().st_size for p in f.rglob("*") if p.is_file()) / 1e6 for f in (many, few)]
            print(f"{name}: {count} files, {size[0]:.1f} MB; reference {sum(1 for p in few.rglob('*') if p.is_file())}"
                  f" files, {size[1]:.1f} MB")
        print(f"({_load()} at the start)")
        hwm = tmp / "hwm"
        _run(_CLI, [tmp / "one_console", "--json", "--no-cache"], tmp / "cache", hwm)  # .pyc written
        rows: dict[str, list[tuple[float, int]]] = {}
        for _ in range(args.rounds):
            for pair in folders.values():
                for folder in pair:
                    rows.setdefault(folder.name, []).append(
                        _run(_CLI, [folder, "--json", "--no-cache"], tmp / "cache", hwm))
        print(f"\nanalyze_logs DIR --json --no-cache, fresh processes, {args.rounds} alternated rounds (medians;"
              f" {_load()} at the end):")
        for label, runs in rows.items():
            print(f"  {label:<14} {statistics.median(t for t, _ in runs):7.2f} s  peak RSS"
                  f" {statistics.median(p for _, p in runs) / 1e6:6.0f} MB")
        print("\nmany files / the same records in few files (median of the rounds' ratios):")
        for name, (many, few) in folders.items():
            t = statistics.median(a[0] / b[0] for a, b in zip(rows[many.name], rows[few.name], strict=True))
            m = statistics.median(a[1] / b[1] for a, b in zip(rows[many.name], rows[few.name], strict=True))
            print(f"  {name:<8} time x{t:.2f}  peak memory x{m:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
