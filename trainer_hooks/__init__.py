"""trainer_hooks: the thin emitter that runs inside training and writes logkit sessions.

``LogkitCallback`` for transformers / TRL trainers, ``TrainingLogger`` for hand-written
accelerate loops. Standard library and orjson at import; torch and transformers load only
with the piece that needs them.
"""

from __future__ import annotations

__all__ = ["LogkitCallback", "VerboseLoggingCallback", "TrainingLogger", "SessionLogger"]


def __getattr__(name: str):
    if name in ("LogkitCallback", "VerboseLoggingCallback"):
        from trainer_hooks import callback

        return getattr(callback, name)
    if name == "TrainingLogger":
        from trainer_hooks.loop import TrainingLogger

        return TrainingLogger
    if name == "SessionLogger":
        from trainer_hooks.session_logger import SessionLogger

        return SessionLogger
    raise AttributeError(f"module 'trainer_hooks' has no attribute {name!r}")
