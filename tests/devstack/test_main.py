"""The ``python -m devstack`` entry point: the local cluster and stack's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.__main__ import build_parser, main
from tests.core.test_events import SAMPLES
from tests.runtime.test_serve import write_kubeconfig
from tests.support import REPO


def test_only_the_requested_command_is_loaded() -> None:
    parser = build_parser(["record", "--out", "x.jsonl"])
    assert parser.parse_args(["record", "--out", "x.jsonl"]).command == "record"
    with pytest.raises(SystemExit):
        parser.parse_args(["dev"])


def test_without_a_command_help_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    for command in ("dev", "cluster", "router", "record", "replay"):
        assert command in out


def test_replay_in_process_from_the_command_line(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig),
           "FUNCTIONS_CONTROLLER_MODULES": "tests.runtime.controllers"}
    result = subprocess.run(
        [sys.executable, "-m", "devstack", "replay",
         str(SAMPLES / "02-captured-resource-update-pytorchjob-status.http.json"),
         "--in-process", "reconcile", "--duplicate", "1", "--seed", "3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["read"], report["sent"], report["accepted"]) == (1, 2, 2)
