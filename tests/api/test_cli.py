"""The ``jobs submit`` flags into API requests: a kubeflow.org job or a TrainJob."""

from __future__ import annotations

from typing import Any

import pytest

from functions.__main__ import build_parser, main
from functions.api import cli

Obj = dict[str, Any]


def submitted(*flags: str) -> Obj:
    argv = ["jobs", "submit", *flags]
    return cli._request(build_parser(argv).parse_args(argv))


@pytest.mark.parametrize(("flags", "expected"), [
    pytest.param(("mnist", "--image", "i:1"),
                 {"name": "mnist", "image": "i:1", "priority": 0, "framework": "pytorch",
                  "workers": 1}, id="default-pytorch"),
    pytest.param(("mnist", "--image", "i:1", "--framework", "mpi", "--workers", "3"),
                 {"name": "mnist", "image": "i:1", "priority": 0, "framework": "mpi",
                  "workers": 3}, id="v1-framework"),
    pytest.param(("llm", "--image", "i:1", "--runtime", "torch-distributed"),
                 {"name": "llm", "image": "i:1", "priority": 0, "runtime": "torch-distributed",
                  "numNodes": 1}, id="trainjob-one-node"),
    pytest.param(("llm", "--image", "i:1", "--runtime", "torch-distributed", "--nodes", "4",
                  "--gpus", "2", "--env", "A=1", "--command", "torchrun", "t.py"),
                 {"name": "llm", "image": "i:1", "priority": 0, "runtime": "torch-distributed",
                  "numNodes": 4, "resources": {"gpus": 2}, "env": {"A": "1"},
                  "command": ["torchrun", "t.py"]}, id="trainjob-nodes-gpus-env-command"),
])
def test_submit_flags_make_the_request(flags: tuple[str, ...], expected: Obj) -> None:
    assert submitted(*flags) == expected


@pytest.mark.parametrize(("flags", "message"), [
    pytest.param(("llm", "--image", "i", "--runtime", "r", "--framework", "pytorch"),
                 "not both", id="framework-and-runtime"),
    pytest.param(("mnist", "--image", "i", "--nodes", "2"), "--nodes is for a TrainJob",
                 id="nodes-without-runtime"),
    pytest.param(("llm", "--runtime", "r"), "needs NAME and --image", id="no-image"),
])
def test_conflicting_submit_flags_are_refused_before_any_request(
        flags: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "submit", "--url", "http://127.0.0.1:9", *flags]) == 2
    assert message in capsys.readouterr().err
