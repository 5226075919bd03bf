"""The live view's alerts on a real 2-rank CPU run (accelerate launch, gloo): rank 1 stops before its
gradient sync at a step (``--hang-at``) while rank 0 waits in it. The NDJSON follower, started before
the log folder exists (it waits for it), raises one stall alert naming rank 1 within max(60 s, 10x the
median step) of rank 1's last step, and ``--alert-cmd`` receives it. The run's stall watch is set to
write its stall records after 15 s (``stall_min_s``): they say where each rank is, which is how the
logs name the rank the others wait for when every rank stopped after the same step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson
import pytest

from logkit.schema.records import COMMON, STALL, TRAINING_STEP
from tests.support.launch import BIN, REPO, ctrl_c_default, free_port, kill_tree

TYPE = next(f for f in COMMON if f.name == "type")
TIMESTAMP = next(f for f in COMMON if f.name == "timestamp")
HANG_AT, SLEEP = 30, 0.1


def lines(path: Path) -> list[dict]:
    data = path.read_bytes() if path.exists() else b""
    return [orjson.loads(x) for x in data[: data.rfind(b"\n") + 1].splitlines() if x.strip()]


def stream(logs: Path, rank: int) -> list[dict]:
    (path,) = logs.glob(f"*/*_rank{rank}.jsonl")
    return lines(path)


@pytest.mark.slow  # a real launch that hangs: about 60 s on 2 cores
def test_a_rank_that_stops_is_named_by_one_stall_alert_within_the_limit(tmp_path):
    logs, received = tmp_path / "logs", tmp_path / "received"
    received.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    out, err = tmp_path / "follow.ndjson", tmp_path / "follow.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        view = subprocess.Popen([str(BIN / "analyze_logs"), str(logs), "--follow", "--json", "--refresh", "0.5",
                                 "--alert-cmd", f"cat > {received}/$$.json"], stdout=o, stderr=e, env=env,
                                preexec_fn=ctrl_c_default)
    time.sleep(1.0)  # the view is waiting for a folder that does not exist yet
    launch = subprocess.Popen(
        [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
         str(REPO / "examples/train_accelerate_loop.py"), "--log-dir", str(logs), "--hidden", "64", "--steps", "400",
         "--sleep", str(SLEEP), "--hang-at", str(HANG_AT), "--slow-rank", "1", "--pg-timeout", "300",
         "--log-setting", "stall_min_s=15"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("alert" in d for d in lines(out)):
            assert launch.poll() is None, "the run ended before an alert was raised"
            time.sleep(0.5)
        time.sleep(2.0)  # a refresh or two more: no second alert comes
    finally:
        kill_tree(launch.pid)  # the launcher and its ranks
        launch.wait(timeout=30)
        view.send_signal(signal.SIGINT)
        view.wait(timeout=30)
    docs = lines(out)
    assert docs[0]["folder_missing"] is True and docs[0]["sessions"] == []
    alerts = [d["alert"] for d in docs if "alert" in d]
    assert [(a["kind"], a["state"], a["rank"]) for a in alerts] == [("stall", "raised", 1)], alerts
    (alert,) = alerts
    rank1, rank0 = stream(logs, 1), stream(logs, 0)
    steps1 = [r for r in rank1 if TYPE.read(r) == TRAINING_STEP.type]
    assert TRAINING_STEP["step"].read(steps1[-1]) == HANG_AT - 1  # rank 1 stopped in step HANG_AT
    times = [TRAINING_STEP["step_time_s"].read(r) for r in [x for x in rank0 if TYPE.read(x) == TRAINING_STEP.type]]
    limit = max(60.0, 10 * float(np.median(times)))
    stopped = datetime.fromisoformat(TIMESTAMP.read(steps1[-1]))
    waited = (datetime.fromisoformat(alert["raised_at"]) - stopped).total_seconds()
    assert 0 < waited <= limit, (waited, limit)
    assert alert["since"] == TIMESTAMP.read(steps1[-1])
    # the other rank waits in the gradient sync of that step, as its own stall record says
    stalls0 = [r for r in rank0 if TYPE.read(r) == STALL.type]
    assert stalls0 and STALL["phase"].read(stalls0[0]) == "gradient_sync"
    assert "rank 0 waits in it" in alert["detail"] and "rank 1 never reached the gradient sync" in alert["detail"]
    assert any(e.startswith(Path(next(logs.glob("*/*_rank1.jsonl"))).name) for e in alert["evidence"])
    # --alert-cmd read the same alert on its standard input
    got = [orjson.loads(p.read_bytes()) for p in received.glob("*.json")]
    assert got == [{"alert": alert}]
    assert view.returncode == 0
