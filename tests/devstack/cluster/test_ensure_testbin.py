"""``hack/ensure-testbin.sh`` says what it is doing while a cold build runs: a line as each group
starts (with how long its last cold build took) and ends, and one per binary, on stderr, where
``make dev`` and ``make test`` show it as it comes. Built here: the ``crds`` group (CRD files
from modules the Go module cache already holds), into an empty cache of the test's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.binaries


def test_a_cold_build_prints_each_group_as_it_starts_and_ends(tmp_path: Path) -> None:
    env = {**os.environ, "TESTBIN_CACHE": str(tmp_path / "cache"), "TESTBIN_ONLY": "crds",
           "TESTBIN_EXTRA": ""}
    for name in ("KUBEBUILDER_ASSETS", "TESTBIN_DIR"):
        env.pop(name, None)
    done = subprocess.run(["bash", str(REPO / "hack" / "ensure-testbin.sh")], env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    starting = [line for line in lines if "group crds: building" in line]
    assert starting == ["ensure-testbin: group crds: building (its last cold build took "
                        "1 s on a 2-core machine)"], lines
    assert any(line.startswith("ensure-testbin: group crds ready in ") for line in lines)
    assert lines.index(starting[0]) < len(lines) - 1
    assert Path(done.stdout.strip()).is_dir()
