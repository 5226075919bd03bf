"""Figures computed here from the JSONL streams themselves (orjson, statistics, numpy), by the
definitions the docs give, for tests that check logkit's figures against an independent oracle.
Nothing here imports logkit."""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import orjson

_RANK = re.compile(r"_rank(\d+)\.jsonl$")


def streams(root) -> dict[str, dict[int, list[dict]]]:
    """session id -> rank -> its records, for every ``*_rank<N>.jsonl`` under ``root``."""
    out: dict[str, dict[int, list[dict]]] = defaultdict(dict)
    for path in sorted(Path(root).rglob("*_rank*.jsonl")):
        m = _RANK.search(path.name)
        if not m:
            continue
        records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        sid = next((r["session_id"] for r in records if r.get("session_id")), path.parent.name)
        out[sid][int(m[1])] = records
    return dict(out)


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def step_rows(records) -> list[dict]:
    """The training steps of one rank: step, step_time, data_time, batch, loss, samples/s as logged."""
    out = []
    for r in records:
        if r.get("type") != "training_step_complete":
            continue
        timing, metrics = r.get("timing") or {}, r.get("metrics") or {}
        out.append({"step": r.get("step"), "t": _num(timing.get("step_time_seconds")),
                    "data": _num(timing.get("data_time_seconds")), "batch": _num(metrics.get("total_batch_size")),
                    "loss": _num(metrics.get("loss")), "sps": _num(metrics.get("samples_per_second"))})
    return out


def timed(records) -> list[dict]:
    return [s for s in step_rows(records) if s["t"] is not None and s["t"] > 0]


def samples_per_second(ranks: dict[int, list[dict]]) -> float:
    """Headline throughput: sum(batch) / sum(step time) over the lowest rank's timed steps."""
    rows = timed(ranks[min(r for r in ranks if step_rows(ranks[r]))])
    return sum(s["batch"] for s in rows) / sum(s["t"] for s in rows)


def step_percentiles(records) -> tuple[float, float]:
    """(median, 95th percentile, linear interpolation) of one rank's timed step times."""
    times = [s["t"] for s in timed(records)]
    return statistics.median(times), float(np.percentile(times, 95))


def data_share(records) -> float:
    both = [s for s in timed(records) if s["data"] is not None]
    return sum(s["data"] for s in both) / sum(s["t"] for s in both)


def bus_factor(op: str, n: float) -> float:
    return 2 * (n - 1) / n if op in ("gradient_sync", "allreduce", "all_reduce") else 1.0


def collectives(records) -> list[dict]:
    """Every collective of a stream's communication records, one dict each, read off the file: a bucket's
    record as it is; a sharded step's record (its ``collectives`` list) an object each, with the record's
    own keys (step, rank, elapsed_s, timing_source) beside the object's."""
    out = []
    for r in records:
        if r.get("type") != "communication":
            continue
        listed = r.get("collectives")
        if listed is None:
            out.append(r)
        else:
            top = {k: v for k, v in r.items() if k != "collectives"}
            out += [{**top, **c} for c in listed]
    return out


def comm_records(records, op="gradient_sync") -> list[dict]:
    return [r for r in collectives(records) if r.get("op") == op]


def busbw_median(records, world_size: int, op="gradient_sync") -> float:
    """Median busbw of one rank's records of ``op``: as logged, else algbw (logged, else size / duration)
    x the bus factor at the record's group size (else the world size)."""
    values = []
    for r in comm_records(records, op):
        bus = _num(r.get("busbw_mb_s"))
        if bus is None:
            alg = _num(r.get("algbw_mb_s"))
            if alg is None:
                alg = r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3)
            bus = alg * bus_factor(op, _num(r.get("group_size")) or world_size)
        values.append(bus)
    return statistics.median(values)


def sync_share(ranks: dict[int, list[dict]], rank: int, op="gradient_sync") -> tuple[float, int]:
    """(share, matched steps): over the steps where the rank logged both the op and a step time (the
    lowest rank's step time when it logged none), sum of min(the step's summed durations, its time) /
    sum of those step times."""
    own = {s["step"]: s["t"] for s in timed(ranks[rank])}
    if not own:
        lowest = min(r for r in ranks if timed(ranks[r]))
        own = {s["step"]: s["t"] for s in timed(ranks[lowest])}
    per_step: dict[int, float] = defaultdict(float)
    for r in comm_records(ranks[rank], op):
        per_step[r["step"]] += r["duration_ms"] / 1000.0
    matched = [s for s in per_step if s in own]
    return sum(min(per_step[s], own[s]) for s in matched) / sum(own[s] for s in matched), len(matched)


def bandwidth_curve(ranks: dict[int, list[dict]]) -> list[tuple[str, float, float, int]]:
    """The plot's bandwidth points of a session: per (op, size in MB), each rank's median of the
    bandwidth as logged (busbw, else algbw) over its records with a positive size and bandwidth; across
    ranks, the record-weighted median of those medians (ranks ordered by median: the first whose
    cumulative records reach half of all); [(op, size_mb, median, records)] sorted by op and size."""
    per: dict[tuple[str, float], list[tuple[float, int]]] = defaultdict(list)
    for rank in sorted(ranks):
        groups: dict[tuple[str, float], list[float]] = defaultdict(list)
        for r in ranks[rank]:
            if r.get("type") != "communication":
                continue
            bw = _num(r.get("busbw_mb_s"))
            if bw is None:
                bw = _num(r.get("algbw_mb_s"))
            size = _num(r.get("size_bytes"))
            if bw is None or size is None or bw <= 0 or size <= 0:
                continue
            groups[(r.get("op") or "?", size / 1e6)].append(bw)
        for key, values in groups.items():
            per[key].append((statistics.median(values), len(values)))
    out = []
    for (op, size) in sorted(per):
        meds = sorted(per[(op, size)], key=lambda x: x[0])
        total = sum(n for _, n in meds)
        cum, pick = 0, meds[-1][0]
        for value, n in meds:
            cum += n
            if cum >= total / 2:
                pick = value
                break
        out.append((op, size, pick, total))
    return out


def loss_points(records) -> list[tuple[float, float]]:
    """(step, loss) of one rank's steps with a finite loss, by step."""
    return sorted((float(s["step"]), s["loss"]) for s in step_rows(records) if s["loss"] is not None)


def step_throughput(records) -> list[tuple[float, float]]:
    """(step, samples/s) per step: the logged samples/s, else batch / step time."""
    out = []
    for s in step_rows(records):
        v = s["sps"] if s["sps"] is not None else (s["batch"] / s["t"] if s["batch"] and s["t"] else None)
        if v is not None and s["step"] is not None:
            out.append((float(s["step"]), v))
    return out


def eval_points(records, name="eval_loss") -> list[tuple[float, float]]:
    return [(float(r["step"]), float(r["metrics"][name])) for r in records
            if r.get("type") == "evaluation" and _num((r.get("metrics") or {}).get(name)) is not None]


def gpu_points(ranks: dict[int, list[dict]]) -> list[tuple[str, float, float, float]]:
    """(host, gpu, time_s, utilization %) of every device of every gpu_snapshot, sorted."""
    out = []
    for records in ranks.values():
        for r in records:
            if r.get("type") != "gpu_snapshot":
                continue
            for d in r.get("devices") or []:
                u = _num(d.get("utilization_percent"))
                if u is not None:
                    out.append((r.get("hostname"), float(d["index"]), float(r["elapsed_s"]), u))
    return sorted(out)
