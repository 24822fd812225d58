"""``bench/scale.py``: its report (memory slope, table, plot) from recorded figures, and the
benchmark itself for ours at a smoke size against a local cluster (the Go operator is a
benchmark-only binary that ``make test`` does not build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report_scale
from tests.support import REPO

FIGURES = {"ready_s": 1.0, "first_pass_s": 2.0, "wake_s": 3.0, "lists": 6, "list_mib": 1.5,
           "rss_mib": 100.0, "resync_s": 1.0, "resync_requests": 10, "resync_writes": 0,
           "rewake_s": 0.5, "rewake_requests": 1, "rewake_writes": 0}
RESULTS: dict[str, Any] = {"at": "2026-12-06T00:00:00Z", "machine": {"cpus": 2}, "sizes": [
    {"jobs": 1000, "fill_s": 60.0, "ours_rss_mib": 300.0,
     **dict.fromkeys(report_scale.FUNCTIONS, FIGURES),
     "go-tuned": {"synced_s": 1.0, "first_pass_s": 1.5, "lists": 5, "list_mib": 2.0,
                  "rss_mib": 90.0}},
    {"jobs": 5000, "fill_s": 300.0, "ours_rss_mib": 700.0,
     **dict.fromkeys(report_scale.FUNCTIONS, FIGURES),
     "go-tuned": {"synced_s": 2.0, "first_pass_s": 3.0, "lists": 5, "list_mib": 9.0,
                  "rss_mib": 250.0}}]}


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("ours_rss_mib", 100.0, id="ours"),
    pytest.param("go-tuned_rss_mib", 40.0, id="go"),
    pytest.param("missing", None, id="not-measured"),
])
def test_memory_slope_per_thousand_jobs(value: str, expected: float | None) -> None:
    assert report_scale.slope(report_scale.with_totals(RESULTS["sizes"]), value) == expected


def test_the_report_names_every_size_system_and_slope(tmp_path: Path) -> None:
    text = report_scale.markdown(RESULTS, "python -m bench.scale")
    assert "## 1000 jobs" in text and "## 5000 jobs" in text
    assert "| status |" in text and "| go-tuned |" in text
    assert "ours 100.0 MiB, go-tuned 40.0 MiB" in text
    assert report_scale.plot(RESULTS, tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_the_benchmark_runs_for_ours_at_a_smoke_size(bin_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TESTBIN_DIR": str(bin_dir)}
    done = subprocess.run([sys.executable, "-m", "bench.scale", "--sizes", "20",
                           "--systems", "ours", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [size] = json.loads((tmp_path / "scale.json").read_text())["sizes"]
    for function in report_scale.FUNCTIONS:
        figures = size[function]
        assert figures["resync_writes"] == figures["rewake_writes"] == 0, (function, figures)
        assert 0 < figures["ready_s"] <= figures["first_pass_s"] <= figures["wake_s"]
        assert figures["lists"] > 0 and figures["rss_mib"] > 0
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"
    print((tmp_path / "scale.md").read_text())
