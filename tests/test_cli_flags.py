"""Flags are generated from the settings schema: one source of defaults and help."""

from __future__ import annotations

import argparse

from exporter import cli
from exporter.wiring.config import Settings


def _actions() -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in cli.parser()._actions if a.option_strings}


def test_every_flag_names_a_settings_key_and_shows_the_schema_default() -> None:
    actions = _actions()
    for flag in cli.FLAGS:
        action = actions[flag.flag]
        assert action.dest == flag.key.replace(".", "__")
        info = cli._field(flag.key)
        assert action.help and info.description, flag
        default = info.get_default(call_default_factory=False)
        if isinstance(default, (int, float, str)) and not isinstance(default, bool) and default:
            assert f"(default {default})" in action.help, (flag, action.help)


def test_simulate_gpus_help_says_the_real_default() -> None:
    assert f"(default {Settings().simulate_gpus})" in (_actions()["--simulate-gpus"].help or "")


def test_flags_parse_to_the_nested_settings_tree() -> None:
    args = cli.parser().parse_args(
        ["--kubelet-interval", "3", "--serving-target", "http://a/m", "--no-debug-state",
         "--profiling", "off"]
    )
    assert cli.flags_to_tree(args) == {
        "kubernetes": {"interval": 3.0},
        "serving": {"extra_targets": ["http://a/m"]},
        "debug_state": False,
        "profiling": {"mode": "off"},
    }
