"""NCCL_DEBUG lines of the kinds a capture's processes, ranks and errors are read from: ``Init timings``,
``Trees``, one process driving several GPUs, an error's return trace with or without a WARN, on excerpts of
real logs from public issues (``tests/data/nccl_lines/``, each cited in its README) and on variations of
them said to be made here. Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

from logkit.ingest.readers.nccl import parse_nccl_debug
from tests.support.excerpts import load, reader

text = reader("nccl_lines")




def kind(s, name: str) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == name].to_dict("records")


# --- Init timings: a communicator's device ----------------------------------------------------------------
def test_init_timings_lines_are_read_in_both_wordings():
    # nccl_1646 line 1: "[3] NCCL INFO Init timings - ncclCommInitRankConfig: rank 3 nranks 8 total 55.01 ..."
    first = parse_nccl_debug(text("nccl_1646_init_timings.log").splitlines()[0])
    assert (first["what"], first["rank"], first["nranks"], first["dev"]) == ("timings", 3, 8, 3)
    # made here: the same line in the earlier wording ("Init timings: rank 3 nranks 8 ...", as NCCL 2.20 wrote it)
    older = parse_nccl_debug(text("nccl_1646_init_timings.log").splitlines()[0].replace(" - ncclCommInitRankConfig:", ":"))
    assert (older["what"], older["rank"], older["nranks"]) == ("timings", 3, 8)


def test_a_device_only_init_timings_names_is_a_device_of_its_process(tmp_path):
    # made here: nccl_1646's lines as one process driving its GPUs (every line given pid 1106799, as a
    # single-process launch writes them): devices 3 and 4 are seen only in Init timings lines, 0 in Init COMPLETE
    body = text("nccl_1646_init_timings.log").replace(":1106802:", ":1106799:").replace(":1106803:", ":1106799:")
    s = load(tmp_path, body)
    assert s.meta["devices"] == {"d5618706-01": [0, 3, 4]}


# --- Trees: ranks of the run, and the writer's own ------------------------------------------------------
def test_trees_lines_give_each_device_its_rank_and_a_lower_bound(tmp_path):
    # nccl-tests_166: one process (pid 39964) writes "[6] ... Trees [0] 7/-1/-1->6->5" and "[5] ... 6/-1/-1->5->4":
    # device 6 is rank 6, device 5 rank 5; ranks 4..7 named, nothing states the world: at least 8
    s = load(tmp_path, text("nccl_tests_166_trees_one_process.log"))
    inits = kind(s, "nccl_init")
    assert sorted((r["device"], r["rank"]) for r in inits) == [(5, 5), (6, 6)]
    assert s.meta["nccl_ranks_seen"] == [4, 5, 6, 7]
    assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith("inferred (lower bound)")


def test_a_torn_tree_names_no_rank():
    # made here: nccl-tests_166's first line cut inside its second tree ("[1] 7/-1/-1->6-"): the first tree alone
    line = text("nccl_tests_166_trees_one_process.log").splitlines()[0]
    cut = line[: line.index("[1] 7/-1/-1->6->5") + len("[1] 7/-1/-1->6-")]
    n = parse_nccl_debug(cut)
    assert (n["what"], n["rank"], n["ranks"]) == ("trees", 6, [5, 6, 7])
    # NCCL 2.5's two-sided form (nccl_302: "Trees [0] 154/-1/-1->155->153|153->155->154/-1/-1")
    two = parse_nccl_debug("h:1:2 [3] NCCL INFO Trees [0] 154/-1/-1->155->153|153->155->154/-1/-1")
    assert (two["rank"], two["ranks"]) == (155, [153, 154, 155])


# --- an error's return trace, with a WARN and without ---------------------------------------------------
def test_a_return_trace_no_warn_opened_is_kept_and_the_warn_s_own_follows_it(tmp_path):
    # nccl_1029 line 1: "misc/socket.cc:749 -> 6" before any WARN of process 19491; line 4 its WARN
    # "Socket recv failed while polling for opId=0x7fb582222f90", then "transport/net.cc:288 -> 3" ... "group.cc:96 -> 3"
    s = load(tmp_path, text("nccl_1029_chain_before_warn.log"))
    warns = sorted(kind(s, "nccl_warn"), key=lambda w: int(w["source"].rsplit(":", 1)[1]))
    assert [w["source"] for w in warns] == ["capture.log:1", "capture.log:4"]
    assert warns[0]["chain"] == "misc/socket.cc:749 -> 6"
    assert warns[1]["message"] == "Socket recv failed while polling for opId=0x7fb582222f90"
    assert warns[1]["chain"] == ("transport/net.cc:288 -> 3; transport.cc:148 -> 3; init.cc:1079 -> 3; "
                                 "init.cc:1358 -> 3; group.cc:65 -> 3; group.cc:406 -> 3; group.cc:96 -> 3")


def test_nccl_2_3_s_rank_nranks_lines_are_inits_and_state_the_world(tmp_path):
    # horovod_110: pid 487531 (device [1]) "rank 3 nranks 4" (line 4) and "comm 0x7ffba445e890 rank 3 nranks 4" (line 10);
    # pid 487530 (device [0]) "rank 2 nranks 4" (line 8) and "comm 0x7f2a20413010 rank 2 nranks 4" (line 9)
    s = load(tmp_path, text("horovod_110_nccl_2_3_rank_nranks_second_node.log"))
    inits = sorted(kind(s, "nccl_init"), key=lambda e: e["rank"])
    assert [(e["rank"], e["nranks"], e["pid"], e["comm_id"]) for e in inits] == [
        (2, 4, 487530, "0x7f2a20413010"), (3, 4, 487531, "0x7ffba445e890")]  # one init per process
    assert s.meta["world_size"] == 4 and s.meta["world_size_from"].startswith("stated")


def test_the_bare_rank_nranks_line_alone_is_an_init_of_its_rank():
    # horovod_110 line 4 as parsed, and a variation made here without the comm's line after it
    n = parse_nccl_debug("lf-solar-gpu13-pm:487531:487559 [1] NCCL INFO rank 3 nranks 4")
    assert (n["what"], n["rank"], n["nranks"], n["comm"], n["state"]) == ("init", 3, 4, None, "start")
    # not a line that only mentions ranks ("rank 1 using buffSize = 2097152", NCCL 2.2, same thread)
    assert parse_nccl_debug("lf-solar-gpu13-pm:487531:487559 [1] NCCL INFO rank 1 using buffSize = 2097152")["what"] != "init"
