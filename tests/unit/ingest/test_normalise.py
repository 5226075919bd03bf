"""The normalising layer (``readers.normalise``): each prefix class is learned from a file made here of
real excerpts (``tests/data/normalise``, sources in its README; the corpus of ``sample_logs/real_world``),
then from variations the code was not written against (other host names, widths, rank counts).
Expected values are read off the excerpts by eye, as the comments say."""

from __future__ import annotations

import re

import pytest

import logkit
from logkit.ingest.readers.console_shapes import GRAMMAR
from logkit.ingest.readers.normalise import Layout
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "normalise"
CORPUS = REPO / "sample_logs" / "real_world"


def lines_of(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def layer(lines: list[str]):
    return list(Layout.learn(lines, GRAMMAR).records(enumerate(lines, start=1)))


def load(tmp_path, lines: list[str] | str, name: str = "capture.log"):
    path = tmp_path / name
    path.write_text(lines if isinstance(lines, str) else "\n".join(lines) + "\n", encoding="utf-8")
    return logkit.load_session(path)


def events(s, kind: str):
    return s.events[s.events["kind"] == kind].reset_index(drop=True)


def timeouts(s) -> list[list]:
    return events(s, "nccl_timeout")[["rank", "seq", "op", "numel", "numel_out", "timeout_ms", "elapsed_ms"]] \
        .values.tolist()


# The four torch lines of LlamaFactory #7396 without the pasted numbers: they are put behind other prefixes.
TORCH = [re.sub(r"^\[\d+\] ", "", ln) for ln in lines_of("llamafactory_7396_line_numbered_multi_rank_watchdog.log")]
# read off those lines: ranks 0 and 4 time out in SeqNum 1580, ALLREDUCE, NumelIn=NumelOut=466119168, 600000 ms
TORCH_TIMEOUTS = [[0, 1580, "ALLREDUCE", 466119168, 466119168, 600000, 600060],
                  [4, 1580, "ALLREDUCE", 466119168, 466119168, 600000, 600067]]


# --- 1. a prefix learned from the file ------------------------------------------------------------------
@pytest.mark.parametrize("stamp, pad, rank", [("2024-08-23T22:22:51.871Z", "  ", 6), ("2025-01-02T03:04:05Z", "    ", 13)])
def test_cloudwatch_columns(tmp_path, stamp, pad, rank):
    # litData #340: "  | 2024-08-23T22:22:51.871Z | [PG 0 Rank 6] ... [Rank 6] Watchdog caught ... SeqNum=70426, ..."
    text = [re.sub(r"^  \| \S+ \| ", f"{pad}| {stamp} | ", ln).replace("Rank 6]", f"Rank {rank}]")
            for ln in lines_of("litdata_340_cloudwatch_columns.log")]
    s = load(tmp_path, text)
    assert timeouts(s) == [[rank, 70426, "ALLREDUCE", 1, 1, 1800000, 1800038]]
    assert events(s, "nccl_timeout")["source"].tolist() == ["capture.log:1"]
    assert s.diagnostics.empty  # the frames and "Exception raised from" lines are read as a traceback's
    assert layer(text)[0].stamp == stamp


@pytest.mark.parametrize("pods", [["vllm-simulator-646cb8db6c-tgwm6/vllm-simulator"] * 4,
                                  ["trainer-worker-0/pytorch", "trainer-worker-1/pytorch", "trainer-master-0/pytorch",
                                   "trainer-worker-1/pytorch"]])
def test_kubectl_prefix(tmp_path, pods):
    # the kubectl --prefix shape of the README excerpt, before the real torch lines of LlamaFactory #7396
    text = [f"[pod/{pod}] {ln}" for pod, ln in zip(pods, TORCH, strict=True)]
    s = load(tmp_path, text)
    assert timeouts(s) == TORCH_TIMEOUTS
    # the watchdog's work lines: ranks 0 and 3 stopped at work 1580, last enqueued 1582, last completed 1579
    assert events(s, "watchdog_work")[["rank", "seq", "last_enqueued", "last_completed"]].values.tolist() == [
        [0, 1580, 1582, 1579], [3, 1580, 1582, 1579]]
    assert s.diagnostics.empty


def test_kubectl_prefix_of_the_readme_itself():
    got = layer(lines_of("kubectl_prefix_vllm_simulator_readme.log"))
    assert [r.text[:21] for r in got] == ["I0713 04:02:50.125728", "I0713 04:02:51.369322", "I0713 04:02:52.233316",
                                          "I0713 04:02:53.097022"]


@pytest.mark.parametrize("tasks", [[0, 0, 1, 1], [3, 12, 7, 12]])
def test_srun_task_numbers_give_the_rank(tmp_path, tasks):
    # srun -l's "N: " before each line: a traceback's exception (ament_cmake #254's) gets the task's rank
    body = [re.sub(r"^  \[\S+\] 1: ", "", ln) for ln in lines_of("ament_cmake_254_indented_jenkins_stamp_ctest_label.log")]
    text = [f"{tasks[0]}: {ln}" for ln in body] + [f"{t}: {ln}" for t, ln in zip(tasks, TORCH, strict=True)]
    s = load(tmp_path, text)
    (err,) = events(s, "error").to_dict("records")
    assert (err["exception"], err["rank"], err["source"]) == ("FileExistsError", tasks[0], "capture.log:8")
    assert timeouts(s) == TORCH_TIMEOUTS and s.diagnostics.empty


def test_indentation_a_stamp_and_a_task_label_nest(tmp_path):
    # ament_cmake #254: "  [2020-04-28T19:13:39.193Z] 1: Traceback ..." -> FileExistsError on line 8
    s = load(tmp_path, lines_of("ament_cmake_254_indented_jenkins_stamp_ctest_label.log"))
    (err,) = events(s, "error").to_dict("records")
    assert (err["exception"], err["rank"], err["source"]) == ("FileExistsError", 1, "capture.log:8")
    assert err["message"].startswith("FileExistsError: [Errno 17] File exists") and s.diagnostics.empty


@pytest.mark.parametrize("hosts", [{"104.171.201.172": "10.9.8.7", "104.171.201.171": "10.9.8.6"},
                                   {"104.171.201.172": "gpu-a-01", "104.171.201.171": "gpu-b-17"}])
def test_pdsh_hosts_of_other_names(tmp_path, hosts):
    # accelerate #1317 (corpus): "104.171.201.172: lambda-scalar03:148966:148966 [0] NCCL INFO Using network Socket"
    text = (CORPUS / "nccl_debug" / "accelerate_1317_pdsh_host_prefix_socket.log").read_text()
    for old, new in hosts.items():
        text = text.replace(f"{old}: ", f"{new}: ")
    s = load(tmp_path, text)
    assert s.meta["hosts"] == ["lambda-scalar02", "lambda-scalar03"] and s.meta["network"] == "Socket"
    assert s.diagnostics.empty
    got = layer(text.splitlines())
    assert {r.host for r in got} == set(hosts.values())


def test_markdown_quote():
    # pytorch #46009: a glog excerpt quoted with "> "
    lines = lines_of("pytorch_46009_markdown_quoted_glog.log")
    got = layer(lines)
    assert [r.text for r in got] == [ln[2:] for ln in lines]
    assert [r.number for r in got] == list(range(1, 8))


@pytest.mark.parametrize("indent", ["        ", "   ", "\t"])
def test_indented_readme_paste(tmp_path, indent):
    # aws-k8s-tester #464: mpirun lines indented by 8; rank 1 (worker-1) and rank 0 (worker-0), nranks 2, Socket
    text = [indent + ln.lstrip() for ln in lines_of("aws_k8s_tester_464_indented_mpirun_nccl.log")]
    s = load(tmp_path, text)
    assert s.meta["world_size"] == 2 and s.meta["network"] == "Socket"
    assert s.meta["ranks_by_host"] == {"multi-node-nccl-test-worker-0": [0], "multi-node-nccl-test-worker-1": [1]}
    assert s.diagnostics.empty


def test_a_lines_own_text_is_no_prefix():
    lines = ["2024-11-22 11:00:00,101 - INFO - train - Starting", "RuntimeError: boom", "  File \"x\", line 3, in f",
             "    self.pid = os.fork()", "ValueError: x", "INFO: done"]
    assert [r.text for r in layer(lines)] == lines


# --- 2. joined and split ---------------------------------------------------------------------------------
def test_terminal_wrapped_and_glued_watchdogs(tmp_path):
    # nanotron #204: a progress bar with rank 2's watchdog glued on, both lines cut at the terminal's width
    s = load(tmp_path, (DATA / "nanotron_204_progress_glued_and_wrapped_watchdogs.log").read_text())
    assert timeouts(s) == [[2, 3, "ALLREDUCE", 1, 1, 600000, 600888], [3, 3, "ALLREDUCE", 1, 1, 600000, 600892]]
    t = events(s, "nccl_timeout")
    assert t["source"].tolist() == ["capture.log:1", "capture.log:3"] and not t["truncated"].any()
    assert s.diagnostics.empty


def _wrap(line: str, width: int) -> list[str]:
    """``line`` as a terminal shows it ``width`` wide: cut anywhere, the last piece padded with spaces."""
    pieces = [line[i:i + width] for i in range(0, len(line), width)]
    return pieces[:-1] + [pieces[-1].ljust(width)]


@pytest.mark.parametrize("width, ranks", [(80, [0, 4]), (97, [0, 4, 5, 6, 7]), (143, [2, 9, 11])])
def test_every_rank_of_wrapped_watchdogs_is_kept(tmp_path, width, ranks):
    # the watchdog line of LlamaFactory #7396 for more ranks, each cut at another terminal width
    line = TORCH[0]
    text = []
    for r in ranks:
        text += _wrap(line.replace("[rank0]", f"[rank{r}]").replace("[Rank 0]", f"[Rank {r}]"), width)
    s = load(tmp_path, text)
    assert timeouts(s) == [[r, 1580, "ALLREDUCE", 466119168, 466119168, 600000, 600060] for r in ranks]
    assert not events(s, "nccl_timeout")["truncated"].any() and s.diagnostics.empty


def test_records_glued_onto_one_line(tmp_path):
    # LlamaFactory #7396's four records flattened onto one line (as a teardown is): each is read, citing line 1
    s = load(tmp_path, " ".join(TORCH))
    assert timeouts(s) == TORCH_TIMEOUTS
    assert events(s, "watchdog_work")["rank"].tolist() == [0, 3]
    assert set(s.events["source"]) == {"capture.log:1"} and s.diagnostics.empty


def test_a_log_service_row_holding_a_multi_line_event(tmp_path):
    # litData #340's rows flattened into one CloudWatch row, the event's lines joined by a literal "\n"
    rows = lines_of("litdata_340_cloudwatch_columns.log")
    text = "  | 2024-08-23T22:22:51.871Z | " + "\\n".join(re.sub(r"^  \| \S+ \| ", "", ln) for ln in rows)
    s = load(tmp_path, [text, text.replace("Rank 6]", "Rank 7]")])
    assert timeouts(s) == [[6, 70426, "ALLREDUCE", 1, 1, 1800000, 1800038], [7, 70426, "ALLREDUCE", 1, 1, 1800000,
                                                                              1800038]]
    assert s.diagnostics.empty


# --- 3. class 5: a collective mismatch keeps both sides ----------------------------------------------------
@pytest.mark.parametrize("width", [None, 90])
def test_mismatch_of_a_tensorless_fingerprint(tmp_path, width):
    # "SequenceNumber=1649OpType=BARRIER" (no comma: ProcessGroupWrapper.cpp's fingerprint of no tensors)
    line = "[rank1]:RuntimeError: " + lines_of("mismatch_no_comma_fingerprint.txt")[0]
    s = load(tmp_path, _wrap(line, width) if width else [line])
    (mm,) = events(s, "collective_mismatch").to_dict("records")
    assert (mm["ranks"], mm["ops"], mm["seqs"], mm["rank"]) == ("0,1", "BARRIER,GATHER", "1649,0", 1)
    assert mm["differences"] == "seq 1649 vs 0; op BARRIER vs GATHER"


def test_the_same_long_line_repeated_is_no_terminal_wrap():
    # each rank prints the same longest warning, then a line of its own: nothing was cut at a width
    warning = ("Some weights of LlamaForSequenceClassification were not initialized from the model checkpoint "
               "and are newly initialized: ['score.weight']")
    lines = [warning, "You should probably TRAIN this model on a down-stream task.", warning,
             "You should probably TRAIN this model on a down-stream task."]
    assert [r.text for r in layer(lines)] == lines


@pytest.mark.parametrize("prefix", [
    lambda i: f"[worker-{i % 3}] ",  # a tag of the process that wrote the line
    lambda i: f"Jan 12 10:00:0{i} gpu-node-7 python[4242]: ",  # a syslog head
    lambda i: "│ ",  # a terminal multiplexer's pane border
    lambda i: f"{451 + i:>6}\t",  # line numbers as an editor pastes them
    lambda i: f"2024-05-01 10:00:0{i} | ",  # a log shipper's time column
])
def test_other_prefix_shapes_before_real_lines(tmp_path, prefix):
    s = load(tmp_path, [prefix(i) + ln for i, ln in enumerate(TORCH)])
    assert timeouts(s) == TORCH_TIMEOUTS
    assert events(s, "watchdog_work")["rank"].tolist() == [0, 3] and s.diagnostics.empty


@pytest.mark.parametrize("clock", [lambda i: f"18:19:0{i}.687 ", lambda i: f"[2024-05-01 10:00:0{i}] "])
def test_a_clock_before_a_traceback(tmp_path, clock):
    # ament_cmake #254's traceback (its own prefixes taken off) behind a clock on every line
    body = [re.sub(r"^  \[\S+\] 1: ", "", ln) for ln in lines_of("ament_cmake_254_indented_jenkins_stamp_ctest_label.log")]
    s = load(tmp_path, [clock(i) + ln for i, ln in enumerate(body)])
    (err,) = events(s, "error").to_dict("records")
    assert (err["exception"], err["source"]) == ("FileExistsError", "capture.log:8") and s.diagnostics.empty


# --- a logging record glued after a progress bar ------------------------------------------------------------
def test_a_logging_record_glued_after_a_bar():
    # gpt-neo-fine-tuning-example#7 lines 1, 3, 4: "... 2.14s/it][2021-06-08 12:02:45,001] [INFO] [stage3.py:...":
    # the bar and the record are two records, both citing their line
    records = layer(lines_of("gpt_neo_fine_tuning_7_bar_glued_deepspeed_overflow.log"))
    logged = [(r.number, r.text[:25]) for r in records if r.text.startswith("[2021-")]
    assert logged == [(1, "[2021-06-08 12:02:45,001]"), (2, "[2021-06-08 12:02:45,002]"),
                      (3, "[2021-06-08 12:02:47,123]"), (4, "[2021-06-08 12:02:49,251]")]
    assert [r.number for r in records if "/63645 [" in r.text] == [1, 3, 4]
    assert all(r.text.endswith("s/it]") for r in records if "/63645 [" in r.text)


def test_the_glued_record_is_read_as_deepspeeds(tmp_path):
    s = load(tmp_path, lines_of("gpt_neo_fine_tuning_7_bar_glued_deepspeed_overflow.log"))
    assert s.meta.framework == "deepspeed" and s.meta.facts_source["framework"] == "capture.log:1"
    assert s.meta.progress["step"] == 11 and s.meta.progress["total"] == 63645  # line 4's bar


@pytest.mark.parametrize("bar", [
    # variation: a labelled bar with a postfix (trlx#342's form, made here), then the record
    "[losses/total_loss: 1.34]:  16%|##        | 1044/6400 [1:16:09<1:07:04,  1.33it/s, kl=0.1]",
    # variation: a bar in it/s
    "  1%|#         | 6/1184 [00:21<1:09:10,  2.79it/s]",
])
def test_a_record_after_other_bars(bar):
    record = "[2023-02-28 20:08:24,113] [INFO] [stage_1_and_2.py:1769:step] [deepspeed] OVERFLOW! Rank 0 Skipping step."
    texts = [r.text for r in layer([bar + record])]
    assert len(texts) == 2 and texts[1] == record and texts[0].endswith(bar[-20:])  # the bar, however labelled


def test_brackets_of_a_line_of_its_own_are_not_cut():
    # a record whose own text holds "][" before no date is one record
    line = "[2023-02-28 20:08:24,113] [INFO] [engine.py:1:f] shapes [[1, 2]][[3, 4]]"
    assert [r.text for r in layer([line])] == [line]
