"""PNG plots: every file written, a valid PNG of the expected size; long lines thinned."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd

from logkit.ingest import Session, load_sessions
from logkit.report.plots import MAX_POINTS, PLOTS, render_plots, thin, write_plots

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def test_write_plots_on_real_runs(tmp_path):
    sessions = load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs") + load_sessions(SAMPLES / "legacy_summary" / "logs")
    analysis = {"scaling": {"sessions": [{"session_id": s.session_id, "world_size": s.meta["world_size"],
                                          "duration_s": s.meta["duration_s"], "steps_per_second": 1.0,
                                          "final_loss": 2.0} for s in sessions],
                            "comparisons": [{"baseline": sessions[0].session_id, "candidate": sessions[1].session_id,
                                             "speedup": 1.3, "scaling_efficiency": 0.65, "steady_speedup": 1.6,
                                             "speedup_ci": [1.5, 1.7]}]}}
    # the interval is the steady-state speedup's: it need not contain the whole-run speedup
    paths = write_plots(sessions, analysis, tmp_path / "plots")
    assert [p.name for p in paths] == list(PLOTS)
    assert "training_comparison.png" in PLOTS  # the seed-002 file name
    for p in paths:
        w, h = _size(p.read_bytes())
        assert w >= 800 and h >= 400 and p.stat().st_size > 5000, p.name


def test_plots_without_data_still_written():
    out = render_plots([Session.empty({"session_id": "empty"})], {"scaling": {"sessions": [], "comparisons": []}})
    assert list(out) == list(PLOTS)
    for png in out.values():
        assert _size(png)[0] >= 800


def test_thin_keeps_at_most_max_points_and_the_mean():
    n = 200_003
    frame = pd.DataFrame({"step": np.arange(n, dtype=float), "loss": np.linspace(3, 1, n)})
    frame.loc[5, "loss"] = np.nan
    out = thin(frame, "step", "loss")
    assert len(out) <= MAX_POINTS
    assert out["step"].is_monotonic_increasing
    assert abs(out["loss"].mean() - frame["loss"].mean()) < 1e-3
    small = thin(frame.head(100), "step", "loss")
    assert len(small) == 99  # the NaN row dropped, nothing else
