"""A real 2-rank FSDP2 run that hangs (``fully_shard`` on gloo CPU ranks under torchrun): rank 1 stops in the
forward of step 4, before its first all-gather; rank 0 waits in that all-gather until the process group's
6 s timeout fails it. The analysis names rank 1 as the culprit and the collective rank 0 waited in (the
all-gather of the forward), as it does for a DDP gradient sync."""

from __future__ import annotations

import json

import pytest

from tests.support.launch import analyze_logs, read_jsonl, session_dirs, torchrun

pytestmark = pytest.mark.slow

HANG_AT = 4


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_hang")
    with pytest.raises(AssertionError):  # torchrun fails: rank 0 timed out, rank 1 was stopped
        torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp / "logs"), "--mode", "fsdp2", "--steps", "10",
                                                 "--slow-rank", "1", "--hang-at", str(HANG_AT), "--pg-timeout", "6",
                                                 "--stall-min-s", "2"], 2, cwd=tmp, timeout=120)
    (session,) = session_dirs(tmp / "logs")
    return tmp / "logs", {r: read_jsonl(next(session.glob(f"*_rank{r}.jsonl"))) for r in (0, 1)}


def test_the_streams_say_where_each_rank_was(hung):
    _, streams = hung
    stalls = {r: [x for x in records if x["type"] == "stall"] for r, records in streams.items()}
    # rank 1 stopped in its step's forward, at the line the script sleeps on
    assert stalls[1] and stalls[1][0]["step"] == HANG_AT and stalls[1][0]["phase"] == "forward_backward"
    assert "time.sleep(3600)" in stalls[1][0]["stack"]
    # rank 0 waited in the first all-gather of that step's forward (FSDP unit 0, the first Linear)
    assert stalls[0] and stalls[0][0]["step"] == HANG_AT and stalls[0][0]["phase"] == "collective"
    assert stalls[0][0]["phase_detail"].startswith("all_gather (forward) of FSDP unit 0 in flight")
    (error,) = [x for x in streams[0] if x["type"] == "error"]
    assert error["phase"] == "collective" and error["step"] == HANG_AT


def test_the_hang_names_rank_1_and_the_forward_all_gather(hung, tmp_path):
    logs, _ = hung
    r = analyze_logs(str(logs), "--no-cache", "--diagnose", "--json", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    (hang,) = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "hang"]
    assert hang["severity"] == "critical" and hang["culprit_ranks"] == [1] and hang["waiting_ranks"] == [0]
    assert f"never reached the all_gather (forward) of step {HANG_AT}" in hang["title"], hang["title"]
