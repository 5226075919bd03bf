"""The contract: every text line kind survives format-then-parse, and the seeds' lines parse."""

from __future__ import annotations

import math
import string
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkit import schema
from logkit.schema import LINE_KINDS, busbw_factor, parse_message

_FLOATS = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
_POSITIVE = st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False)
_INTS = st.integers(min_value=0, max_value=10**7)
_WORD = st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=20)
_LINE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=80)
_LEVEL = st.sampled_from(["DEBUG", "INFO", "WARN", "WARNING", "ERROR", "CRITICAL"])
_KEY = st.from_regex(r"[A-Za-z][A-Za-z0-9_/()-]{0,10}( [A-Za-z0-9_]{1,8}){0,2}", fullmatch=True)
_VALUE = _LINE_TEXT.map(str.strip).filter(lambda v: ": " not in v)

# One strategy per field of every kind; a field not listed gets a number by its converter.
STRATEGIES = {
    "main_line": {
        "time": st.times().map(lambda t: t.strftime("%H:%M:%S")),
        "level": _LEVEL,
        "message": _LINE_TEXT,
    },
    "process_line": {
        "datetime": st.datetimes(min_value=datetime(1970, 1, 1)).map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S")),
        "level": _LEVEL,
        "process": _WORD,
        "message": _LINE_TEXT,
    },
    "step_line": {"loss": st.one_of(_FLOATS, st.just(math.nan)), "learning_rate": _POSITIVE},
    "bullet_line": {"key": _KEY, "value": _VALUE},
    "header_field": {"key": _KEY, "value": _VALUE},
    "communication": {"op": _WORD},
    "section_line": {"title": st.text(alphabet=string.ascii_letters + " ()📊📡", min_size=1, max_size=30).filter(
        lambda t: not t[0].isspace() and not t.endswith((":", " ")))},
    "nan_rule": {"rule": st.integers(20, 120).map(lambda n: "=" * n)},
    "nan_title": {"kind": st.sampled_from(["nan_loss", "nan_grad", "inf_loss"])},
    "nan_dump": {"path": st.text(alphabet=string.ascii_letters + string.digits + "/_.-", min_size=1, max_size=40)},
    "errors_line": {
        "timestamp": st.datetimes(min_value=datetime(1970, 1, 2)).map(lambda d: d.isoformat() + "+00:00"),
        "level": _LEVEL,
        "message": _LINE_TEXT,
    },
}


def _strategy_for(kind_name: str, field_name: str, field) -> st.SearchStrategy:
    special = STRATEGIES.get(kind_name, {}).get(field_name)
    if special is not None:
        return special
    if field.convert is int:
        return _INTS
    return _POSITIVE if field.spec else _FLOATS


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.parametrize("kind_name", sorted(LINE_KINDS))
def test_round_trip_every_line_kind(kind_name):
    kind = LINE_KINDS[kind_name]
    values = st.fixed_dictionaries({name: _strategy_for(kind_name, name, f) for name, f in kind.fields.items()})

    @settings(max_examples=150, deadline=None)
    @given(values)
    def check(v):
        line = kind.format(**v)
        parsed = kind.parse(line)
        assert parsed is not None, f"{kind_name} did not read its own line: {line!r}"
        for name, f in kind.fields.items():
            expected = f.canonical(v[name])
            if isinstance(expected, str):
                expected = expected.strip() if kind_name in ("bullet_line", "header_field") else expected
            assert _same(parsed[name], expected), (name, line, parsed[name], expected)

    check()


# Seed lines, verbatim (LOG_FORMATS.md: the seed's example lines must still parse).
SEED_LINES = [
    ("main_line", "14:30:22 | INFO  | Session ID: training_20241206_143022",
     {"time": "14:30:22", "level": "INFO", "message": "Session ID: training_20241206_143022"}),
    ("step_line", "Step   50/1000 ( 5.0%) | Loss: 2.1234 | LR: 1.50e-04 | Speed: 2.5 steps/s | ETA: 6.3min",
     {"step": 50, "max_steps": 1000, "percent": 5.0, "loss": 2.1234, "learning_rate": 1.5e-4,
      "steps_per_second": 2.5, "eta_minutes": 6.3}),
    ("metrics_line", "  └─ Metrics: step_duration: 0.400, samples_per_second: 5.0",
     {"step_duration": 0.4, "samples_per_second": 5.0}),
    ("bullet_line", "  • eval_loss: 1.8765", {"key": "eval_loss", "value": "1.8765"}),
    ("bullet_line", "  • GPU 0: NVIDIA RTX 4090 (24.0GB)", {"key": "GPU 0", "value": "NVIDIA RTX 4090 (24.0GB)"}),
    ("process_line", "2024-12-06 14:30:25 | INFO     | MainProcess  | Distributed backend: nccl",
     {"datetime": "2024-12-06 14:30:25", "level": "INFO", "process": "MainProcess",
      "message": "Distributed backend: nccl"}),
    ("multigpu_step", "Multi-GPU Step 20 | Processes: 2 | Local rank: 0 | Process index: 0",
     {"step": 20, "processes": 2, "local_rank": 0, "process_index": 0}),
    ("communication",
     "Communication | gradient_sync | Rank 0 | Size: 45.67MB | Duration: 12.34ms | Bandwidth: 3701.46MB/s",
     {"op": "gradient_sync", "rank": 0, "size_mb": 45.67, "duration_ms": 12.34, "bandwidth_mb_s": 3701.46}),
    ("communication", "Communication | gradient_sync | Size: 45.67MB | Bandwidth: 3701MB/s",
     {"op": "gradient_sync", "rank": None, "size_mb": 45.67, "duration_ms": None, "bandwidth_mb_s": 3701.0}),
    ("performance",
     "Performance | Step 100 | Avg step time: 0.380s | Throughput: 10.5 samples/s | Total batch size: 4",
     {"step": 100, "avg_step_time_s": 0.38, "throughput_samples_s": 10.5, "total_batch_size": 4}),
    ("gpu_util_low", "GPU 1 utilization low: 45.2%", {"gpu": 1, "utilization_pct": 45.2}),
    ("slow_step", "Slow training detected: 15.1s per step", {"step_time_s": 15.1}),
    ("header_field", "GPU Count: 2", {"key": "GPU Count", "value": "2"}),
]


@pytest.mark.parametrize("kind_name,line,expected", SEED_LINES)
def test_seed_lines_parse(kind_name, line, expected):
    assert LINE_KINDS[kind_name].parse(line) == expected


def test_every_kind_has_an_example_it_reads():
    for kind in LINE_KINDS.values():
        assert kind.example and kind.parse(kind.example) is not None, kind.name


def test_parse_message_picks_the_specific_kind_before_key_value():
    name, values = parse_message("Performance | Step 100 | Avg step time: 0.380s | Throughput: 10.5 samples/s"
                                 " | Total batch size: 4")
    assert name == "performance" and values["step"] == 100
    assert parse_message("World size: 2") == ("header_field", {"key": "World size", "value": "2"})
    assert parse_message("no grammar here") is None


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert busbw_factor("gradient_sync", 2) == 1.0
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert busbw_factor("broadcast", 8) == 1.0


def test_every_event_type_is_listed_once():
    assert len(set(schema.EVENT_TYPES)) == len(schema.EVENT_TYPES) == 22  # timed_phase: the ledger's; phase_begin
    assert {"training_step_complete", "step_phases", "stall"} <= set(schema.EVENT_TYPES)
