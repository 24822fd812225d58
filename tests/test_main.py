"""The ``python -m functions`` entry point: the container's and the users' commands only."""

from __future__ import annotations

import pytest

from functions.__main__ import build_parser, main


def test_only_the_requested_command_is_loaded() -> None:
    parser = build_parser(["doctor", "-n", "x"])
    assert parser.parse_args(["doctor", "-n", "x"]).command == "doctor"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "reconcile"])


def test_without_a_command_help_lists_the_product_s_commands_alone(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(command in out for command in ("serve", "jobs", "doctor"))
    assert not [c for c in ("dev", "cluster", "router", "record", "replay")
                if f"    {c} " in out], "the local stack's commands are python -m devstack's"
