"""A session's ``meta``: every key a source may set, declared once with its type, unit and meaning.

``SessionMeta`` is the ``meta`` of a ``Session``: a dict (JSON, the cache and exports write it as
one; ``dict(meta)`` is a plain copy) whose keys are the ones declared here, each a ``Key``. Code
reads a key as an attribute, ``meta.world_size`` (None where no source said); the dict interface
stays for users, but a key not declared can be neither set nor read: ``meta["wrold_size"]``,
``meta.get("wrold_size")`` and ``SessionMeta(wrold_size=2)`` raise ``UndeclaredKey``. Which source
fills which key, and in which order, is ``logkit.ingest.meta``'s.

    >>> meta = SessionMeta(session_id="s1", world_size=2)
    >>> meta.world_size, meta.model, meta["session_id"], dict(meta)
    (2, None, 's1', {'session_id': 's1', 'world_size': 2})
    >>> SessionMeta(wrold_size=2)
    Traceback (most recent call last):
    ...
    logkit.schema.meta.UndeclaredKey: 'wrold_size is not a declared meta key (logkit.schema.meta.SessionMeta)'
    >>> SessionMeta.keys_declared()["duration_s"].unit
    's'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from logkit.schema.values import COUNT, INDEX, NON_NEGATIVE, RANKS, SECONDS, Domain, check

__all__ = ["Key", "SessionMeta", "UndeclaredKey", "META_KEYS", "FACTS", "BASES", "provenance", "basis_of",
           "contract_form"]

# --- where a fact came from -------------------------------------------------------------------
# A fact read from a log says how it was known, in its ``<fact>_from``: "stated: <what> (<file:line>)"
# (the log says the value), "derived: ..." (computed from values the log states) or "inferred: ..."
# (guessed from what the log shows; "inferred (lower bound): ..." where the truth may be more).
# ``meta.facts_source[fact]`` is the "file:line" it was read at. A stronger basis replaces a weaker
# one whatever the order the files are read in (``SessionMeta.state``).
BASES = ("inferred", "derived", "stated")  # weakest first
# The facts that carry their provenance: each has a ``<fact>_from`` key.
FACTS = ("world_size", "nodes", "hosts", "network", "strategy", "gpu_count", "total_batch_size")
# Between two values on the same basis: the larger count (a sub-communicator's nranks is not the job's,
# a host list seen by one file may miss hosts); else the first said (our records come first: a GPU
# capture's count of a host's GPUs is not the run's).
_LARGER = ("world_size", "nodes", "hosts")


def provenance(basis: str, what: str, source: str | None = None) -> str:
    """A ``<fact>_from`` in the contract's form: ``"stated: nRanks 8 (NCCL init, train.log:12)"``."""
    if basis not in BASES and not basis.startswith("inferred"):
        raise ValueError(f"basis {basis!r}: one of {BASES}")
    return f"{basis}: {what}" + (f" ({source})" if source else "")


def basis_of(text) -> int:
    """How strong a ``<fact>_from`` is: 3 stated, 2 derived, 1 inferred, 0 where it says none."""
    if not isinstance(text, str):
        return 0
    for rank, basis in enumerate(BASES, start=1):
        if text.startswith(basis):
            return rank
    return 0


def contract_form(text: str | None) -> str | None:
    """A ``<fact>_from`` written before the contract (a reader's own words) in its form: a lower
    bound is inferred, anything else a file says of itself is stated."""
    if text is None or basis_of(text):
        return text
    return f"inferred (lower bound): {text}" if "lower bound" in text else f"stated: {text}"


def _size(value) -> float:
    return len(value) if isinstance(value, (list, dict)) else value if isinstance(value, (int, float)) else 0


class UndeclaredKey(KeyError):
    """A meta key that ``SessionMeta`` does not declare."""


class Key:
    """One declared meta key: its name (the attribute's), type (a value is None or of it), unit and
    meaning. Read and set as an attribute of a ``SessionMeta``."""

    __slots__ = ("name", "type", "unit", "doc", "domain")

    def __init__(self, type: type | tuple[type, ...], doc: str, unit: str = "",  # noqa: A002
                 domain: Domain | None = None) -> None:
        self.name = ""
        self.type, self.unit, self.doc, self.domain = type, unit, doc, domain

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, meta, owner=None):
        return self if meta is None else dict.get(meta, self.name)

    def __set__(self, meta, value) -> None:
        dict.__setitem__(meta, self.name, value)

    def accepts(self, value) -> bool:
        """None, or a value of the key's type (an int where a float is declared; never a bool for a number)."""
        if value is None:
            return True
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if isinstance(value, bool) and bool not in types:
            return False
        return isinstance(value, types) or (float in types and isinstance(value, int))

    def why_not(self, value) -> str | None:
        """Why ``value`` cannot be this key's (its type, 64 bits, its ``domain``); None when it can."""
        return check(value, self.type, self.domain)

    def __repr__(self) -> str:
        return f"Key({self.name!r})"


_NUMBER = (int, float)


class SessionMeta(dict):
    """What a session's files say about it (see module doc): a dict of declared keys only."""

    __slots__ = ()

    # --- the run: who, where, with what ---------------------------------------------------------
    session_id = Key(str, "the session's id (its files' stem, or the folder or file it was read from)")
    mode = Key(str, "where it ran: vocab.Mode (SINGLE-GPU, MULTI-GPU, CPU, MULTI-CPU)")
    world_size = Key(int, "ranks in the job; None: unknown (never 1 by default)", "ranks", domain=RANKS)
    world_size_from = Key(str, "where the world size came from: 'stated: ...', 'derived: ...' or "
                               "'inferred (lower bound): ...' (schema.meta.provenance)")
    facts_source = Key(dict, "{fact: 'file:line'}: where each fact with a '<fact>_from' was read")
    gpu_count = Key(int, "GPUs the run used (0: a CPU run)", "GPUs", domain=INDEX)
    gpu_count_from = Key(str, "where gpu_count came from (stated / derived / inferred: ...)")
    total_batch_size_from = Key(str, "where total_batch_size came from (stated / derived / inferred: ...)")
    framework = Key(str, "what wrote the log, lower case: llamafactory, axolotl, unsloth, trl, transformers, "
                         "deepspeed, accelerate, megatron, ms-swift, lightning, torchrun")
    strategy = Key(str, "how the model is spread over the ranks: ddp, fsdp1, fsdp2 (our records), fsdp, deepspeed, none")
    strategy_from = Key(str, "where the strategy came from (stated / derived / inferred: ...)")
    zero_stage = Key(int, "DeepSpeed ZeRO stage", domain=INDEX)
    model = Key(str, "the model's name or path")
    backend = Key(str, "the torch.distributed backend (nccl, gloo)")
    hostname = Key(str, "rank 0's host")
    mixed_precision = Key(str, "the autocast dtype (bf16, fp16, no)")
    process_group = Key(str, "session_start's process_group: formed, none, unused (a process that trained alone)")
    launcher = Key(dict, "session_start's launcher: {name, world_size, rank, local_rank, master} where a launcher "
                         "started several processes")
    strategy_facts = Key(dict, "the wrapping's facts (session_start's strategy_facts: sharding, offload, dtypes, "
                               "group sizes)")
    total_batch_size = Key(int, "samples per optimizer step, all ranks and accumulation together", "samples",
                           domain=COUNT)
    per_device_batch_size = Key(int, "samples per rank per micro-batch", "samples", domain=COUNT)
    gradient_accumulation_steps = Key(int, "micro-batches per optimizer step", domain=COUNT)
    max_steps = Key(int, "optimizer steps the run was set to", "steps")
    seq_len = Key(int, "sequence length, where a session built by hand gives it (the config's otherwise)", "tokens",
                  domain=COUNT)
    config = Key((dict, str), "session_start's config (a dict), or a results.json's named configuration")
    config_name = Key(str, "the configuration a run folder's results.json names")
    versions = Key(dict, "python, torch, accelerate, transformers, cuda, nccl")
    gpus = Key(list, "[{index, name, uuid, memory_total_mb}]: session_start's, or nccl-tests' device table")
    model_info = Key(dict, "the model_info record (parameter counts, dtypes, quantization)")
    dataset_info = Key(dict, "the dataset_info record (size, sample shape)")
    system_info = Key(dict, "the system_info record (platform, CPUs, memory, disk)")
    # --- how it ended ---------------------------------------------------------------------------
    start_time = Key(str, "when rank 0 started (with its UTC offset where the source gives one)", "ISO 8601")
    end_time = Key(str, "when rank 0 ended", "ISO 8601")
    duration_s = Key(float, "rank 0's first record to its end (or to its last record: duration_from)", "s",
                     domain=SECONDS)
    duration_from = Key(str, "session_end, summary.json, results.json, or last record (a killed run's)")
    status = Key(str, "vocab.Status: session_end's or summary.json's, else what ingest concludes")
    status_detail = Key(str, "what the status rests on (\"still running (last written 4 s ago)\")")
    total_steps = Key(int, "the optimizer steps the run did", "steps", domain=INDEX)
    final_loss = Key(float, "the run's final loss, as the run states it")
    training_time_s = Key(float, "the sum of optimizer-step times", "s", domain=SECONDS)
    samples_seen = Key(int, "samples the run processed (session_end)", "samples", domain=INDEX)
    steps_per_second = Key(float, "the run's own figure (summary.json, results.json, trainer_state.json)", "steps/s",
                           domain=NON_NEGATIVE)
    samples_per_second = Key(float, "the run's own figure, as steps_per_second", "samples/s", domain=NON_NEGATIVE)
    train_loss = Key(float, "transformers' train_loss: the mean loss over the run")
    summary = Key(dict, "rank 0's summary.json, whole (schema.files.SUMMARY)")
    # --- the files ------------------------------------------------------------------------------
    source_kind = Key(str, "how the files were found: logkit, legacy, run_folder, rank_dirs, file")
    ranks_found = Key(list, "the ranks whose streams were found")
    files = Key(list, "every file of the session")
    folder = Key(str, "the folder the session was found in")
    formats = Key(list, "the formats of its files other than our streams")
    run = Key(str, "the run folder a results.json belongs to")
    companion_files = Key(list, "the run folder's files that are not logs (results.json)")
    session = Key(str, "the session a run folder's results.json names")
    optimizations = Key((str, list, dict), "the optimizations a results.json names")
    cache = Key(str, "the cache entry the session was read from (run.cache; never stored)")
    last_written = Key(str, "the latest modification time of its streams and text logs, at the read", "ISO 8601")
    idle_s = Key(float, "seconds between last_written and the read", "s")
    naive_timestamps = Key(bool, "verbose JSONL: its timestamps carry no UTC offset")
    # --- what other formats say -----------------------------------------------------------------
    nccl_tests = Key(list, "nccl-tests' tables: [{op, table, avg_busbw_gb_s, ...}]")
    nccl_version = Key(str, "the NCCL version the log prints")
    driver_version = Key(str, "the NVIDIA driver version (gpustat)")
    cuda_driver_version = Key(int, "the CUDA driver version NCCL prints (12020 for 12.2)", domain=INDEX)
    flight_recorder_version = Key(str, "the Flight Recorder dump's format version")
    progress = Key(dict, "a console capture's last progress bar (with its line)")
    num_examples = Key(int, "transformers' Num examples", "samples", domain=INDEX)
    nproc_per_node = Key(int, "torchrun's --nproc_per_node", "processes", domain=RANKS)
    data_parallel_size = Key(int, "the data-parallel size a launcher prints", "ranks", domain=RANKS)
    deepspeed_version = Key(str, "the DeepSpeed version the log prints")
    memory_mb = Key(dict, "memory figures a launcher prints, by name", "MB")
    link_speed_gbps = Key(_NUMBER, "the NICs' link rate the log names", "Gb/s", domain=NON_NEGATIVE)
    logging_steps = Key(int, "trainer_state.json: steps between log entries", "steps")
    train_batch_size = Key(int, "trainer_state.json: per-device batch", "samples", domain=COUNT)
    total_flos = Key(float, "trainer_state.json: floating-point operations of the run", "FLOPs", domain=NON_NEGATIVE)
    best_metric = Key(float, "trainer_state.json: the best evaluation metric")
    num_train_epochs = Key(float, "trainer_state.json: the epochs it was set to", "epochs", domain=NON_NEGATIVE)
    epoch = Key(float, "trainer_state.json: the epoch it reached", "epochs", domain=NON_NEGATIVE)
    nodes = Key(int, "hosts in the job", "hosts", domain=RANKS)
    nodes_from = Key(str, "where the node count came from (stated: nNodes, --nnodes; inferred (lower bound): "
                          "the hosts named)")
    hosts = Key(list, "the hosts the NCCL lines (or nccl-tests' table) name")
    hosts_from = Key(str, "where the hosts came from (stated / derived / inferred: ...)")
    ranks_by_host = Key(dict, "{host: [rank, ...]}")
    devices = Key(dict, "{host: [CUDA device, ...]} the NCCL lines (or DeepSpeed's WORLD INFO DICT) name")
    local_ranks = Key(int, "ranks per host (nccl init's localRanks)", "ranks", domain=RANKS)
    nccl_ranks_seen = Key(list, "the ranks NCCL's channel and tree lines name")
    network = Key(str, "NCCL's network (IB, Socket, or a plugin's name)")
    network_from = Key(str, "where the network came from: 'stated: Using network IB (...)', or derived from the "
                            "NICs or the channels' transport")
    network_fallback = Key(str, "the network NCCL fell back from, and why ('IB: NET/IB : No device found')")
    transports = Key(dict, "{transport: connections}: how NCCL's channels connect (P2P/IPC, SHM, NET/IB, NET/Socket)")
    nics = Key(list, "[{name, port, link}]: the NICs NCCL set up")
    nic_provider = Key(str, "the NET plugin's provider (efa, ...)")
    nic_count = Key(int, "NICs per node NCCL names", "NICs", domain=COUNT)
    ib = Key(bool, "NCCL set up InfiniBand")
    # --- sharded runs: how the collectives were timed (issue 25) ---------------------------------
    timing_source = Key(str, "session_start's timing_source: ddp_comm_hook, fsdp2_comm, torch_distributed, "
                             "flight_recorder, nccl_inspector, or none (timing_note says why)")
    timing_note = Key(str, "why the collectives were not timed (timing_source none)")
    # --- multi-node (issue 26): where each rank ran, and the clocks of its hosts ---------------------
    local_ranks_by_host = Key(dict, "{host: [local rank, ...]}: each host's ranks' local ranks, in the order of "
                                    "ranks_by_host")
    gpus_by_host = Key(dict, "{host: [GPU index, ...]}: the GPUs each host's ranks saw (session_start's gpus)")
    clock_offsets = Key(dict, "{host: {offset_s, uncertainty_s, ranks}}: each host's CLOCK_MONOTONIC minus rank 0's "
                              "host's, measured at start (session_start's clock_offset_s, the rank with the least "
                              "uncertainty)")

    def __init__(self, values: Mapping | Iterable = (), /, **more) -> None:
        super().__init__()
        self.update(values, **more)

    @classmethod
    def keys_declared(cls) -> dict[str, Key]:
        """Every declared key, in declaration order."""
        return META_KEYS

    @staticmethod
    def declared(key) -> str:
        """``key`` when it is declared; else ``UndeclaredKey``."""
        if key not in META_KEYS:
            raise UndeclaredKey(f"{key} is not a declared meta key (logkit.schema.meta.SessionMeta)")
        return key

    def __getitem__(self, key):
        return super().__getitem__(self.declared(key))

    def __setitem__(self, key, value) -> None:
        super().__setitem__(self.declared(key), value)

    def __delitem__(self, key) -> None:
        super().__delitem__(self.declared(key))

    def __contains__(self, key) -> bool:
        return super().__contains__(self.declared(key))

    def get(self, key, default=None):
        return super().get(self.declared(key), default)

    def setdefault(self, key, default=None):
        return super().setdefault(self.declared(key), default)

    def pop(self, key, *default):
        return super().pop(self.declared(key), *default)

    def update(self, values: Mapping | Iterable = (), /, **more) -> None:
        items = values.items() if isinstance(values, Mapping) else values
        for key, value in (*items, *more.items()):
            self[key] = value

    def state(self, fact: str, value, basis: str, what: str, source: str | None = None) -> bool:
        """Set ``fact`` (one of ``FACTS``) to ``value`` with its provenance (``provenance(basis, what,
        source)``) and ``facts_source[fact] = source``, unless what meta holds is on a stronger basis (or
        on the same one and larger, or first: ``_LARGER``). Whether it was set."""
        return self.offer(fact, value, provenance(basis, what, source), source)

    def offer(self, fact: str, value, said: str, source: str | None = None) -> bool:
        """``state`` with the provenance already written (``said``: a ``<fact>_from`` in the contract's form)."""
        if value is None or value == [] or value == {}:
            return False
        from_key = f"{fact}_from"
        held, held_from = self.get(fact), self.get(from_key)
        new_basis, old_basis = basis_of(said), basis_of(held_from)
        if held is not None and held != [] and held_from is not None:
            if new_basis < old_basis:
                return False
            if new_basis == old_basis and (fact not in _LARGER or _size(value) <= _size(held)):
                return False
        self[fact] = value
        self[from_key] = said
        if source is not None:
            self.facts_source = {**(self.facts_source or {}), fact: source}
        return True

    def fill(self, **values) -> None:
        """Set each key given that is not set yet (``setdefault`` of several, by name)."""
        for key, value in values.items():
            self.setdefault(key, value)

    def __ior__(self, values):
        self.update(values)
        return self

    def __or__(self, values) -> SessionMeta:
        out = self.copy()
        out.update(values)
        return out

    def copy(self) -> SessionMeta:
        return SessionMeta(self)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of the keys set (what JSON, the cache and exports hold)."""
        return dict(self)

    def mistyped(self) -> dict[str, object]:
        """The keys whose value is not of the declared type (None is every key's), with the value."""
        return {k: v for k, v in self.items() if not META_KEYS[k].accepts(v)}

    def __reduce__(self):
        return SessionMeta, (dict(self),)

    def __repr__(self) -> str:
        return f"SessionMeta({dict.__repr__(self)})"


META_KEYS: dict[str, Key] = {name: key for name, key in vars(SessionMeta).items() if isinstance(key, Key)}
