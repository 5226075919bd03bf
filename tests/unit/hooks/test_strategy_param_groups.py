"""fully_shard's parameter groups across torch versions: torch 2.11 (seen on a GPU host: strategy "none",
"'FSDPState' object has no attribute '_fsdp_param_groups'") keeps one group or None in ``_fsdp_param_group``;
newer torch a list in ``_fsdp_param_groups``."""

from types import SimpleNamespace

from trainer_hooks.strategy import param_groups


def _unit(**state):
    return SimpleNamespace(_get_fsdp_state=lambda: SimpleNamespace(**state))


def test_the_list_of_newer_torch():
    assert param_groups(_unit(_fsdp_param_groups=["a", "b"])) == ["a", "b"]


def test_the_single_group_of_torch_2_11():
    assert param_groups(_unit(_fsdp_param_group="a")) == ["a"]


def test_a_unit_without_parameters_has_no_group():
    assert param_groups(_unit(_fsdp_param_group=None)) == []
