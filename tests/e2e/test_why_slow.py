"""Why a run is slow and who hung, on real 2-rank CPU runs (gloo) with known injections: the
hand-written loop with none, 50 ms more data loading on rank 1, 50 ms more real compute on rank 1,
and rank 1 stopping before its gradient sync; the transformers Trainer with a slow collator on
rank 1. Read back with the CLI as a user types it (--performance / --diagnose --json)."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.support.launch import accelerate_launch, analyze_logs, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

DELAY = 0.05  # seconds injected per step on rank 1
# steps of ~0.1 s (a sleep after the optimizer on every rank): the noise of a busy 2-core host (a few ms)
# stays far below the 5% of a step that makes a straggler
LOOP = ["--steps", "30", "--hidden", "1024", "--batch-size", "64", "--sleep", "0.1"]


def _loop(tmp_path, name: str, *inject: str, check: bool = True, env: dict | None = None):
    logs = tmp_path / name
    try:
        accelerate_launch("examples/train_accelerate_loop.py", [*LOOP, "--log-dir", str(logs), *inject], 2,
                          cwd=tmp_path, env=env)
    except AssertionError:
        if check:
            raise
    (session,) = session_dirs(logs)
    return logs, session


def _json(logs, *flags) -> dict:
    r = analyze_logs(str(logs), "--no-cache", *flags, "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def _rows(doc: dict, key: str) -> dict[int, dict]:
    return {row["rank"]: row for row in doc[key]}


def test_no_injection_names_no_straggler(tmp_path):
    logs, _ = _loop(tmp_path, "none")
    doc = _json(logs, "--performance")
    assert not any(r["is_straggler"] for r in doc["stragglers"])
    assert set(_rows(doc, "step_breakdown")) == {0, 1}


def test_slow_data_on_rank_1_is_a_data_straggler_and_rank_0_waits(tmp_path):
    logs, session = _loop(tmp_path, "data", "--slow-rank", "1", "--slow-data", str(DELAY))
    doc = _json(logs, "--performance")
    strag, parts = _rows(doc, "stragglers"), _rows(doc, "step_breakdown")
    assert strag[1]["is_straggler"] and strag[1]["cause"] == "data" and not strag[0]["is_straggler"]
    assert strag[1]["last_arrival_share"] >= 0.8
    assert parts[1]["data_s"] >= DELAY and parts[0]["data_s"] < DELAY / 5  # the sleep, on rank 1 only
    assert parts[0]["wait_s"] > 0.8 * DELAY > parts[1]["wait_s"]
    # rank 0's wait is its last bucket's all-reduce minus rank 1's, step by step (read here from the streams),
    # plus a forward wait only where compute noise on this busy host passes 2% of a step (the loop's model
    # has no buffers for DDP to broadcast at the start of forward)
    syncs = {}
    for rank in (0, 1):
        for r in read_jsonl(next(session.glob(f"*_rank{rank}.jsonl"))):
            if r["type"] == "step_phases":
                syncs.setdefault(r["step"], {})[rank] = r["sync_s"]
    waits = sorted(s[0] - min(s.values()) for s in syncs.values() if len(s) == 2)
    assert parts[0]["wait_s"] == pytest.approx((waits[len(waits) // 2 - 1] + waits[len(waits) // 2]) / 2
                                               if len(waits) % 2 == 0 else waits[len(waits) // 2],
                                               abs=0.02 * doc["performance"][0]["step_p50_s"])


def test_slow_compute_on_rank_1_is_a_compute_straggler(tmp_path):
    logs, _ = _loop(tmp_path, "compute", "--slow-rank", "1", "--slow-compute", str(DELAY))
    doc = _json(logs, "--performance")
    strag, parts = _rows(doc, "stragglers"), _rows(doc, "step_breakdown")
    assert strag[1]["is_straggler"] and strag[1]["cause"] == "compute"
    assert parts[1]["compute_s"] >= DELAY and parts[0]["compute_s"] < DELAY / 2
    assert parts[0]["wait_s"] > 0.8 * DELAY > parts[1]["wait_s"]
    assert "rank 1 holds the others back (slower forward/backward)" in " ".join(doc["verdict"]).lower()


def test_a_rank_that_stops_before_the_sync_is_named_with_its_stack(tmp_path):
    logs, session = _loop(tmp_path, "hang", "--slow-rank", "1", "--hang-at", "6", "--pg-timeout", "6",
                          "--log-setting", "stall_min_s=2", check=False, env={"TORCH_FR_BUFFER_SIZE": "1000"})
    doc = _json(logs, "--diagnose")
    (hang,) = [f for f in doc["findings"] if f["kind"] == "hang"]
    assert hang["severity"] == "critical" and hang["culprit_ranks"] == [1] and hang["waiting_ranks"] == [0]
    stalls = [r for r in read_jsonl(next(session.glob("*_rank1.jsonl"))) if r["type"] == "stall"]
    assert stalls and stalls[0]["phase"] == "forward_backward" and stalls[0]["step"] == 6
    assert "time.sleep(3600)" in stalls[0]["stack"]  # the line rank 1 stopped at
    # the evidence starts with rank 1's stall record, file:line
    lines = next(session.glob("*_rank1.jsonl")).read_text().splitlines()
    first = hang["evidence"][0]
    name, _, number = first.rpartition(":")
    assert name.endswith("_rank1.jsonl") and json.loads(lines[int(number) - 1])["type"] == "stall"
    waiting = [r for r in read_jsonl(next(session.glob("*_rank0.jsonl"))) if r["type"] == "stall"]
    assert waiting and waiting[0]["phase"] == "gradient_sync"
    # each rank dumped torch's Flight Recorder (rank 1 at its stall, rank 0 at its stall and error):
    # rank 1's last all-reduce is one behind rank 0's, the one rank 0 timed out in
    last = {}
    for rank in (0, 1):
        (dump,) = session.glob(f"*_flight_recorder_rank{rank}.pkl")
        last[rank] = max(e["collective_seq_id"] for e in pickle.loads(dump.read_bytes())["entries"])
    assert last[1] == last[0] - 1
    assert f"rank 1's last was #{last[1]}" in hang["detail"]


def _trainer(tmp_path, *extra: str) -> dict:
    accelerate_launch("examples/train_qlora.py", [
        "--tiny", "--tiny-dir", str(tmp_path / "tiny"), "--log-dir", str(tmp_path / "logs"),
        "--output-dir", str(tmp_path / "out"), "--max-steps", "12", "--batch-size", "4", "--seq-len", "32",
        "--slow-rank", "1", "--slow-data", "0.2", *extra], 2, cwd=tmp_path, timeout=400)
    return _json(tmp_path / "logs", "--performance", "--diagnose")


def test_the_trainer_callback_names_a_data_straggler(tmp_path):
    # each rank averages over its own tokens: nothing crosses the ranks before the step
    doc = _trainer(tmp_path, "--own-token-average")
    strag = _rows(doc, "stragglers")
    assert strag[1]["is_straggler"] and strag[1]["cause"] == "data" and not strag[0]["is_straggler"]
    parts = _rows(doc, "step_breakdown")
    assert parts[1]["data_s"] >= 0.2 and parts[0]["data_s"] < 0.1 and parts[0]["wait_s"] > 0.15
    assert "data_wait_in_token_gather" not in {f["kind"] for f in doc["findings"]}


def test_the_trainer_token_gather_hides_the_slow_loader_and_says_so(tmp_path):
    # transformers' default: the token count is gathered across ranks before each step, so
    # rank 0 waits for rank 1's collator inside its own data phase
    doc = _trainer(tmp_path)
    parts = _rows(doc, "step_breakdown")
    assert parts[0]["data_s"] >= 0.15 and parts[1]["data_s"] >= 0.2
    (found,) = [f for f in doc["findings"] if f["kind"] == "data_wait_in_token_gather"]
    assert found["ranks"] == [0, 1] and "average_tokens_across_devices=False" in found["detail"]
    assert "average_tokens_across_devices=False" in doc["verdict"][-1]
