"""One training session on disk: its file names, and the keys of its ``summary.json`` (and of a run
folder's ``results.json``).

    >>> SessionFiles("training_20241206_143022").rank_jsonl(1)
    'training_20241206_143022_rank1.jsonl'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logkit.schema.records import F, RecordSpec

__all__ = ["SessionFiles", "session_files", "RANK_JSONL_RE", "SUMMARY_JSON_RE", "ERRORS_LOG_RE", "LOGKIT_TEXT_RE",
           "SUMMARY", "RESULTS_JSON"]


@dataclass(frozen=True)
class SessionFiles:
    """File names of one session folder: ``<session_id>_<suffix>``."""

    session_id: str

    def _name(self, suffix: str) -> str:
        return f"{self.session_id}_{suffix}"

    @property
    def main_log(self) -> str:
        return self._name("main.log")

    @property
    def multigpu_log(self) -> str:
        return self._name("multigpu.log")

    @property
    def performance_log(self) -> str:
        return self._name("performance.log")

    @property
    def errors_log(self) -> str:
        return self._name("errors.log")

    @property
    def summary_json(self) -> str:
        return self._name("summary.json")

    @property
    def summary_txt(self) -> str:
        return self._name("summary.txt")

    def rank_jsonl(self, rank: int) -> str:
        return self._name(f"rank{rank}.jsonl")

    def flight_recorder(self, rank: int) -> str:
        """The rank's PyTorch Flight Recorder dump, written at a stall or an error when recording is on."""
        return self._name(f"flight_recorder_rank{rank}.pkl")


def session_files(session_id: str) -> SessionFiles:
    return SessionFiles(session_id)


# A rank stream's name: <session_id>_rank<N>.jsonl
RANK_JSONL_RE = re.compile(r"^(?P<session_id>.+)_rank(?P<rank>\d+)\.jsonl(?:\.gz)?$")
SUMMARY_JSON_RE = re.compile(r"^(?P<session_id>.+)_summary\.json$")
ERRORS_LOG_RE = re.compile(r"^(?P<session_id>.+)_errors\.log(?:\.gz)?$")
# Our text logs: <session_id>_main.log, _multigpu.log, _performance.log
LOGKIT_TEXT_RE = re.compile(r"^(?P<session_id>.+)_(?:main|multigpu|performance)\.log(?:\.gz)?$")

# summary.json, written by rank 0 at the end: its keys, by the meta names logkit reads them as.
SUMMARY = RecordSpec("", "meta", (
    F("session_id", type=str), F("mode", type=str), F("gpu_count", type=int), F("world_size", type=int),
    F("model", type=str), F("backend", type=str),
    F("start_time", type=str, unit="ISO 8601"), F("end_time", type=str, unit="ISO 8601"),
    F("duration_s", "duration_seconds", unit="s", doc="the session's wall time"),
    F("training_time_s", "training_time_seconds", unit="s", doc="sum of optimizer-step times"),
    F("total_steps", type=int), F("final_loss"),
    F("steps_per_second", unit="steps/s", doc="steps / training time"),
    F("samples_per_second", unit="samples/s", doc="samples / training time"),
    F("total_batch_size", type=int),
    F("gpus", type=list, doc="[{index, name, avg_util, peak_util, avg_memory_pct}]"),
    F("communication", type=dict, doc="{op: {count, total_mb, avg_mb, avg_algbw_mb_s, avg_busbw_mb_s, "
                                      "total_time_s (sum of durations; overlapping buckets each counted), "
                                      "in_flight_s (per step, the union of its buckets' spans, summed), "
                                      "share_of_training_time (in_flight_s / training time, at most 1)}}"),
    F("status", type=str),
), "rank 0's account of the session")

# results.json (a run folder's, as examples/train_qlora.py writes it): its keys, by the names meta gives them.
RESULTS_JSON = RecordSpec("", "meta", (
    F("mode", type=object), F("device", type=str), F("gpu_count", "num_gpus", int),
    F("num_processes", type=int), F("world_size", type=int), F("duration_s", "duration_seconds", unit="s"),
    F("steps_per_second", unit="steps/s"), F("samples_per_second", unit="samples/s"), F("total_steps", type=int),
    F("final_loss"), F("model", "model_name", str), F("config", type=object, doc="the configuration's name"),
    F("session", type=str), F("optimizations", type=object),
), "a run's results, written by the training script")
