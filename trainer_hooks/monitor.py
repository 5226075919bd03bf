"""``monitor_gpu``: sample GPUs and the host while something runs, one record per interval.

Usage::

    monitor_gpu --output current_training.jsonl
    monitor_gpu --monitor-training 'accelerate launch train.py' --interval 10

Output: with a ``.json`` name, one JSON document written when monitoring ends
(``{"session_id", "command", "exit_code", "interval_s", "hostname", "notes", "records": [...]}``);
with any other name (``.jsonl`` advised), ``gpu_snapshot`` records appended as they come,
one JSON object per line, with the keys every record has plus ``devices[]``
(mean, min and max over the interval) and the host's ``resource_usage``.

With ``--monitor-training CMD`` the command runs as a child (its own process group, so a
terminal's Ctrl-C reaches it once, forwarded by the monitor), is sampled with its process
tree, and the monitor exits with its exit status (128 + N when signal N killed it).
Without a command, monitoring runs for ``--duration`` seconds or until SIGINT/SIGTERM.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import click
import orjson

from logkit.schema.records import GPU_SNAPSHOT
from trainer_hooks.layout import top_key
from trainer_hooks.sampling import ResourceSampler, snapshot_message
from trainer_hooks.writer import RecordWriter, iso_timestamp

PROG = "monitor_gpu"
_TIMESTAMP = top_key(GPU_SNAPSHOT, "timestamp")


class Monitor:
    """Turns sampler intervals into ``gpu_snapshot`` records, to a JSONL stream or a JSON document."""

    def __init__(self, output: Path, interval_s: float, sample_every_s: float, pid: int | None = None,
                 command: str | None = None) -> None:
        self.output = output
        self.as_document = output.suffix.lower() == ".json"
        self.session_id = "monitor_" + datetime.now().strftime("%Y%m%d_%H%M%S")
        self.hostname = socket.gethostname()
        self.command = command
        self.interval_s = interval_s
        self.records: list[dict] = []  # the document's records (``.json`` only)
        self.count = 0
        self._t0 = time.perf_counter()
        self._wall0 = time.time()
        self._writer: RecordWriter | None = None
        if not self.as_document:
            self._writer = RecordWriter(output, output.with_name(output.name + ".errors.log"))
        self.sampler = ResourceSampler(interval_s=interval_s, sample_every_s=sample_every_s,
                                       on_interval=self._on_interval, pid=pid, children=pid is not None)

    def _on_interval(self, snap: dict) -> None:
        # Called on the sampler thread (and once on the main thread at stop).
        elapsed = time.perf_counter() - self._t0
        record = GPU_SNAPSHOT.build(timestamp=self._wall0 + elapsed, time_s=round(elapsed, 6), type=GPU_SNAPSHOT.type,
                                    level="INFO", message=snapshot_message(snap), session_id=self.session_id, rank=0,
                                    world_size=1, host=self.hostname)
        record.update(snap)  # the sampler lays out its part by the same spec
        notes = self.sampler.take_notes()
        if notes:
            record.update(GPU_SNAPSHOT.build(notes=notes))
        self.count += 1
        if self._writer is not None:
            self._writer.put(record)
        else:
            record[_TIMESTAMP] = iso_timestamp(record[_TIMESTAMP])
            self.records.append(record)

    def start(self) -> None:
        self.sampler.start()
        self.sampler.wait_ready(10.0)
        for note in self.sampler.notes:  # said once, here; the records carry them too
            click.echo(f"{PROG}: {note}", err=True)

    def finish(self, exit_code: int | None = None) -> None:
        self.sampler.stop(final=True)
        if self._writer is not None:
            self._writer.close()
            return
        doc = {"session_id": self.session_id, "command": self.command, "exit_code": exit_code,
               "interval_s": self.interval_s, "hostname": self.hostname, "notes": self.sampler.notes,
               "started": iso_timestamp(self._wall0), "ended": iso_timestamp(time.time()),
               "records": self.records}
        tmp = self.output.with_name(self.output.name + ".tmp")
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        os.replace(tmp, self.output)  # whole or nothing: a reader never sees half a document


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=Path("gpu_monitor.jsonl"),
              show_default=True, help="JSONL stream of gpu_snapshot records; a .json name gets one document at the end.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=10.0, show_default=True,
              help="Seconds per record (as the emitter's gpu_snapshot_interval).")
@click.option("--sample-every", type=click.FloatRange(min=0.01), default=None,
              help="Seconds between samples within an interval [default: min(1, interval/2)].")
@click.option("--duration", type=click.FloatRange(min=0.0), default=None,
              help="Stop after this many seconds (without --monitor-training).")
@click.option("--monitor-training", "command", metavar="CMD", default=None,
              help="Run CMD, sample while it runs, stop when it exits, exit with its status.")
@click.option("--shell", is_flag=True, help="Run CMD through /bin/sh -c instead of splitting it with shlex.")
def monitor_gpu(output, interval, sample_every, duration, command, shell):
    """Sample GPU (NVML) and host (psutil) metrics; write one gpu_snapshot record per interval."""
    if command is not None and duration is not None:
        raise click.UsageError("--duration and --monitor-training exclude each other "
                               "(with a command, monitoring ends when it exits)")
    sample_every = sample_every or min(1.0, interval / 2)
    if output.parent and not output.parent.exists():
        output.parent.mkdir(parents=True, exist_ok=True)

    child = None
    if command is not None:
        argv = ["/bin/sh", "-c", command] if shell else shlex.split(command)
        if not argv:
            raise click.UsageError("--monitor-training: empty command")
        try:
            # Own session: the terminal's Ctrl-C reaches the child once, through our handler.
            child = subprocess.Popen(argv, start_new_session=True)
        except OSError as exc:
            click.echo(f"{PROG}: cannot run {argv[0]!r}: {exc.strerror or exc}", err=True)
            raise SystemExit(127) from None

    monitor = Monitor(output, interval, sample_every, pid=child.pid if child else None, command=command)
    stop = threading.Event()

    def on_signal(signum, _frame):
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)  # the child decides; we stop when it exits
            except OSError:
                pass
        else:
            stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        monitor.start()
        if child is not None:
            status = _exit_status(child.wait())
        else:
            stop.wait(duration)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if child is not None and child.poll() is None:  # we are leaving on an error of our own
            child.terminate()
        monitor.finish(status if child is not None else None)
    what = f"{monitor.count} snapshot(s) written to {output}"
    click.echo(f"{PROG}: {what}" + (f"; command exited with status {status}" if child is not None else ""),
               err=True)
    raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    monitor_gpu.main(args=argv, prog_name=PROG)


if __name__ == "__main__":
    main()
