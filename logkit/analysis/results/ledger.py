"""The ledger of where a session's hours went (``kernels/ledger.py`` makes it): one ``LedgerRow`` per
session whose logs give its wall-clock, or a part of it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LedgerRow:
    """One session's wall-clock split by ``vocab.LedgerCategory``.

    ``wall_s``: None where the logs do not give it (a checkpoint's trainer_state.json: its evaluations
    alone). ``seconds`` and ``shares`` (of ``wall_s``) by category, None where the logs cannot say;
    ``ranks``: how many ranks the split is the mean over; ``basis``: what the wall and the split rest
    on; ``unknown``: what the logs cannot split (a foreign log's categories); ``notes``: what else to
    know (the rest's largest parts, a rank without its end)."""

    session_id: str | None
    wall_s: float | None
    seconds: dict = field(default_factory=dict)
    shares: dict = field(default_factory=dict)
    ranks: int = 1
    basis: str = ""
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def known_s(self) -> float:
        """The seconds the categories account for (the unknown ones count 0)."""
        return sum(v for v in self.seconds.values() if v is not None)
