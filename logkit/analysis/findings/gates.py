"""Gates: exit statuses for CI, decided from the analysis (the CLI only prints and exits).

- efficiency gate (``--fail-under-efficiency X``): 1 when a scaling comparison's headline
  efficiency (steady state where both runs logged step times, else whole run) is below X;
  2 when nothing can be judged (no comparison of runs on more ranks than their baseline,
  both with a throughput); else 0.
- severity gate (``--fail-on LEVEL``): 1 when a finding is at LEVEL or worse, else 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from logkit.analysis.results import Analysis
from logkit.schema.findings import Severity

MAX_MESSAGES = 20


@dataclass(frozen=True)
class GateResult:
    """An exit status and the lines that explain it."""

    status: int
    messages: tuple[str, ...] = ()


def efficiency_gate(analysis: Analysis, threshold: float) -> GateResult:
    judged = [c for c in analysis.scaling.comparisons if c.scaling_efficiency is not None and c.is_scaling]
    if not judged:
        return GateResult(2, ("--fail-under-efficiency: nothing to compare (no run on more ranks than a baseline of "
                              "the same model, both with a throughput)",))
    below = [c for c in judged if c.scaling_efficiency < threshold]
    messages = []
    for c in below:
        whole = c.whole_run.scaling_efficiency
        beside = f"; whole run {whole * 100:.1f}%" if c.steady is not None and whole is not None else ""
        messages.append(f"scaling efficiency of {c.candidate} against {c.baseline} is "
                        f"{c.scaling_efficiency * 100:.1f}% ({c.basis}{beside}), below --fail-under-efficiency "
                        f"{threshold:g} ({threshold * 100:.1f}%)")
    return GateResult(1 if below else 0, tuple(messages))


def severity_gate(analysis: Analysis, level: str | Severity) -> GateResult:
    floor = Severity.parse(level)
    hits = [f for f in analysis.findings if f.severity >= floor]
    return GateResult(1 if hits else 0, tuple(f"{f.severity.value} finding in {f.session_id}: {f.title}"
                                              for f in hits[:MAX_MESSAGES]))
