"""``python -m bench --quick`` end to end (the CI smoke size): every suite runs and the JSON,
the Markdown table and the plots are written. Times are printed, never asserted.

Except ``burst``: it compares with the upstream Go operator, a benchmark-only binary that
``make test`` does not build (``make bench`` does); its pure parts are tested in
``test_burst.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SUITES
from tests.support import REPO

pytestmark = pytest.mark.cluster
TESTED = tuple(suite for suite in SUITES if suite != "burst")


@pytest.mark.timeout(900)  # seven suites, each on fresh clusters; the subprocess has the same
def test_quick_bench_writes_every_result_file(bin_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TESTBIN_DIR": str(bin_dir)}
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path),
                           "--only", *TESTED],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((tmp_path / "latest.json").read_text())
    assert results["quick"] is True
    assert set(TESTED) <= set(results)
    table = (tmp_path / "latest.md").read_text()
    for suite in TESTED:
        assert f"## {suite}" in table
        assert (tmp_path / f"{suite}.png").read_bytes()[:4] == b"\x89PNG"
    assert results["resync"]["reconcile"]["api_writes"]["max"] == 0
    print(table)
