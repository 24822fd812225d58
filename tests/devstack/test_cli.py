"""``python -m devstack dev``: what its flags make of the stack it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devstack import cli
from devstack.__main__ import build_parser


@pytest.mark.parametrize(("flags", "delivery_auth"), [
    pytest.param([], True, id="only-the-brokers-deliveries-by-default"),
    pytest.param(["--no-delivery-auth"], False, id="opted-out"),
])
def test_delivery_auth_follows_the_flag(monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                        delivery_auth: bool) -> None:
    made: dict[str, Any] = {}

    class Stack:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.update(kwargs)

        def start(self) -> None:
            raise RuntimeError("not started in this test")

    monkeypatch.setattr(cli, "DevStack", Stack)
    monkeypatch.setattr(cli, "ensure_bin_dir", lambda groups: Path("/nonexistent"))
    monkeypatch.setattr(cli, "trainer_manifests", lambda: None)
    assert cli.main(build_parser().parse_args(["dev", *flags])) == 1
    assert made["delivery_auth"] is delivery_auth
