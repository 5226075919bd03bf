"""Export the frames of sessions: Parquet or CSV files (``logkit.ingest.store`` writes them,
and reads them back), and TensorBoard scalars.

    >>> from logkit.report.export import export_sessions, read_export     # doctest: +SKIP
    >>> export_sessions(sessions, "parquet", "out")                         # doctest: +SKIP
    >>> read_export("out/training_20241206_143022")["steps"]                # doctest: +SKIP

Layout: ``DIR/<session folder>/`` as ``logkit.ingest.store`` lays a session out (a file per
frame, ``meta.json`` with the session's meta and the frames' dtypes); the session folder is
the session id with every character outside ``[A-Za-z0-9._-]`` made ``_`` (and ``_2``, ``_3``
... where two sessions of one export would share a folder). TensorBoard
scalars go to ``DIR/tensorboard/<session folder>/`` when the ``tensorboard`` package is
importable.
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.store import FORMATS, FRAMES, export_session, read_export, safe_name

__all__ = ["FRAMES", "FORMATS", "export_sessions", "export_session", "read_export", "export_tensorboard",
           "folder_names", "safe_name", "tensorboard_available", "TB_MAX_POINTS"]

TB_MAX_POINTS = 10_000  # per scalar series: longer series are thinned to every k-th step


def tensorboard_available() -> str | None:
    """The module that writes TensorBoard files here (``tensorboard`` / ``torch.utils.tensorboard``), or None."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        return None  # torch.utils.tensorboard needs the tensorboard package too
    try:
        if importlib.util.find_spec("torch") is not None:
            return "torch.utils.tensorboard"
    except (ImportError, ValueError):
        pass
    return "tensorboard"


def _writer(logdir: Path):
    kind = tensorboard_available()
    if kind == "torch.utils.tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(logdir))
    # tensorboard's own (TF-free) summary writer
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    class _Writer:
        def __init__(self, path):
            self.w = EventFileWriter(str(path))

        def add_scalar(self, tag, value, step):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            self.w.add_event(Event(step=int(step), summary=summary))

        def close(self):
            self.w.close()

    return _Writer(logdir)


def folder_names(sessions) -> list[str]:
    """Each session's export folder name: ``safe_name`` of its id, made unique among ``sessions``
    (``_2``, ``_3`` ... in their order, compared without case, as macOS and Windows compare
    names): two sessions whose ids differ only in characters a folder name cannot hold ("v1/run"
    and "v1_run"), or one id in two folders, never write into one folder."""
    taken, out = set(), []
    for s in sessions:
        base = name = safe_name(s.session_id)
        n = 1
        while name.casefold() in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name.casefold())
        out.append(name)
    return out


def _series(s, throughput) -> dict:
    """The scalars of session ``s``, each a series indexed by step: what the main rank logged (loss,
    learning rate, step time, grad norm; ``Session.main_rank_steps``), its samples/s per step as the
    analysis made it (``throughput``: ``Analysis.curves.throughput``), and every rank's step time."""
    main = s.main_rank_steps().set_index("step")
    mine = throughput[throughput["session_id"] == s.session_id].set_index("step")
    series = {"train/loss": main["loss"], "train/learning_rate": main["learning_rate"],
              "train/samples_per_s": mine["samples_per_s"], "train/step_time_s": main["step_time_s"],
              "train/grad_norm": main["grad_norm"]}
    for rank, part in s.steps.groupby("rank", sort=True):
        series[f"step_time_s/rank{int(rank)}"] = part.set_index("step")["step_time_s"]
    return series


def export_tensorboard(sessions, out_dir, names: list[str] | None = None, analysis=None) -> list[str]:
    """TensorBoard scalars (loss, learning rate, samples/s, step time; step time per rank) of
    each session under ``out_dir/tensorboard/<session folder>`` (``names``: the folders, by
    default ``folder_names``). Samples/s are the analysis' (``analysis``: the ``Analysis`` of these
    sessions, made here when not given); the rest is what the logs say. Returns notes for the user
    (one saying it was skipped when no TensorBoard writer is importable)."""
    kind = tensorboard_available()
    if kind is None:
        return ["TensorBoard scalars skipped: the tensorboard package is not installed "
                "(pip install tensorboard)"]
    if analysis is None:
        from logkit.analysis import analyze

        analysis = analyze(sessions)
    throughput = analysis.curves.frame("throughput")
    notes = []
    for s, name in zip(sessions, names or folder_names(sessions), strict=True):
        if s.steps.empty:
            continue
        logdir = Path(out_dir) / "tensorboard" / name
        writer = _writer(logdir)
        try:
            for tag, values in _series(s, throughput).items():
                values = values.dropna()
                values = values[values.index.notna()]
                stride = max(1, -(-len(values) // TB_MAX_POINTS))
                for step, v in values.iloc[::stride].items():
                    writer.add_scalar(tag, float(v), int(step))
                if stride > 1:
                    notes.append(f"{s.session_id}: {tag} thinned to every {stride}th step for TensorBoard")
        finally:
            writer.close()
        notes.append(f"TensorBoard scalars of {s.session_id} written to {logdir}")
    return notes


def export_sessions(sessions, fmt: str, out_dir, tensorboard: bool = True,
                    analysis=None) -> tuple[list[Path], list[str]]:
    """Export every session, each to a folder of its own (``folder_names``); returns (session
    folders written, notes for the user). ``analysis``: the ``Analysis`` of ``sessions``, which the
    TensorBoard scalars draw on (made when needed and not given)."""
    names = folder_names(sessions)
    folders = [export_session(s, fmt, out_dir, name) for s, name in zip(sessions, names, strict=True)]
    notes = [f"{s.session_id} exported as {name} ({safe_name(s.session_id)} was taken by another session)"
             for s, name in zip(sessions, names, strict=True) if name != safe_name(s.session_id)]
    if tensorboard:
        notes += export_tensorboard(sessions, out_dir, names, analysis=analysis)
    return folders, notes
