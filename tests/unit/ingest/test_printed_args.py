"""The run facts a program's printed arguments state: a launch command's flags (one a line under ``\\``
continuations: transformers' ``--fsdp``, DeepSpeed's ``--deepspeed_config``) and fairseq's argument
``Namespace(...)`` (``distributed_world_size``, ``distributed_backend``). Real excerpts
(tests/data/printed_args/README.md) and variations said to be made here; expected values read off the lines by
eye."""

from __future__ import annotations

from tests.support.excerpts import load, reader

text = reader("printed_args")


def test_the_trainers_fsdp_flag_states_the_strategy(tmp_path):
    s = load(tmp_path, text("fsdp_flags_qwerty_pretrain.log"))
    # line 17: --fsdp "full_shard auto_wrap" \
    assert s.meta.strategy == "fsdp" and s.meta.strategy_from.startswith("stated: fsdp=")
    assert s.meta.facts_source["strategy"].endswith(":17")
    assert 17 not in set(s.diagnostics["line"].dropna())  # the flag line is read


def test_an_empty_fsdp_flag_and_a_commented_one_state_nothing(tmp_path):
    # variation: the flag set empty (the Trainer's default: no FSDP), and commented out in the script
    lines = text("fsdp_flags_qwerty_pretrain.log").splitlines(keepends=True)
    lines[16] = '    --fsdp "" \\\n'
    lines.insert(17, '    # --fsdp "full_shard offload auto_wrap" \\\n')
    s = load(tmp_path, "".join(lines))
    assert s.meta.strategy is None


def test_deepspeeds_config_flag_states_deepspeed(tmp_path):
    s = load(tmp_path, text("deepspeed_config_flag_fmengine.log"))
    # line 15: --deepspeed_config ./configs/llama_lessmem.json
    assert s.meta.strategy == "deepspeed" and s.meta.facts_source["strategy"].endswith(":15")


def test_deepspeeds_switch_alone_on_the_command_line(tmp_path):
    # variation: DeepSpeed's own switch on the command's line (deepspeed.add_config_arguments), no value
    s = load(tmp_path, "deepspeed train.py --deepspeed --deepspeed_config ds.json --epochs 2\n")
    assert s.meta.strategy == "deepspeed"


def test_fairseqs_namespace_states_the_world_size_and_the_backend(tmp_path):
    s = load(tmp_path, text("fairseq_namespace_940.log"))
    # line 5: distributed_backend='nccl', distributed_world_size=4 (ddp_backend='no_c10d' is no process-group backend)
    assert s.meta.world_size == 4 and s.meta.world_size_from.startswith("stated: distributed_world_size=4")
    assert s.meta.backend == "nccl"


def test_a_namespace_stating_a_world_larger_than_the_ranks_seen(tmp_path):
    # variation: the same Namespace from a job of 8 processes, four of whose init lines are in the file: 8, stated,
    # not the highest rank seen (3) + 1
    body = text("fairseq_namespace_940.log").replace("distributed_world_size=4", "distributed_world_size=8")
    s = load(tmp_path, body)
    assert s.meta.world_size == 8 and "lower bound" not in s.meta.world_size_from
