"""``--ledger``: where each session's hours went: its wall-clock split by category (a table per
session: seconds, share, a bar), what the logs cannot split, and what the rest holds."""

from __future__ import annotations

from logkit.analysis.results import Analysis, LedgerRow
from logkit.report.console.common import RULE, definitions_footer
from logkit.report.format import LEDGER_LABELS, fmt, pct
from logkit.schema.vocab import LedgerCategory

_KEYS = ["ledger_wall_s", "ledger_seconds", "ledger_startup", "ledger_rest"]
_LABELS = {cat: label for cat, (label, _) in LEDGER_LABELS.items()}
_BAR = 30  # characters for the whole wall


def _duration(seconds: float) -> str:
    """1234.5 -> '20m 34.5s'; 7384 -> '2h 03m 04s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m {sec:04.1f}s"
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}h {minutes:02d}m {int(sec):02d}s"


def _session_lines(row: LedgerRow) -> list[str]:
    wall = "wall unknown (" if row.wall_s is None else f"{_duration(row.wall_s)} wall ({fmt(row.wall_s, '.1f', 's')}"
    lines = ["", f"⌛ Session: {row.session_id}: {wall}; {row.basis})"]
    width = max(len(label) for label in _LABELS.values())
    for cat in LedgerCategory:
        seconds, share = row.seconds.get(cat.value), row.shares.get(cat.value)
        if seconds is None:
            continue
        bar = "█" * int(round((share or 0) * _BAR))  # no share where the wall is unknown
        lines.append(f"  {_LABELS[cat.value]:<{width}}  {fmt(seconds, '10.1f', 's')}  {pct(share):>6}  {bar}")
    if row.unknown:
        lines.append("  not in these logs: " + ", ".join(_LABELS[c] for c in row.unknown))
    lines += [f"  note: {n}" for n in row.notes]
    return lines


def render_ledger(analysis: Analysis) -> str:
    """Per session whose logs give its wall, or a part of it: its ledger."""
    lines = ["WHERE THE HOURS WENT (LEDGER)", RULE]
    if not analysis.ledger:
        lines.append("No session gives its wall-clock: no ledger.")
    for row in analysis.ledger:
        lines += _session_lines(row)
    return "\n".join(lines + definitions_footer(analysis, _KEYS))
