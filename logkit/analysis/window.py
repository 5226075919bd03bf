"""The batch analysis of a followed session's recent window: what the live view shows
(``analyze_logs --follow``), computed by the same kernels as ``analyze`` over the records of each
rank's last steps (``run.live_state`` keeps them) and the run's finding records so far.

Per session: each rank's step-time spread, data share and samples/s (``performance.step_stats``), its
gradient-sync share of step time (``communication_table``), the stragglers by arrival or by step time
with their cause (``kernels/straggler.py``), and the findings ``--diagnose`` gives (``diagnose``:
every kind but the comparisons between sessions, which a window of one session has none of).
"""

from __future__ import annotations

import numpy as np

from logkit.analysis.analyze import session_figures
from logkit.analysis.findings.diagnose import diagnose
from logkit.analysis.kernels.breakdown import straggler_calls
from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.kernels.health import session_health
from logkit.analysis.results.frames import ArrivalRow, CommRow, StepRow
from logkit.analysis.results.live import WindowFigures
from logkit.analysis.results.rows import typed_rows


def _sync_shares(comm: list[CommRow]) -> dict[int, float]:
    """Per rank, the largest share of step time of its gradient-sync ops (as the scaling flags take it)."""
    out: dict[int, float] = {}
    for row in comm:
        if row.op in SYNC_OPS and row.rank is not None and row.sync_share_of_step_time is not None:
            out[row.rank] = max(out.get(row.rank, 0.0), row.sync_share_of_step_time)
    return out


def analyze_window(session) -> WindowFigures:
    """The window's figures and findings (see the module doc)."""
    figs = session_figures([session], [None])
    sid = session.session_id
    findings = diagnose([session], figs.parts(health={sid: session_health(session)}))
    strag = typed_rows(figs.stragglers, ArrivalRow)
    call = straggler_calls(figs.stragglers).get(sid)
    named = next((r for r in strag if r.is_straggler), None)
    nearest = next((r for r in strag if call is not None and r.rank == call.nearest_rank), None)
    share = figs.context.get(sid, {}).get("sync_share")
    return WindowFigures(
        performance=tuple(typed_rows(figs.performance, StepRow)), stragglers=tuple(strag),
        straggler=named or nearest, sync_shares=_sync_shares(typed_rows(figs.communication, CommRow)),
        sync_share=None if share is None or np.isnan(share) else float(share), findings=findings)
