"""The emitter against the contract in ``logkit.schema.records``: a real run writes only keys its
specs declare, every frame column of a frame's record is there, and a record laid out by the
emitter reads back through the spec field by field (so a key renamed in the schema is renamed
in the stream). Also: an op without a bus factor has no busbw, and no average counts it."""

from __future__ import annotations

import sys
import time

import pytest

from logkit.schema.findings import FindingKind
from logkit.schema.records import (
    ANOMALY,
    COLLECTIVE,
    COMMUNICATION,
    DATASET_INFO,
    ERROR,
    GPU_DEVICE,
    GPU_SNAPSHOT,
    MODEL_INFO,
    NAN_DETECTED,
    PERFORMANCE,
    RECORD_SPECS,
    RESOURCE_WARNING,
    SESSION_END,
    SESSION_START,
    STEP_PHASES,
    SYSTEM_INFO,
    TRAINING_STEP,
    RecordSpec,
)
from logkit.schema.vocab import ENDED, Mode
from tests.support.launch import read_jsonl
from tests.unit.hooks.test_sampler import fake_pynvml
from trainer_hooks import session_logger as session_mod
from trainer_hooks import timing_plan
from trainer_hooks.builder import (
    COLLECTIVE_FIELDS,
    COMM_FIELDS,
    PERF_FIELDS,
    PHASE_FIELDS,
    STEP_COMM_FIELDS,
    STEP_FIELDS,
    RecordBuilder,
)
from trainer_hooks.distributed import RankInfo
from trainer_hooks.layout import HEADER, layout, reader
from trainer_hooks.sampling import nvml as nvml_mod
from trainer_hooks.session_logger import SessionLogger
from trainer_hooks.settings import resolve_settings
from trainer_hooks.steps import PendingStep
from trainer_hooks.summary import build_summary

# Host, model and data facts: kept whole as the session's meta by the readers; beyond the keys
# every record has (and model_info's parameter counts), their content is free-form.
FREE_FORM = {SYSTEM_INFO.type, MODEL_INFO.type, DATASET_INFO.type}
STEPS = 12


def _paths(value: dict, prefix: tuple = ()):
    """Every key path of a JSON object, groups included."""
    for key, item in value.items():
        path = (*prefix, key)
        yield path
        if isinstance(item, dict):
            yield from _paths(item, path)


def _undeclared(spec: RecordSpec, record: dict) -> list[str]:
    raws = {f.raw: f for f in spec}
    free = [f.raw for f in spec if f.type in (dict, list, object)]
    out = []
    for path in _paths(record):
        declared = path in raws or any(path[:len(raw)] == raw for raw in free)
        group = any(raw[:len(path)] == path for raw in raws)  # the group of declared keys (timing{})
        if not declared and not group:
            out.append(".".join(path))
    return out


def _present(spec: RecordSpec, record: dict, field) -> bool:
    value = record
    for key in field.raw:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A short ``ultra`` session on two fake ranks' rank 0, with every kind of record: timed
    gradient syncs, a GPU (a fake NVML), a trainer log with numbers of its own, a slow step, a
    NaN loss, evaluation, checkpoint, epoch end and an error."""
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=1))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_mod.reset_nvml()
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 2, 0, "gloo", "cpu", "testhost"))
    monkeypatch.setattr(timing_plan, "find_ddp", lambda model: model)
    monkeypatch.setattr(timing_plan, "install_comm_hook", lambda ddp, timer: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    log = SessionLogger(tmp_path, "ultra", gpu_snapshot_interval=0.1, memory_high_pct=0.0, performance_log_steps=4,
                        stall_min_s=0.1, stall_factor=2.0)
    log.start(model=model, per_device_batch_size=2, max_steps=STEPS, dataset=[[1.0, 2.0]] * 4)
    log.comm.group_size = 2
    log.attach_model(model)
    for step in range(1, STEPS + 1):
        log.step_begin()
        now = time.perf_counter()
        log.comm.pending.extend((bucket, 4000, now - 0.001, now, bucket) for bucket in range(2))
        log.micro_batch_end()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        log.check_gradients(model, step)
        model.zero_grad()
        time.sleep(0.4 if step == 8 else 0.01)  # step 8 is slow, and stalls (over 0.1 s)
        loss = float("nan") if step == 10 else 2.0
        log.step_end(step, epoch=step / STEPS, tokens=64, flush=False)
        log.trainer_log(step, {"loss": loss, "epoch": step / STEPS})
        log.add_metrics(step, {"loss": loss, "learning_rate": 1e-3, "grad_norm": 0.5, "mean_token_accuracy": 0.5})
    log.evaluation(STEPS, {"eval_loss": 1.5})
    with log.phase("save"):  # a phase_begin record when it starts
        log.checkpoint(STEPS, tmp_path / "checkpoint")
    log.epoch_end(STEPS, 1.0)
    try:
        raise ValueError("a fault of the training")
    except ValueError as exc:
        log.error(exc)
    log.end()
    nvml_mod.reset_nvml()
    return read_jsonl(tmp_path / log.session_id / f"{log.session_id}_rank0.jsonl")


def test_a_real_run_writes_only_declared_keys(run):
    assert {r["type"] for r in run} == set(RECORD_SPECS)  # every kind of record, once at least
    for record in run:
        spec = RECORD_SPECS[record["type"]]
        if record["type"] in FREE_FORM:
            record = {k: v for k, v in record.items() if k in {f.raw[0] for f in spec}}
        assert _undeclared(spec, record) == [], record["type"]


def test_every_device_of_a_real_snapshot_has_the_declared_keys(run):
    """A device of a gpu_snapshot holds exactly GPU_DEVICE's keys (the ids, each metric of the table
    and its interval extremes); the sampler's latest reading beside the steps, a part of them."""
    declared = {f.raw for f in GPU_DEVICE}
    snapshots = [r for r in run if r["type"] == GPU_SNAPSHOT.type]
    devices = [d for r in snapshots for d in r[GPU_SNAPSHOT.items_key]]
    assert devices and all({(k,) for k in d} == declared for d in devices)
    latest = [d for r in run for d in (((TRAINING_STEP["resource_usage"].get(r) or {}).get("gpu") or {})
                                       .get("devices") or [])]
    assert latest and all(_undeclared(GPU_DEVICE, d) == [] for d in latest)


def test_a_real_run_writes_only_declared_words(run):
    """The kind of every finding record, and the status and mode, are words the schema declares."""
    kinds = {ANOMALY["subkind"].get(r) for r in run if r["type"] in (ANOMALY.type, RESOURCE_WARNING.type,
                                                                     NAN_DETECTED.type, ERROR.type)}
    assert kinds - {None} and kinds - {None} <= FindingKind.words()
    (end,) = [r for r in run if r["type"] == SESSION_END.type]
    (start,) = [r for r in run if r["type"] == SESSION_START.type]
    assert SESSION_END["status"].get(end) in ENDED and SESSION_START["mode"].get(start) in Mode.words()


def test_every_frame_column_is_where_its_spec_says(run):
    first_step = min(r["elapsed_s"] for r in run if r["type"] == TRAINING_STEP.type)
    for spec in (TRAINING_STEP, COMMUNICATION, PERFORMANCE, STEP_PHASES, GPU_SNAPSHOT):
        records = [r for r in run if r["type"] == spec.type]
        assert records, spec.type
        for record in records:
            before_steps = record["elapsed_s"] < first_step  # a snapshot before step 1 has no step
            missing = [f.name for f in spec.frame_fields
                       if not _present(spec, record, f) and not (f.name == "step" and before_steps)]
            assert missing == [], (spec.type, missing)
    devices = [d for r in run if r["type"] == GPU_SNAPSHOT.type for d in r["devices"]]
    assert devices and all(_present(GPU_DEVICE, d, f) for d in devices for f in GPU_DEVICE.frame_fields)


@pytest.mark.parametrize("spec, names", [(TRAINING_STEP, STEP_FIELDS), (COMMUNICATION, COMM_FIELDS),
                                         (COMMUNICATION, STEP_COMM_FIELDS), (COLLECTIVE, COLLECTIVE_FIELDS),
                                         (PERFORMANCE, PERF_FIELDS), (STEP_PHASES, PHASE_FIELDS), (ANOMALY, HEADER)])
def test_the_emitters_layouts_read_back_through_the_spec(spec, names):
    """Each field gets a value of its own: the compiled layout puts it where ``spec.build`` does,
    in the same order, and ``spec[name].get`` finds it there; a spliced mapping lands in its group."""
    tokens = names.split()
    values = {t: f"value {i}" for i, t in enumerate(tokens) if not t.startswith("**")}
    splices = {t[2:]: {f"extra {i}": i} for i, t in enumerate(tokens) if t.startswith("**")}
    record = layout(spec, names)(**values, **splices)
    for name, value in values.items():
        assert spec[name].get(record) == value, name
    for name, extra in splices.items():
        group = spec[name].get(record)
        assert group.items() >= extra.items()
        for key in extra:
            del group[key]
    built = spec.build(**values)
    assert record == built and list(_paths(record)) == list(_paths(built))


def test_a_built_step_reads_back_by_name():
    settings = resolve_settings("high", resource_usage_steps=0, trends=False)
    builder = RecordBuilder(settings, dict(session_id="s", rank=1, world_size=2, local_rank=1), max_steps=10,
                            total_batch_size=8)
    pending = PendingStep(wall=1_733_495_422.5, elapsed=3.25, step=4, epoch=0.5, step_time=0.5, data_time=0.125,
                          batch=8, tokens=512, avg_step_time=0.4, loss=1.25, learning_rate=1e-4, grad_norm=float("nan"),
                          extra_metrics={"mean_token_accuracy": 0.75})
    (record,) = builder.step(pending)
    read = TRAINING_STEP.read(record)
    assert {k: read[k] for k in ("step", "rank", "time_s", "epoch", "step_time_s", "data_time_s", "loss",
                                 "learning_rate", "grad_norm", "samples_per_s", "tokens_per_s", "total_batch_size",
                                 "max_steps", "local_rank", "avg_step_time_s", "eta_minutes")} == {
        "step": 4, "rank": 1, "time_s": 3.25, "epoch": 0.5, "step_time_s": 0.5, "data_time_s": 0.125, "loss": 1.25,
        "learning_rate": 1e-4, "grad_norm": None, "samples_per_s": 16.0, "tokens_per_s": 1024.0, "total_batch_size": 8,
        "max_steps": 10, "local_rank": 1, "avg_step_time_s": 0.4, "eta_minutes": 0.04}
    assert read["metrics"]["mean_token_accuracy"] == 0.75
    assert list(read["metrics"]) == ["loss", "learning_rate", "grad_norm", "mean_token_accuracy", "samples_per_second",
                                     "tokens_per_second", "total_batch_size"]


def test_a_compiled_reader_reads_what_the_spec_reads():
    names = " ".join(f.name for f in TRAINING_STEP)
    read = reader(TRAINING_STEP, names)
    for record in (TRAINING_STEP.build(step=3, step_time_s=0.5, loss=1.25, epoch=0.1),
                   {"step": 3, "timing": "oops", "metrics": {"loss": 2.0}}, {}):
        assert read(record) == tuple(f.get(record) for f in TRAINING_STEP)


def test_an_unknown_bus_factor_is_null_and_the_summary_averages_only_what_is_known():
    builder = RecordBuilder(resolve_settings("high"), dict(session_id="s", rank=0, world_size=4, local_rank=0),
                            max_steps=None, total_batch_size=None)
    synced = builder.comm(1.7e9, 1.0, [(1, 0, 4_000_000, 0.002), (1, 1, 4_000_000, 0.0)], "wall", group_size=4)
    custom = builder.comm(1.7e9, 1.0, [(1, 0, 1_000_000, 0.001)], "wall", group_size=4, op="my_op")
    assert [COMMUNICATION.read(r)["busbw_mb_s"] for r in synced] == [3000.0, None]  # 2000 MB/s x 2(n-1)/n; 0 s
    assert [COMMUNICATION.read(r)["algbw_mb_s"] for r in synced] == [2000.0, None]
    (record,) = custom
    assert COMMUNICATION.read(record)["algbw_mb_s"] == 1000.0 and COMMUNICATION["busbw_mb_s"].get(record) is None
    start = SESSION_START.build(session_id="s", gpus=[])
    end = SESSION_END.build(status="completed", steps_logged=1, samples_seen=0)
    comm = build_summary(start, end, 1.0, builder.comm_stats)["communication"]
    assert comm["gradient_sync"]["count"] == 2 and comm["gradient_sync"]["avg_algbw_mb_s"] == 2000.0
    assert comm["gradient_sync"]["avg_busbw_mb_s"] == 3000.0  # the 0 s bucket is not averaged in as 0
    assert comm["my_op"]["avg_algbw_mb_s"] == 1000.0 and comm["my_op"]["avg_busbw_mb_s"] is None


def test_a_sharded_steps_collectives_are_one_record_each_step_and_a_comm_row_each():
    """A sharded model's collectives (FsdpCommTimer / DistTimer items) make one communication record per
    step, each collective an object of its collectives[] with exactly COLLECTIVE's keys; read back, a
    comm row each with the record's step, rank and timing source (the text log: test_emitter_textlogs)."""
    from logkit.ingest.mapping import map_records, raw_records

    builder = RecordBuilder(resolve_settings("high"), dict(session_id="s", rank=1, world_size=2, local_rank=1),
                            max_steps=None, total_batch_size=None)
    items = [(3, 0, "all_gather", "forward", 2_000_000, 0.001), (3, 1, "all_gather", "forward", 4_000_000, 0.002),
             (3, 1, "reduce_scatter", "backward", 4_000_000, 0.004, 4), (4, 0, "all_gather", "forward", 2_000_000, 0.0)]
    records = builder.collectives(1.7e9, 2.5, items, "wall", group_size=2)
    assert [COMMUNICATION.read(r)["step"] for r in records] == [3, 4]
    listed = [c for r in records for c in r[COMMUNICATION.items_key]]
    assert all({(k,) for k in c} == {f.raw for f in COLLECTIVE} for c in listed)
    assert all(_undeclared(COMMUNICATION, r) == [] for r in records)
    comm = map_records(raw_records(records, [7, 8]), "s_rank1.jsonl", 1)["comm"]
    rows = comm.select(["step", "rank", "op", "phase", "size_bytes", "duration_ms", "algbw_mb_s", "busbw_mb_s",
                        "group_size", "bucket", "timing_source", "source"]).to_pylist()
    # 2 MB in 1 ms = 2000 MB/s, all-gather's bus factor (n-1)/n = 1/2 at n=2; reduce-scatter at n=4: 3/4
    assert rows == [
        dict(step=3, rank=1, op="all_gather", phase="forward", size_bytes=2_000_000, duration_ms=1.0,
             algbw_mb_s=2000.0, busbw_mb_s=1000.0, group_size=2, bucket=0, timing_source="wall", source="s_rank1.jsonl:7"),
        dict(step=3, rank=1, op="all_gather", phase="forward", size_bytes=4_000_000, duration_ms=2.0,
             algbw_mb_s=2000.0, busbw_mb_s=1000.0, group_size=2, bucket=1, timing_source="wall", source="s_rank1.jsonl:7"),
        dict(step=3, rank=1, op="reduce_scatter", phase="backward", size_bytes=4_000_000, duration_ms=4.0,
             algbw_mb_s=1000.0, busbw_mb_s=750.0, group_size=4, bucket=1, timing_source="wall", source="s_rank1.jsonl:7"),
        dict(step=4, rank=1, op="all_gather", phase="forward", size_bytes=2_000_000, duration_ms=0.0,
             algbw_mb_s=None, busbw_mb_s=None, group_size=2, bucket=0, timing_source="wall", source="s_rank1.jsonl:8")]


def test_both_communication_layouts_in_one_stream_read_in_the_streams_order():
    """A record per bucket (DDP) and a record per step with collectives[] (a sharded model) read alike,
    row order as the stream's lines."""
    from logkit.ingest.mapping import map_records, raw_records

    bucket = COMMUNICATION.build(type=COMMUNICATION.type, step=1, rank=0, op="gradient_sync", size_bytes=100,
                                 duration_ms=1.0, bucket=0, timing_source="wall")
    step = COMMUNICATION.build(type=COMMUNICATION.type, step=2, rank=0, timing_source="wall", collectives=[
        COLLECTIVE.build(op="all_gather", size_bytes=10, bucket=0, phase="forward"),
        COLLECTIVE.build(op="reduce_scatter", size_bytes=20, bucket=0, phase="backward")])
    later = dict(bucket, step=3)
    comm = map_records(raw_records([bucket, step, later], [1, 2, 3]), "x_rank0.jsonl", 0)["comm"]
    assert comm.select(["step", "op", "size_bytes", "source"]).to_pylist() == [
        dict(step=1, op="gradient_sync", size_bytes=100, source="x_rank0.jsonl:1"),
        dict(step=2, op="all_gather", size_bytes=10, source="x_rank0.jsonl:2"),
        dict(step=2, op="reduce_scatter", size_bytes=20, source="x_rank0.jsonl:2"),
        dict(step=3, op="gradient_sync", size_bytes=100, source="x_rank0.jsonl:3")]
