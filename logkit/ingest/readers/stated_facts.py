"""Run facts a log gives (world size, GPU count, total batch, strategy, ZeRO stage, ...), each with how it
is known and the line that says it, gathered while a file is read and written to meta at its end.

How a fact is known orders it: ``stated`` (a line says the value: ``dist_world_size=8``) beats
``derived`` (computed from stated values: ``Total train batch size 112 / (2 per device x 8 accumulated)``),
which beats ``inferred`` (a lower bound: the highest rank a line names, plus one). The first fact of the
best kind wins; meta gets the value, ``<fact>_from`` (``"stated: dist_world_size=8 (DeepSpeed launcher,
train.log:5)"``) where meta declares one, and ``facts_source[<fact>]`` = ``"file:line"``.

The derivations every framework shares are made here once (``derive``): the world size from the batch
sizes (total / (per device x accumulation), only where it divides), the GPU count from the world size and
the GPUs each process drives (``gpus_per_process``: transformers' ``n_gpu``, unsloth's ``Num GPUs used``:
never taken for the run's count by itself), the total batch from its three factors.
"""

from __future__ import annotations

from dataclasses import dataclass

from logkit.schema.meta import META_KEYS, SessionMeta

# how a fact is known, best first
STATED, DERIVED, INFERRED = "stated", "derived", "inferred"
_RANK = {STATED: 0, DERIVED: 1, INFERRED: 2}
# the frameworks by how much they say of the run: the tool a person ran beats the libraries it drives
# (LLaMA-Factory runs transformers' Trainer, which DeepSpeed or accelerate run under; Megatron-LM's and
# Lightning's own loops run under torchrun or with DeepSpeed)
_SPECIFIC = {"llamafactory": 0, "axolotl": 0, "ms-swift": 0, "unsloth": 1, "megatron": 1, "lightning": 1, "verl": 1, "trl": 2,
             "deepspeed": 3, "accelerate": 4, "transformers": 5, "torchrun": 6}
# facts kept while reading that are no meta key: only what derivations need
_WORKING = ("gpus_per_process", "highest_rank", "distributed")


@dataclass(frozen=True)
class Fact:
    """A fact's value, how it is known, what said it (a few words) and where (``file:line``)."""

    value: object
    how: str
    what: str
    where: str


class Facts:
    """The facts of one file (``label``: how its lines are cited) and the framework that wrote it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.found: dict[str, Fact] = {}
        self.framework: str | None = None
        self.framework_where: str | None = None

    def _add(self, key: str, value, how: str, what: str, line: int | None) -> None:
        if value is None:
            return
        declared = META_KEYS.get(key)
        if declared is not None and declared.why_not(value) is not None:
            return  # never an impossible fact (a world size of 0): the line is still recognised
        old = self.found.get(key)
        if old is None or _RANK[how] < _RANK[old.how]:
            where = self.label if line is None else f"{self.label}:{line}"
            self.found[key] = Fact(value, how, what, where)

    def state(self, key: str, value, what: str, line: int | None) -> None:
        self._add(key, value, STATED, what, line)

    def restate(self, key: str, value, what: str, line: int | None) -> None:
        """``state``, replacing what was stated before: a block printed again later (a framework's banner
        after a retry) says what the run went on with."""
        self.found.pop(key, None)
        self.state(key, value, what, line)

    def derive(self, key: str, value, what: str, line: int | None) -> None:
        self._add(key, value, DERIVED, what, line)

    def infer(self, key: str, value, what: str, line: int | None) -> None:
        self._add(key, value, INFERRED, what, line)

    def value(self, key: str):
        fact = self.found.get(key)
        return None if fact is None else fact.value

    def saw(self, framework: str, line: int | None) -> None:
        """A line only ``framework`` writes: the most specific framework seen is the file's."""
        if self.framework is None or _SPECIFIC.get(framework, 9) < _SPECIFIC.get(self.framework, 9):
            self.framework = framework
            self.framework_where = self.label if line is None else f"{self.label}:{line}"

    def rank_seen(self, rank: int | None, what: str, line: int | None) -> None:
        if rank is not None and rank >= 0 and (self.value("highest_rank") or -1) < rank:
            self.found.pop("highest_rank", None)
            self.state("highest_rank", rank, what, line)

    # -- the derivations every framework shares --------------------------------------------------------
    def derive_all(self) -> None:
        total, per, acc = (self.found.get(k) for k in ("total_batch_size", "per_device_batch_size",
                                                       "gradient_accumulation_steps"))
        if total and per and acc and per.value * acc.value and total.value % (per.value * acc.value) == 0:
            self.derive("world_size", total.value // (per.value * acc.value),
                        f"total batch {total.value} / ({per.value} per device x {acc.value} accumulated)",
                        _line(total.where))
        world, high = self.found.get("world_size"), self.found.get("highest_rank")
        if high is not None and world is not None and world.how != STATED and world.value <= high.value:
            del self.found["world_size"]  # a figure below a rank the log shows is not the job's
            world = None
        if world is None and high is not None:
            self.infer("world_size", high.value + 1, f"lower bound: highest rank seen ({high.value}) + 1",
                       _line(high.where))
            return  # a lower bound multiplies into nothing
        if per and acc and world and total is None:
            self.derive("total_batch_size", per.value * acc.value * world.value,
                        f"{per.value} per device x {acc.value} accumulated x world size {world.value}",
                        _line(per.where))
        gpp = self.found.get("gpus_per_process")
        if world and gpp and world.how != INFERRED:
            self.derive("gpu_count", world.value * gpp.value,
                        f"world size {world.value} x {gpp.value} GPU(s) per process ({gpp.what})", _line(gpp.where))

    def write(self, meta: SessionMeta) -> None:
        """The facts into ``meta`` (never over a value meta has): value, ``<fact>_from``, ``facts_source``."""
        self.derive_all()
        sources = dict(meta.facts_source or {})
        for key, fact in self.found.items():
            if key in _WORKING or key not in META_KEYS or meta.get(key) is not None:
                continue
            meta[key] = fact.value
            said = f"{fact.how}: {fact.what} ({fact.where})"
            if f"{key}_from" in META_KEYS:
                meta[f"{key}_from"] = said
            elif key == "duration_s":
                meta.duration_from = said
            sources[key] = fact.where
        if self.framework is not None and meta.framework is None:
            meta.framework = self.framework
            sources["framework"] = self.framework_where
        if sources:
            meta.facts_source = sources


def _line(where: str) -> int | None:
    tail = where.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None
