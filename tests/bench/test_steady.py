"""``bench/steady.py``: its percentiles, the job it creates, its report, and the benchmark
itself for ours at a smoke size against a local cluster (the Go operator is a benchmark-only
binary that ``make test`` does not build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report_steady, steady
from devstack.cluster import kwok
from tests.support import REPO


@pytest.mark.parametrize(("values", "expected"), [
    pytest.param([float(v) for v in range(1, 101)], {"p50": 50.0, "p95": 95.0, "p99": 99.0},
                 id="hundred"),
    pytest.param([3.0, 1.0, 2.0], {"p50": 2.0, "p95": 3.0, "p99": 3.0}, id="unsorted"),
    pytest.param([1.0] * 98 + [None, None], {"p50": 1.0, "p95": 1.0, "p99": None},
                 id="never-seen-is-slowest"),
    pytest.param([], {"p50": None, "p95": None, "p99": None}, id="none"),
])
def test_percentiles_count_what_was_never_seen_as_slowest(
        values: list[float | None], expected: dict[str, float | None]) -> None:
    assert steady.percentiles(values) == expected


def test_latencies_are_from_each_job_stored() -> None:
    stored = {"a": 10.0, "b": 11.0, "c": 12.0}
    seen: dict[str, list[float | None]] = {"a": [11.5, 13.0], "b": [12.0, None]}
    assert steady.latencies(stored, seen) == ([1.5, 1.0, None], [3.0, None, None])


def test_every_replica_of_the_steady_job_succeeds_after_it_ran() -> None:
    job = steady.steady_job(7, run_for=12)
    assert job["metadata"]["name"] == "job-7"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        meta = replica["template"]["metadata"]
        assert meta["labels"][kwok.RESULT_LABEL] == "succeed"
        assert meta["annotations"][kwok.DELAY_ANNOTATION] == "12s"


def _run(system: str, rate: float, p99: float | None) -> dict[str, Any]:
    return {"system": system, "rate": rate, "seconds": 300.0, "jobs": int(rate * 300),
            "pods_s": {"p50": 0.5, "p95": 0.8, "p99": p99},
            "running_s": {"p50": 1.5, "p95": 2.0, "p99": 3.0},
            "jobs_without_pods": 0 if p99 is not None else 9, "jobs_not_running": 0,
            "late_creates": 0, "controller_cpu_s": 30.0, "controller_cpu_s_per_job": 0.05,
            "event_path_cpu_s": 10.0, "apiserver_cpu_s": 40.0, "controller_peak_rss_mib": 120.0,
            "samples": {"pods_s": [0.4, 0.5, 0.9] if p99 is not None else [0.4, None],
                        "running_s": [1.0, 1.5, 3.0]}}


RESULTS: dict[str, Any] = {"at": "2026-12-06T00:00:00Z", "machine": {"cpus": 2}, "runs": [
    _run("go-default", 2.0, None), _run("go-tuned", 2.0, 1.0), _run("ours", 2.0, 1.25),
    _run("go-tuned", 8.0, 1.0)]}


@pytest.mark.parametrize(("rate", "system", "other", "expected"), [
    pytest.param(2.0, "ours", "go-tuned", 0.25, id="measured"),
    pytest.param(2.0, "go-default", "go-tuned", None, id="never-reached"),
    pytest.param(8.0, "ours", "go-tuned", None, id="not-run"),
])
def test_the_p99_gap_between_two_systems(rate: float, system: str, other: str,
                                         expected: float | None) -> None:
    assert report_steady.against(RESULTS, rate, system, other) == expected


def test_the_report_has_a_table_per_rate_and_the_distributions(tmp_path: Path) -> None:
    text = report_steady.markdown(RESULTS, "python -m bench.steady")
    assert "## 2 jobs per second for 300 s" in text and "## 8 jobs per second" in text
    assert "| go-default | 600 | 0.5 / 0.8 / never |" in text
    assert "p99 create to pods minus go-tuned's: +0.25 s" in text
    assert report_steady.plot(RESULTS, tmp_path / "steady.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_the_benchmark_runs_for_ours_at_a_smoke_size(bin_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TESTBIN_DIR": str(bin_dir)}
    done = subprocess.run([sys.executable, "-m", "bench.steady", "--rates", "2", "--seconds",
                           "5", "--run-for", "2", "--drain", "60", "--systems", "ours",
                           "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [run] = json.loads((tmp_path / "steady.json").read_text())["runs"]
    assert run["jobs"] == 10 and run["create_errors"] == 0
    assert run["jobs_without_pods"] == run["jobs_not_running"] == 0, run
    assert 0 < run["pods_s"]["p50"] <= run["pods_s"]["p99"] <= run["running_s"]["p99"]
    assert run["controller_cpu_s"] > 0
    assert run["function_figures"]["deliveries.status"] > 0 and run["dead_letters"] == 0
    assert (tmp_path / "steady.png").read_bytes()[:4] == b"\x89PNG"
    print((tmp_path / "steady.md").read_text())
