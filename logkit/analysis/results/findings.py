"""A finding: something wrong (or worth knowing), its severity and its evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from logkit.analysis.results.values import plain
from logkit.schema.findings import Severity

MAX_EVIDENCE = 10  # evidence lines a finding keeps (all are counted)

__all__ = ["MAX_EVIDENCE", "Finding", "severity_counts"]


@dataclass(frozen=True)
class Finding:
    """Something wrong (or worth knowing), with the evidence that says so (``file:line`` where a
    line does). ``extra``: kind-specific facts (the sequence number of a timeout, the ops ...)."""

    severity: Severity
    kind: str
    session_id: str | None
    title: str
    detail: str
    evidence: tuple[str, ...] = ()
    evidence_total: int = 0
    ranks: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, severity, kind: str, session_id, title: str, detail: str, evidence=(), ranks=(),
             **extra) -> Finding:
        """A finding; ``evidence`` (file:line, or a file and a step range) keeps its first
        ``MAX_EVIDENCE`` entries and counts them all; ``ranks`` sorted, unique, missing ones dropped."""
        ev = [str(e) for e in evidence if e]
        return cls(Severity.parse(severity), kind, session_id, title, detail, tuple(ev[:MAX_EVIDENCE]), len(ev),
                   tuple(sorted({int(r) for r in ranks if r is not None and not pd.isna(r)})), extra)

    def to_dict(self) -> dict:
        return {"severity": self.severity.value, "kind": self.kind, "session_id": self.session_id,
                "title": self.title, "detail": self.detail, "evidence": list(self.evidence),
                "evidence_total": self.evidence_total, "ranks": list(self.ranks), **plain(dict(self.extra))}



def severity_counts(findings) -> tuple[tuple[Severity, int], ...]:
    """(severity, number of ``findings`` of it) for every severity, the most severe first."""
    counts = {s: 0 for s in sorted(Severity, reverse=True)}
    for f in findings:
        counts[f.severity] += 1
    return tuple(counts.items())
