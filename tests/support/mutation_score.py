"""The mutation score per module, from what ``mutmut run`` left in ``mutants/`` (``make mutation``).

    python -m tests.support.mutation_score          # a table: killed / total per module
    python -m tests.support.mutation_score --list   # and every mutant that was not killed

Killed: a test failed, or the mutant ran past its time limit (a loop that never ends is caught).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

CAUGHT = {"killed", "timeout", "segfault"}


def module_results(root: Path = Path("mutants")) -> dict[str, dict[str, str]]:
    """module path -> {mutant name: status}."""
    out = {}
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            out[str(meta.relative_to(root))[: -len(".meta")]] = {k: status_by_exit_code[v] for k, v in codes.items()}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true", help="list the mutants that were not killed")
    args = p.parse_args(argv)
    results = module_results()
    if not results:
        print("no mutation results: run `make mutation` first")
        return 1
    total = Counter()
    print(f"{'module':40s} {'killed':>7s} {'total':>6s} {'score':>6s}  not killed")
    for module, statuses in results.items():
        counts = Counter(statuses.values())
        killed = sum(counts[s] for s in CAUGHT)
        rest = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s not in CAUGHT)
        print(f"{module:40s} {killed:7d} {len(statuses):6d} {100 * killed / len(statuses):5.1f}%  {rest}")
        total["killed"] += killed
        total["all"] += len(statuses)
    print(f"{'all':40s} {total['killed']:7d} {total['all']:6d} {100 * total['killed'] / total['all']:5.1f}%")
    if args.list:
        for statuses in results.values():
            for name, status in statuses.items():
                if status not in CAUGHT:
                    print(f"{status:12s} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
