"""Amdahl's law fitted to a group's speedups, and the Karp-Flatt serial fraction.

speedup(p) = 1 / (s + (1 - s) / p), p = candidate ranks / baseline ranks, fitted by least squares
on 1/speedup - 1/p = s (1 - 1/p) through every comparison of a group (the headline speedups)
and the baseline's own point (p = 1, speedup = 1); Karp-Flatt e(p) = (1/speedup - 1/p) /
(1 - 1/p), the mean per world size. Needs three or more distinct world sizes (the baseline's
included). No prediction when a point is superlinear (speedup > p: Amdahl's law cannot
describe it), when the unclipped serial fraction is negative, or when R² < ``MIN_R2``.
"""

from __future__ import annotations

import numpy as np

from logkit.analysis.results import Fit
from logkit.analysis.thresholds import MIN_R2


def _notes(raw: float, r2: float | None, superlinear: list[int]) -> list[str]:
    notes = []
    if superlinear:
        notes.append(f"superlinear point(s) at {', '.join(map(str, superlinear))} ranks (speedup above the rank "
                     "ratio): Amdahl's law cannot describe them")
    if raw < 0:
        notes.append(f"the least-squares serial fraction is negative ({raw:.3f}, shown clipped to 0)")
    if r2 is None or r2 < MIN_R2:
        notes.append(f"poor fit (R² {'n/a' if r2 is None else f'{r2:.2f}'} < {MIN_R2:g})")
    return notes


def amdahl_fit(points: list[tuple[int, float, float]], base_ws: int, group: str | None = None) -> Fit | None:
    """The fit of ``points`` = [(world_size, rank ratio p, speedup)]; None with < 3 world sizes.

    ``reliable`` is False (and ``predicted`` None, ``note`` saying why) when a point is
    superlinear, the unclipped least-squares serial fraction is negative, or R² < ``MIN_R2``."""
    pts = [(ws, p, s) for ws, p, s in points if s and s > 0 and p > 0]
    if len({base_ws} | {ws for ws, _, _ in pts}) < 3:
        return None
    p = np.array([x[1] for x in pts] + [1.0])
    s = np.array([x[2] for x in pts] + [1.0])
    x, y = 1 - 1 / p, 1 / s - 1 / p
    raw = float((x * y).sum() / (x * x).sum())
    serial = float(np.clip(raw, 0.0, 1.0))
    fitted = 1 / (serial + (1 - serial) / p)
    ss_tot = float(((s - s.mean()) ** 2).sum())
    r2 = 1 - float(((s - fitted) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    kf: dict[int, list[float]] = {}
    for ws, pi, si in pts:
        if pi > 1:
            kf.setdefault(ws, []).append((1 / si - 1 / pi) / (1 - 1 / pi))
    superlinear = sorted({ws for ws, pi, si in pts if si > pi * (1 + 1e-9)})
    notes = _notes(raw, r2, superlinear)
    top = max(ws for ws, _, _ in pts)
    predicted = {m * top: 1 / (serial + (1 - serial) / (m * top / base_ws)) for m in (2, 4)} if not notes else None
    return Fit(group=group, serial_fraction=serial, serial_fraction_raw=raw, parallel_fraction=1 - serial,
               karp_flatt={ws: float(np.mean(v)) for ws, v in sorted(kf.items())}, predicted=predicted, r2=r2,
               points=len(pts) + 1, baseline_world_size=base_ws, reliable=not notes,
               note=("; ".join(notes) + ": no prediction") if notes else None,
               superlinear_world_sizes=tuple(superlinear))
