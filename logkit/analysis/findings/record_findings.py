"""The finding of what the stream checks repaired or set aside (``ingest/record_checks.py``).

Each ``record_check`` event is one thing a check did to one record of a rank's stream, at its
``file:line``. A session gets one warning finding: how many records were set aside (left out of
every figure: another rank's or another session's records, a step logged again) and how many were
repaired (kept, with a value read as a number or as unknown), the count of each check with what
it means, and the lines. A record both repaired and set aside counts as set aside; a record with
two repaired values counts once.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind

# check -> (what it found, what was done): set aside first, then repaired, in the order listed.
SET_ASIDE = {
    "foreign_rank": "record(s) of another rank in a rank's stream (each rank writes its own)",
    "foreign_session": "record(s) of another session id (two runs wrote to one file)",
    "duplicate_step": "step(s) logged again (the first kept: a callback registered twice?)",
}
REPAIRED = {
    "numeric_text": "number(s) given as text (read as the number)",
    "not_a_number": "value(s) of a numeric field that are no number (read as unknown)",
    "negative_step_time": "negative step time(s) (read as unknown: the step is kept, its time not counted)",
    "absurd_batch": "batch size(s) not positive or beyond any real batch (read as unknown)",
}


def _counts(rows: pd.DataFrame, meanings: dict[str, str]) -> list[str]:
    sub = rows["subkind"].astype("object")
    return [f"{int((sub == check).sum())} {meaning}" for check, meaning in meanings.items() if (sub == check).any()]


def _evidence(rows: pd.DataFrame) -> list[str]:
    """The first line of each check (in the order of the detail), then every other line in file order."""
    order = [*SET_ASIDE, *REPAIRED]
    rows = rows.assign(_file=rows["source"].str.rpartition(":")[0],
                       _line=pd.to_numeric(rows["source"].str.rpartition(":")[2], errors="coerce"))
    rows = rows.sort_values(["_file", "_line"], kind="stable")
    sub = rows["subkind"].astype("object")
    first = [rows.loc[sub == check, "source"].iloc[0] for check in order if (sub == check).any()]
    return list(dict.fromkeys(first + list(rows["source"])))


def record_check_findings(rows: pd.DataFrame, sid) -> list[Finding]:
    """One finding for the ``record_check`` events ``rows`` of session ``sid``."""
    sources = rows["source"].astype("object")
    aside = set(sources[rows["subkind"].isin(list(SET_ASIDE))])
    repaired = set(sources) - aside
    parts = []
    if aside:
        parts.append("Set aside (left out of every figure): " + "; ".join(_counts(rows, SET_ASIDE)) + ".")
    if repaired:
        parts.append("Repaired (the record kept): " + "; ".join(_counts(rows, REPAIRED)) + ".")
    others = [f"{n} {check}" for check, n in rows["subkind"].astype("object").value_counts(sort=False).items()
              if check not in SET_ASIDE and check not in REPAIRED]
    if others:
        parts.append(f"Other checks: {'; '.join(others)}.")
    title = (f"{len(aside | repaired)} record(s) repaired or set aside in the rank streams "
             f"({len(repaired)} repaired, {len(aside)} set aside)")
    checks = {str(k): int(v) for k, v in rows["subkind"].astype("object").value_counts(sort=False).items()}
    return [Finding.make(FindingKind.RECORD_CHECK.severity, FindingKind.RECORD_CHECK, sid, title,
                         " ".join(parts) + " Each line cited is one the check changed or left out; the figures "
                         "count the streams as repaired.", _evidence(rows), rows["rank"], checks=checks,
                         repaired=len(repaired), set_aside=len(aside))]
