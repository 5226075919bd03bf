"""How numbers are written in every report (console text and the HTML templates' filters).

    >>> fmt(None), fmt(1.234), pct(0.923), mb(67_230_000), size_text(2048)
    ('n/a', '1.23', '92.3%', '67.23MB', '2.05 kB')
"""

from __future__ import annotations


def fmt(value, spec: str = ".2f", unit: str = "") -> str:
    """``value`` formatted, or "n/a" when it is missing."""
    if value is None:
        return "n/a"
    try:
        if value != value:  # NaN
            return "n/a"
    except (TypeError, ValueError):
        pass
    try:
        return f"{value:{spec}}{unit}"
    except (TypeError, ValueError):
        return f"{value}{unit}"


def pct(fraction, spec: str = ".1f") -> str:
    """A fraction (0.923) as a percentage ("92.3%")."""
    return fmt(fraction * 100 if isinstance(fraction, (int, float)) else None, spec, "%")


def mb(nbytes, spec: str = ".2f") -> str:
    """Bytes as SI megabytes ("67.23MB": 10^6 bytes)."""
    return fmt(nbytes / 1e6 if isinstance(nbytes, (int, float)) else None, spec, "MB")


def size_text(nbytes) -> str:
    """A message size in the unit that reads best: B, kB, MB (SI)."""
    if not isinstance(nbytes, (int, float)):
        return "n/a"
    if nbytes < 1e3:
        return f"{nbytes:.0f} B"
    if nbytes < 1e6:
        return f"{nbytes / 1e3:.3g} kB"
    return f"{nbytes / 1e6:.4g} MB"


# how the ledger's categories are named in the reports (console, HTML), and the HTML bar's colours
LEDGER_LABELS: dict[str, tuple[str, str]] = {
    "startup": ("start-up", "#8c6d31"), "data_wait": ("data wait", "#e6a23c"), "compute": ("compute", "#2f7ed8"),
    "exposed_communication": ("exposed communication", "#c0392b"),
    "waiting_for_ranks": ("waiting for other ranks", "#9b59b6"), "evaluation": ("evaluation", "#27ae60"),
    "checkpoint_saving": ("checkpoint saving", "#16a085"), "logging": ("logging", "#7f8c8d"),
    "rest": ("rest (no record explains it)", "#d0d7de"),
}
