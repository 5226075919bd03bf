"""Overhead of the emitter on training, measured three ways in one run.

Part 1 (per record): the training-thread cost of the logger's calls per record they produce
(``step_begin`` + ``step_end`` with 4 gradient-sync buckets a step), the writer thread working
concurrently; and the writer thread's own CPU time per step. Target: <= 20 us per record.

Part 2 (upper bound, deterministic): while an MLP whose optimizer step takes about 50 ms on one
CPU thread trains under ``TrainingLogger`` (``high``: every step recorded, trends, resource
sampling), the logger's CPU time is counted where it is spent: the training thread's time
inside the logger calls, plus the CPU time of the writer and sampler threads (per-thread CPU
from ``/proc/self/task/<tid>/schedstat``). Divided by the step time it bounds what the
logger can cost training even if none of its threads' work overlapped with training.
Target: <= 0.5 %.

Part 2b (the loop helper, a row per level): counted as the Trainer's rows are (part 5), not as part 2:
``time.thread_time()`` (CPU, where part 2 takes wall time) around the logger's calls (``step_begin``, ``check_gradients`` where the level reads gradients,
``log_step``) and every ``logkit-*`` thread's CPU, per step, against the level's budget (0.2 / 0.4 /
0.5 / 1 % of a 50 ms step); the levels alternated over 3 runs, median and range.

Part 3 (end to end, statistical): blocks of steps without and with logging, in ABBA order
(the variant that runs first alternates from pair to pair, so the writer's work spilling
past a logged block lands on both variants alike), many pairs; the median of the per-pair
ratios with its interquartile range and a bootstrap 95 % interval, so the noise is visible.
``--aa`` also runs the same design with no logging in either block (the noise floor).

Part 1b (FSDP2): the same for a model of 3 ``fully_shard`` units: 9 collectives a step through the
timing wrappers (the collectives themselves taken out), step_begin + step_end, and the writer
thread; against DDP with as many timed operations (9 buckets a step) measured the same way (whose
figure leaves the comm hook's own work out), alternated, medians of 5; the wrappers' own time is
given apart. Target: within the DDP figure (the FSDP median inside the DDP runs' range).

Part 4 (``--end-verdict``, a fixed cost at the end): the wall time rank 0 spends in ``end()`` of a
completed session with the verdict on and off (``end_verdict``: the analysis process on the
session's folder), alternated, on sessions of 100 and 2,000 steps with 4 gradient-sync buckets a
step; and the analysis process' CPU time.

Part 5 (``--trainer``, or ``--trainer-only``): the same count through a real transformers ``Trainer``
and ``LogkitCallback``, a row per verbosity level (``benchmarks/trainer_overhead.py``: the callback's
per-step methods on the training thread, ``time.thread_time`` around each, plus every ``logkit-*``
thread's CPU; per step, as a share of the same invocation's step without the callback).

    python benchmarks/emitter_overhead.py            # ~4 minutes (parts 1, 1b, 2, 2b, 3)
    python benchmarks/emitter_overhead.py --quick    # ~1 minute, noisier
    python benchmarks/emitter_overhead.py --end-verdict-only   # part 4 alone, ~1 minute
    python benchmarks/emitter_overhead.py --trainer-only       # part 5 alone, ~3 minutes
    python benchmarks/emitter_overhead.py --levels-only        # parts 2b and 5: a row per level, ~6 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.trainer_overhead import BUDGET_PCT, logger_threads, thread_cpu_s

os.environ.setdefault("OMP_NUM_THREADS", "1")


# -- per-thread CPU time: trainer_overhead.thread_cpu_s ------------------------------------------
def _native_id(thread: threading.Thread | None) -> int | None:
    return getattr(thread, "native_id", None) if thread is not None else None


def _wait_writer_idle(writer, timeout: float = 5.0) -> None:
    """Until the writer thread has taken everything handed over (then a little for the last item)."""
    deadline = time.perf_counter() + timeout
    while writer is not None and writer.pending() and time.perf_counter() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)


# -- the training workload ----------------------------------------------------------------------
def _model_for(step_ms: float):
    """An MLP and batch sized so that forward+backward+AdamW takes about ``step_ms``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    width = 256
    while True:
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                    torch.nn.ReLU(), torch.nn.Linear(width, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(512, width), torch.randn(512, 1)
        t = _time_steps(model, opt, x, y, 5)
        if t >= step_ms / 1000 or width >= 4096:
            return model, opt, x, y
        width = int(width * 1.25)


def _train_step(model, opt, x, y):
    import torch

    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def _time_steps(model, opt, x, y, n):
    t0 = time.perf_counter()
    for _ in range(n):
        _train_step(model, opt, x, y)
        opt.step()
        opt.zero_grad()
    return (time.perf_counter() - t0) / n


class _Workload:
    """The two variants of a block of steps; the logged one counts its time inside the logger."""

    def __init__(self, model, opt, x, y, tlog, check_grads: bool) -> None:
        self.model, self.opt, self.x, self.y, self.tlog = model, opt, x, y, tlog
        self.check_grads = check_grads
        self.logger_s = 0.0  # training-thread time inside logger calls
        self.logged_steps = 0

    def base(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            loss = _train_step(self.model, self.opt, self.x, self.y)
            self.opt.step()
            self.opt.zero_grad()
            float(loss.detach())  # the same host read both variants do
        return (time.perf_counter() - t0) / n

    def logged(self, n: int) -> float:
        log, tlog, clock = self.tlog.logger, self.tlog, time.perf_counter
        inside = 0.0
        t0 = clock()
        for _ in range(n):
            a = clock()
            log.step_begin()
            inside += clock() - a
            loss = _train_step(self.model, self.opt, self.x, self.y)
            if self.check_grads:
                a = clock()
                tlog.check_gradients()
                inside += clock() - a
            self.opt.step()
            self.opt.zero_grad()
            value = float(loss.detach())
            a = clock()
            tlog.log_step(loss=value, learning_rate=1e-3)
            inside += clock() - a
        elapsed = clock() - t0
        self.logger_s += inside
        self.logged_steps += n
        return elapsed / n


def _summary(ratios: list[float], seed: int = 0, resamples: int = 4000) -> dict:
    """Median of the per-pair ratios, its interquartile range and a bootstrap 95 % interval."""
    q = statistics.quantiles(ratios, n=4, method="inclusive")
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {"pairs": len(ratios), "median": statistics.median(ratios), "q1": q[0], "q3": q[2],
            "ci95": (medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1])}


def measure(step_ms: float, pairs: int, steps_per_block: int, verbosity: str, check_grads: bool,
            aa: bool = False) -> dict:
    """Parts 2 and 3 on one logger: the CPU-time bound and the ABBA comparison."""
    from trainer_hooks import TrainingLogger

    model, opt, x, y = _model_for(step_ms)
    with tempfile.TemporaryDirectory() as tmp, \
            TrainingLogger(tmp, verbosity, model=model, per_device_batch_size=512,
                           max_steps=pairs * steps_per_block, end_verdict=False) as tlog:
        w = _Workload(model, opt, x, y, tlog, check_grads)
        log = tlog.logger
        writer_tid = _native_id(log._writer._thread if log._writer else None)
        sampler_tid = _native_id(log._sampler._thread if log._sampler else None)
        w.base(3)
        w.logged(3)  # warm-up of both paths
        _wait_writer_idle(log._writer)
        w.logger_s, w.logged_steps = 0.0, 0
        cpu0 = {"writer": thread_cpu_s(writer_tid), "sampler": thread_cpu_s(sampler_tid)}
        t_run = time.perf_counter()
        base_times, logged_times, ratios = [], [], []
        for i in range(pairs):
            order = ("base", "logged") if i % 2 == 0 else ("logged", "base")  # ABBA
            got = {}
            for variant in order:
                got[variant] = getattr(w, variant)(steps_per_block)
            base_times.append(got["base"])
            logged_times.append(got["logged"])
            ratios.append(got["logged"] / got["base"])
        _wait_writer_idle(log._writer)  # the writer's work for the last logged block counts too
        run_s = time.perf_counter() - t_run
        cpu1 = {"writer": thread_cpu_s(writer_tid), "sampler": thread_cpu_s(sampler_tid)}
        aa_ratios = []
        if aa:
            for i in range(pairs):
                a, b = w.base(steps_per_block), w.base(steps_per_block)
                aa_ratios.append(b / a if i % 2 == 0 else a / b)
    step_s = statistics.median(base_times)
    per_step = {"training_thread": w.logger_s / w.logged_steps}
    for name in ("writer", "sampler"):
        if cpu0[name] is None or cpu1[name] is None:
            per_step[name] = None if name == "writer" or sampler_tid is not None else 0.0
            continue
        spent = cpu1[name] - cpu0[name]
        # the writer works for logged steps only; the sampler runs all the time (both variants)
        per_step[name] = spent / w.logged_steps if name == "writer" else spent / run_s * step_s
    known = [v for v in per_step.values() if v is not None]
    out = {"step_ms": step_s * 1e3, "logged_step_ms": statistics.median(logged_times) * 1e3,
           "per_step_us": {k: (None if v is None else v * 1e6) for k, v in per_step.items()},
           "bound_pct": 100 * sum(known) / step_s if len(known) == len(per_step) else None,
           # the same logger time on the nominal step (the sized model's step lands 1-1.5x above it)
           "bound_pct_nominal": 100 * sum(known) / (step_ms / 1e3) if len(known) == len(per_step) else None,
           "abba": _summary(ratios), "steps_logged": w.logged_steps, "steps_per_block": steps_per_block}
    if aa:
        out["aa"] = _summary(aa_ratios)
    return out


def loop_levels(step_ms: float, steps: int, repeats: int, levels=("low", "medium", "high", "ultra")) -> dict:
    """Part 2b: the loop helper (``TrainingLogger``) a row per level, counted as the Trainer's rows are
    (``trainer_overhead.py``): ``time.thread_time()`` around the logger's calls on the training thread
    (``step_begin``, ``check_gradients`` where the level reads the gradients, ``log_step``) plus the CPU
    of every ``logkit-*`` thread over the measured steps, per step; ``repeats`` runs a level, the levels
    alternated, median and range."""
    from trainer_hooks import TrainingLogger

    model, opt, x, y = _model_for(step_ms)
    runs: dict = {level: [] for level in levels}
    step_times = []
    warmup = 5
    for i in range(repeats):
        for level in (levels if i % 2 == 0 else tuple(reversed(levels))):
            with tempfile.TemporaryDirectory() as tmp, \
                    TrainingLogger(tmp, level, model=model, per_device_batch_size=512, max_steps=steps,
                                   end_verdict=False) as tlog:
                log, clock = tlog.logger, time.thread_time
                grads = log.settings.grad_check or log.settings.layer_grad_norms
                inside, t_begin = 0.0, None
                for step in range(steps):
                    if step == warmup:
                        ids = logger_threads()
                        cpu0 = {n: thread_cpu_s(t) for n, t in ids.items()}
                        inside, t_begin = 0.0, time.perf_counter()
                    a = clock()
                    log.step_begin()
                    inside += clock() - a
                    loss = _train_step(model, opt, x, y)
                    if grads:
                        a = clock()
                        tlog.check_gradients(loss)
                        inside += clock() - a
                    opt.step()
                    opt.zero_grad()
                    value = float(loss.detach())
                    a = clock()
                    tlog.log_step(loss=value, learning_rate=1e-3)
                    inside += clock() - a
                cpu1 = {n: thread_cpu_s(t) for n, t in ids.items()}
                measured = steps - warmup
                step_times.append((time.perf_counter() - t_begin) / measured)
                threads = {n: (cpu1[n] - cpu0[n]) / measured for n in cpu0
                           if cpu0[n] is not None and cpu1[n] is not None}
                runs[level].append({"training_thread_s": inside / measured, "threads_s": threads,
                                    "total_s": inside / measured + sum(threads.values())})
    out = {"steps": steps, "repeats": repeats, "step_ms": statistics.median(step_times) * 1e3, "levels": {}}
    for level, rs in runs.items():
        totals = [r["total_s"] for r in rs]
        out["levels"][level] = {
            "total_us": statistics.median(totals) * 1e6, "range_us": [min(totals) * 1e6, max(totals) * 1e6],
            "training_thread_us": statistics.median(r["training_thread_s"] for r in rs) * 1e6,
            "threads_us": {n: statistics.median(r["threads_s"].get(n, 0.0) for r in rs) * 1e6
                           for n in sorted({n for r in rs for n in r["threads_s"]})},
            "budget_us": BUDGET_PCT[level] / 100 * step_ms * 1e3}
    return out


def show_loop_levels(m: dict, step_ms: float) -> list[str]:
    lines = [f"loop helper  : an MLP under TrainingLogger, {m['steps']} steps a run (5 left out), {m['repeats']} run(s) "
             f"a level, alternated (median, range); logged step {m['step_ms']:.1f} ms"]
    for level, r in m["levels"].items():
        threads = ", ".join(f"{n.removeprefix('logkit-')} {v:.0f}" for n, v in r["threads_us"].items())
        lines.append(f"  {level:<7}: training thread {r['training_thread_us']:.0f} us + threads ({threads}) us = "
                     f"{r['total_us']:.0f} us a step ({r['range_us'][0]:.0f}-{r['range_us'][1]:.0f}): "
                     f"{r['total_us'] / (step_ms * 1e3) * 100:.2f}% of a {step_ms:g} ms step  budget "
                     f"{r['budget_us']:.0f} us -> {'OK' if r['total_us'] <= r['budget_us'] else 'ABOVE'}")
    return lines


def _fake_buckets(comm, buckets: int) -> None:
    """``buckets`` gradient-sync buckets of 25 MB, 10 ms each, as the DDP hook hands them over
    (``commhook.CommTimer.pending``: index, bytes, start, end, launch sequence number)."""
    now = time.perf_counter()
    seq = comm.launched
    comm.pending.extend((b, 25_000_000, now - 0.01, now, seq + b) for b in range(buckets))
    comm.launched = seq + buckets


def per_record(n_steps: int, buckets: int) -> dict:
    """Training-thread time of step_begin + step_end with ``buckets`` comm records per step,
    and the writer thread's CPU time per step for what they produce."""
    from trainer_hooks.session_logger import SessionLogger

    with tempfile.TemporaryDirectory() as tmp:
        log = SessionLogger(tmp, "high", gpu_snapshot_interval=0, end_verdict=False)  # part 4 measures it
        log.start(per_device_batch_size=8, max_steps=n_steps)
        log.comm.group_size = 2
        log._comm_timed = True  # as if the DDP hook were installed (no process group here)
        writer = log._writer
        _wait_writer_idle(writer)
        cpu0 = thread_cpu_s(_native_id(writer._thread))
        t_total = 0.0
        for step in range(1, n_steps + 1):
            _fake_buckets(log.comm, buckets)
            t0 = time.perf_counter()
            log.step_begin()
            log.step_end(step, loss=1.0 / step, learning_rate=1e-4, grad_norm=0.5)
            t_total += time.perf_counter() - t0
        log.flush_step()
        _wait_writer_idle(writer)
        cpu1 = thread_cpu_s(_native_id(writer._thread))
        records = writer.records_written
        log.end()
    per_step_records = 1 + buckets + 1 / log.settings.performance_log_steps
    return {"us_per_step_call": t_total / n_steps * 1e6,
            "us_per_record": t_total / n_steps / per_step_records * 1e6, "records_per_step": per_step_records,
            "writer_us_per_step": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / n_steps * 1e6,
            "written_before_end": records}


class _NoComm:
    """FSDP2's comm object with the collective taken out: returns at once, as a blocking call returns
    once done (what is left around it is the timing wrapper's own work)."""

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False, op=None):
        return None

    def allocate(self, *args, **kwargs):
        return None


def per_step_fsdp(n_steps: int, units: int = 3) -> dict:
    """Training-thread time per step of the logger on an FSDP2 model of ``units`` parameter groups: each
    step ``units`` all-gathers in forward, ``units`` again in backward and ``units`` reduce-scatters
    through the timing wrappers (``fsdp_comm._Timed``, around a comm object that does nothing: the
    wrappers' own work, less the bare calls' measured the same way), plus step_begin + step_end; and
    the writer thread's CPU time per step for the records they produce."""
    import torch

    from trainer_hooks.fsdp_comm import ALL_GATHER, REDUCE_SCATTER, FsdpCommTimer, _Timed
    from trainer_hooks.session_logger import SessionLogger

    shard, whole = torch.empty(5_000), torch.empty(10_000)  # one rank's shard and the gathered unit, 2 ranks

    def calls(gather, reduce) -> float:
        t0 = time.perf_counter()
        for u in range(units):
            gather[u](whole, shard, group=None, async_op=False)  # forward
        for u in reversed(range(units)):
            gather[u](whole, shard, group=None, async_op=False)  # backward, resharded after forward
            reduce[u](shard, whole, group=None, op=None)
        return time.perf_counter() - t0
    t_steps = t_wrapped = 0.0

    with tempfile.TemporaryDirectory() as tmp:
        log = SessionLogger(tmp, "high", gpu_snapshot_interval=0, end_verdict=False)
        log.start(per_device_batch_size=8, max_steps=n_steps)
        timer = FsdpCommTimer()
        timer.group_size = 2
        log.comm, log._comm_timed = timer, True  # as if install() had wrapped a model (no process group here)
        gather = [_Timed(_NoComm(), timer, ALL_GATHER, u) for u in range(units)]
        reduce = [_Timed(_NoComm(), timer, REDUCE_SCATTER, u) for u in range(units)]
        bare = [_NoComm()] * units
        writer = log._writer
        _wait_writer_idle(writer)
        cpu0 = thread_cpu_s(_native_id(writer._thread))
        t_bare = 0.0
        for step in range(1, n_steps + 1):
            t0 = time.perf_counter()
            log.step_begin()
            t1 = time.perf_counter()
            t_wrapped += calls(gather, reduce)
            t2 = time.perf_counter()
            log.step_end(step, loss=1.0 / step, learning_rate=1e-4, grad_norm=0.5)
            t_steps += (t1 - t0) + (time.perf_counter() - t2)
            t_bare += calls(bare, bare)
        log.flush_step()
        _wait_writer_idle(writer)
        cpu1 = thread_cpu_s(_native_id(writer._thread))
        log.end()
    return {"units": units, "collectives_per_step": 3 * units, "step_calls_us": t_steps / n_steps * 1e6,
            "wrappers_us": (t_wrapped - t_bare) / n_steps * 1e6,
            "writer_us_per_step": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / n_steps * 1e6}


def end_verdict_cost(steps: int, rounds: int, buckets: int = 4) -> dict:
    """Part 4: seconds of ``end()`` on a 1-rank session of ``steps`` steps, verdict on and off (alternated),
    and the CPU seconds of the analysis process (its children's rusage)."""
    import resource

    from trainer_hooks.session_logger import SessionLogger

    times: dict = {True: [], False: []}
    child_cpu = []
    for i in range(2 * rounds):
        on = (i % 2 == 0) == ((i // 2) % 2 == 0)  # on, off, off, on, ...: ABBA
        with tempfile.TemporaryDirectory() as tmp:
            log = SessionLogger(tmp, "high", gpu_snapshot_interval=0, end_verdict=on)
            log.start(model_name="bench", per_device_batch_size=8, max_steps=steps)
            log.comm.group_size = 2
            log._comm_timed = True  # as if the DDP hook were installed (no process group here)
            for step in range(1, steps + 1):
                _fake_buckets(log.comm, buckets)
                log.step_begin()
                log.step_end(step, loss=1.0 / step, learning_rate=1e-4, grad_norm=0.5)
            log.flush_step()
            _wait_writer_idle(log._writer)
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # the verdict it prints
                log.end()
            times[on].append(time.perf_counter() - t0)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if on:
                child_cpu.append(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime)
                stream = Path(tmp) / log.session_id / f"{log.session_id}_rank0.jsonl"
                stream_mb = stream.stat().st_size / 1e6
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    return {"steps": steps, "stream_mb": stream_mb, "end_on_s": on_s, "end_off_s": off_s,
            "verdict_s": on_s - off_s, "verdict_s_min_max": (min(times[True]) - off_s, max(times[True]) - off_s),
            "analysis_cpu_s": statistics.median(child_cpu), "rounds": rounds}


def _median_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def show_us(v) -> str:
    return "n/a" if v is None else f"{v:.0f} us"


def _fmt_ratio(s: dict) -> str:
    pct = lambda r: f"{(r - 1) * 100:+.2f}%"  # noqa: E731
    return (f"median {pct(s['median'])} over {s['pairs']} pairs (IQR {pct(s['q1'])} .. {pct(s['q3'])}; "
            f"bootstrap 95% CI of the median {pct(s['ci95'][0])} .. {pct(s['ci95'][1])})")


def _show_end_verdict(results: dict, rounds: int) -> None:
    for steps in (100, 2000):
        v = results[f"end_verdict_{steps}"] = end_verdict_cost(steps, rounds)
        lo, hi = v["verdict_s_min_max"]
        print(f"end verdict  : {steps} steps ({v['stream_mb']:.1f} MB of JSONL): end() {v['end_on_s']:.2f} s with the "
              f"verdict, {v['end_off_s']:.2f} s without: the verdict {v['verdict_s']:.2f} s of wall time on rank 0 "
              f"(median of {rounds}; {lo:.2f}-{hi:.2f} s), its analysis process {v['analysis_cpu_s']:.2f} s CPU")


def _show_trainer(results: dict, args) -> None:
    from benchmarks import trainer_overhead

    m = results["trainer"] = trainer_overhead.measure(args.step_ms, 60 if args.quick else 120,
                                                      repeats=1 if args.quick else 3)
    print("\n".join(trainer_overhead.show(m)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--verbosity", default="high")
    p.add_argument("--pairs", type=int, default=None, help="ABBA pairs (default 60, --quick 16)")
    p.add_argument("--steps-per-block", type=int, default=10)
    p.add_argument("--grad-check", action="store_true", help="also measure check_gradients() every step")
    p.add_argument("--aa", action="store_true", help="also an A/A run (no logging in either block): the noise")
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("--end-verdict", action="store_true", help="also part 4: the verdict's cost at session end")
    p.add_argument("--end-verdict-only", action="store_true", help="part 4 alone")
    p.add_argument("--trainer", action="store_true", help="also part 5: the Trainer callback, a row per level")
    p.add_argument("--trainer-only", action="store_true", help="part 5 alone")
    p.add_argument("--levels-only", action="store_true",
                   help="the per-level rows alone: part 2b (loop helper) and part 5 (Trainer)")
    args = p.parse_args(argv)
    results: dict = {}
    if args.levels_only:
        m = results["loop_levels"] = loop_levels(args.step_ms, 60 if args.quick else 120, 1 if args.quick else 3)
        print("\n".join(show_loop_levels(m, args.step_ms)))
        _show_trainer(results, args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        return 0
    if args.trainer_only:
        _show_trainer(results, args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        return 0
    if args.end_verdict_only:
        _show_end_verdict(results, rounds=3 if args.quick else 5)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        return 0
    pairs = args.pairs or (16 if args.quick else 60)
    n_records = 2000 if args.quick else 20000

    rec = results["per_record"] = per_record(n_records, buckets=4)
    writer = rec["writer_us_per_step"]
    print(f"per record   : {rec['us_per_record']:.2f} us of training-thread time per record "
          f"({rec['us_per_step_call']:.1f} us per step for {rec['records_per_step']:.1f} records); writer thread "
          f"{'n/a' if writer is None else f'{writer:.0f} us'} CPU per step  "
          f"target <= 20 us/record -> {'OK' if rec['us_per_record'] <= 20 else 'ABOVE TARGET'}")

    # FSDP2 against DDP with as many timed operations a step (9 buckets), alternated, medians of 5
    fsdp_runs, ddp_runs = [], []
    for _ in range(5):
        fsdp_runs.append(per_step_fsdp(n_records // 4))
        ddp_runs.append(per_record(n_records // 4, buckets=9))
    f = results["fsdp2"] = {
        "collectives_per_step": 9, "step_calls_us": statistics.median(r["step_calls_us"] for r in fsdp_runs),
        "wrappers_us": statistics.median(r["wrappers_us"] for r in fsdp_runs),
        "writer_us_per_step": _median_known(r["writer_us_per_step"] for r in fsdp_runs),
        "ddp_step_calls_us": statistics.median(r["us_per_step_call"] for r in ddp_runs),
        "ddp_writer_us_per_step": _median_known(r["writer_us_per_step"] for r in ddp_runs)}
    fsdp_total = f["step_calls_us"] + (f["writer_us_per_step"] or 0.0)
    ddp_total = f["ddp_step_calls_us"] + (f["ddp_writer_us_per_step"] or 0.0)
    # within: the FSDP median inside the range of the DDP runs (their own spread is the noise)
    ddp_totals = [r["us_per_step_call"] + (r["writer_us_per_step"] or 0.0) for r in ddp_runs]
    f["ddp_total_range_us"] = [min(ddp_totals), max(ddp_totals)]
    print(f"fsdp2        : per step, 9 collectives of 3 units: step_begin + step_end {f['step_calls_us']:.1f} us + "
          f"writer {show_us(f['writer_us_per_step'])} = {fsdp_total:.0f} us; DDP with 9 buckets the same way "
          f"{f['ddp_step_calls_us']:.1f} us + {show_us(f['ddp_writer_us_per_step'])} = {ddp_total:.0f} us (medians "
          f"of 5, alternated; DDP's runs {min(ddp_totals):.0f}-{max(ddp_totals):.0f} us)  target: within the DDP "
          f"figure -> {'OK' if fsdp_total <= max(ddp_totals) else 'ABOVE'}; "
          f"the timing wrappers at the comm calls {f['wrappers_us']:.1f} us a step "
          f"({f['wrappers_us'] / 9:.2f} us a collective; DDP's hook does the like per bucket, outside both figures)")

    m = results["training"] = measure(args.step_ms, pairs, args.steps_per_block, args.verbosity, check_grads=False,
                                      aa=args.aa)
    us = m["per_step_us"]

    def show(v):
        return "n/a" if v is None else f"{v:.0f} us"

    bound, nominal = m["bound_pct"], m["bound_pct_nominal"]
    print(f"upper bound  : logger CPU per step at {args.verbosity!r}: training thread "
          f"{show(us['training_thread'])} + writer {show(us['writer'])} + sampler {show(us['sampler'])} = "
          + ("n/a (no per-thread CPU times here)" if bound is None else
             f"{bound:.3f}% of this run's {m['step_ms']:.1f} ms step, {nominal:.3f}% of a {args.step_ms:g} ms step  "
             f"target <= 0.5% -> {'OK' if max(bound, nominal) <= 0.5 else 'ABOVE TARGET'}"))
    m2 = results["loop_levels"] = loop_levels(args.step_ms, 60 if args.quick else 120, 1 if args.quick else 3)
    print("\n".join(show_loop_levels(m2, args.step_ms)))
    print(f"end to end   : ABBA blocks of {m['steps_per_block']} steps, logged/unlogged step time: "
          f"{_fmt_ratio(m['abba'])}")
    if args.aa:
        print(f"A/A control  : the same design without logging in either block: {_fmt_ratio(m['aa'])}")
    if args.grad_check:
        g = results["grad_check"] = measure(args.step_ms, pairs, args.steps_per_block, args.verbosity,
                                            check_grads=True)
        print(f"grad check   : with check_gradients() every step (opt-in, on at 'ultra'): "
              f"{_fmt_ratio(g['abba'])}; bound {g['bound_pct']:.3f}%" if g["bound_pct"] is not None else "")
    if args.end_verdict:
        _show_end_verdict(results, rounds=3 if args.quick else 5)
    if args.trainer:
        _show_trainer(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
