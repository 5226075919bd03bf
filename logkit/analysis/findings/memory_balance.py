"""GPU memory uneven across ranks: each rank's CUDA allocator peaks (the ``performance`` records'
``peak_allocated_mb`` / ``peak_reserved_mb``, the largest of the run per rank) compared. In data
parallelism and sharding every rank holds the same shapes, so one rank holding gigabytes more
(``thresholds.UNEVEN_MEMORY_MIB`` above the least, by reserved memory) has something the others do not:
another process's CUDA context or tensors on its GPU (a rank without ``torch.cuda.set_device``, a
``torch.load`` without ``map_location``, all landing on GPU 0), or work it does alone (evaluation, gathering
a full state dict to save). The allocator counts its own memory only: a foreign CUDA context shows in
``nvidia-smi`` (the gpu_snapshot records), not here.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis import thresholds
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind

_KIND = FindingKind.UNEVEN_MEMORY


def uneven_memory_findings(session) -> list[Finding]:
    perf = session.perf
    if perf.empty or "peak_reserved_mb" not in perf.columns or not perf["peak_reserved_mb"].notna().any():
        return []
    rows = perf.dropna(subset=["rank", "peak_reserved_mb"])
    peaks = rows.groupby("rank")[["peak_allocated_mb", "peak_reserved_mb"]].max()
    if len(peaks) < 2:
        return []
    reserved = peaks["peak_reserved_mb"]
    top, low = int(reserved.idxmax()), int(reserved.idxmin())
    gap = float(reserved.max() - reserved.min())
    if gap < thresholds.UNEVEN_MEMORY_MIB:
        return []
    others = reserved.drop(top)
    alloc = peaks["peak_allocated_mb"]
    detail = (f"Rank {top}'s allocator reserved {reserved[top] / 1024:.1f} GiB at its peak, {gap / 1024:.1f} GiB more "
              f"than rank {low} ({reserved[low] / 1024:.1f} GiB; the other ranks {others.min() / 1024:.1f}-"
              f"{others.max() / 1024:.1f} GiB)"
              + (f"; allocated to tensors: {alloc[top] / 1024:.1f} GiB against {alloc[low] / 1024:.1f} GiB"
                 if pd.notna(alloc.get(top)) and pd.notna(alloc.get(low)) else "")
              + ". Ranks of a data-parallel or sharded run hold the same shapes: look for tensors only this rank "
                "makes (evaluation or a full state dict gathered for saving on rank 0), a torch.load without "
                "map_location, or a missing torch.cuda.set_device putting other ranks' CUDA contexts on its GPU.")
    # the perf frame keeps no line: the top rank's stream is the evidence
    sources = [f for f in (session.meta.files or []) if str(f).endswith(f"_rank{top}.jsonl")]
    return [Finding.make(_KIND.severity, _KIND, session.meta.session_id,
                         f"Rank {top} holds {gap / 1024:.1f} GiB more GPU memory than rank {low}", detail, sources,
                         [top], peak_reserved_mib={int(r): float(v) for r, v in reserved.items()})]
