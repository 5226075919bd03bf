"""How often logkit reads a real log right at first sight: the held-out share of the corpus.

    python -m tests.support.first_sight sample_logs/real_world/facts.json     # the entries with "added"

Each argument is a JSON list of ``facts.json``-shaped entries (with ``added``: the order the
file joined). For every entry the file is loaded and every fact key is checked with the check
``tests/e2e/test_real_world.py`` runs for it. A file is right when a session is found (or,
for ``no_session``, none is), nothing raises, and every checked fact holds. A key no check
knows (and no ``NOT_CHECKED`` reason covers) counts as failed, so a fact is never skipped
silently. Prints one line per file and the share right over all files and over the last 40
added; writes ``sample_logs/real_world/first_sight.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_real_world import CHECKS, CORPUS, NOT_CHECKED, found, session_or_none

LAST = 40  # the newest files: the share logkit gets right on logs it was least likely built against


def commit() -> str:
    """The commit scored (with ``+dirty`` when the tree differs from it)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=CORPUS).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "logkit"], capture_output=True, text=True,
                           cwd=CORPUS).stdout.strip()
    return head + ("+dirty" if dirty else "") if head else "unknown"


def score(entry: dict) -> list[str]:
    """The keys of ``entry`` that fail ("session" when none was found, or one was where none should be)."""
    path = entry["path"]
    s = session_or_none(path)
    failed = []
    if "no_session" not in entry and (s is None or not found(s)):
        failed.append("session")
    for key in entry:
        if key in NOT_CHECKED:
            continue
        if key not in CHECKS:
            failed.append(f"{key} (no check)")
            continue
        if s is None and key != "no_session":
            failed.append(key)
            continue
        try:
            CHECKS[key](s, path, entry)
        except Exception:  # noqa: BLE001 - an assertion or a missing column alike: the fact is not read
            failed.append(key)
    return failed


def share(results: list[dict]) -> str:
    right = sum(r["right"] for r in results)
    return f"{right}/{len(results)} ({100 * right / len(results):.0f}%)" if results else "0/0"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("facts", nargs="+", type=Path, help="JSON lists of facts.json-shaped entries")
    ap.add_argument("--out", type=Path, default=None,
                    help="write the scores here (the corpus' first_sight.json is the record made when the files "
                         "joined: never written again)")
    args = ap.parse_args(argv)
    if args.out is not None and args.out.resolve() == (CORPUS / "first_sight.json").resolve():
        ap.error("first_sight.json is the record of first sight: write new scores elsewhere")
    entries = [e for f in args.facts for e in json.loads(f.read_text(encoding="utf-8")) if "added" in e]
    entries.sort(key=lambda e: e.get("added", 0))
    scored = commit()
    out = {}
    for entry in entries:
        failed = score(entry)
        out[entry["path"]] = {"added": entry.get("added"), "right": not failed, "failed": failed, "commit": scored}
        print(f"{entry.get('added', '-'):>4}  {'right' if not failed else 'wrong'}  {entry['path']}"
              + (f"  failed: {', '.join(failed)}" if failed else ""))
    results = list(out.values())
    # right now: at first sight only when these files had never been read before (first_sight.json keeps that)
    print(f"right: {share(results)} of all files; {share(results[-LAST:])} of the last {LAST} added")
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
