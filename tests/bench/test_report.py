"""The benchmark report: figures found in nested results, units, the Markdown table, plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.report import markdown, unit_of, write_report
from bench.stats import figures, summary

RESULTS: dict[str, Any] = {
    "when": "2026-01-01T00:00:00Z", "machine": {"cpus": 2, "python": "3.11"}, "quick": True,
    "resync": {"jobs": 20, "reconcile": {"wall_s": summary([0.2, 0.1, 0.4]),
                                         "requests_by_verb": {"get": 40, "list": 49}}},
    "throughput": {"job_events_per_s": summary([100, 110], 1)},
}


@pytest.mark.parametrize(("values", "expected"), [
    pytest.param([3.0, 1.0, 2.0], {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}, id="odd"),
    pytest.param([1.0, 2.0], {"median": 1.5, "min": 1.0, "max": 2.0, "n": 2}, id="even"),
    pytest.param([0.12345], {"median": 0.123, "min": 0.123, "max": 0.123, "n": 1}, id="one"),
])
def test_summary(values: list[float], expected: dict[str, float]) -> None:
    assert summary(values) == expected


def test_summary_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        summary([])


@pytest.mark.parametrize(("name", "unit"), [
    pytest.param("throughput.job_events_per_s", "1/s", id="rate"),
    pytest.param("runtime.parse_route_ms", "ms", id="milliseconds"),
    pytest.param("resync.gc.wall_s", "s", id="seconds"),
    pytest.param("runtime.worker_rss_mib", "MiB", id="memory"),
    pytest.param("jobs.jobs_200.ratio_to_limit", "x", id="ratio"),
    pytest.param("resync.gc.api_requests", "requests", id="requests"),
])
def test_units(name: str, unit: str) -> None:
    assert unit_of(name) == unit


def test_figures_are_found_at_any_depth() -> None:
    assert [name for name, _ in figures(RESULTS)] == [
        "resync.reconcile.wall_s", "throughput.job_events_per_s"]


def test_markdown_has_one_row_per_figure_and_the_details() -> None:
    text = markdown(RESULTS, "python -m bench --quick")
    assert "| reconcile.wall_s | 0.2 | 0.1 | 0.4 | 3 | s |" in text
    assert "| job_events_per_s | 105 | 100 | 110 | 2 | 1/s |" in text
    assert '- reconcile.requests_by_verb: {"get": 40, "list": 49}' in text
    assert "`python -m bench --quick`" in text


def test_write_report_makes_the_table_and_a_png_per_suite(tmp_path: Path) -> None:
    written = write_report(RESULTS, tmp_path)
    assert sorted(p.name for p in written) == ["latest.md", "resync.png", "throughput.png"]
    for path in written[1:]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_merge_keeps_what_the_new_run_did_not_measure() -> None:
    from bench.__main__ import merge

    base: dict[str, Any] = {"when": "first", "burst": {"systems": "limit,ours",
                                       "jobs_200": {"limit": {"t": 1}, "ours": {"t": 2}}},
            "runtime": {"x": 1}}
    new: dict[str, Any] = {"burst": {"systems": "ours-knative",
                                     "jobs_200": {"ours-knative": {"t": 3}}}}
    merged = merge(base, new)
    assert merged["burst"]["jobs_200"] == {"limit": {"t": 1}, "ours": {"t": 2},
                                           "ours-knative": {"t": 3}}
    assert merged["runtime"] == {"x": 1}
    assert merged["when"] == "first"
    assert base["burst"]["jobs_200"] == {"limit": {"t": 1}, "ours": {"t": 2}}  # untouched


def test_markdown_names_each_update() -> None:
    text = markdown({"when": "w", "updates": [{"when": "later", "command": "python -m bench"
                                               " --only burst --merge"}]}, "python -m bench")
    assert ("Updated by `python -m bench --only burst --merge` (later): the figures it "
            "measured replace those of the first run.") in text


@pytest.mark.parametrize(("command", "kept"), [
    pytest.param("python -m bench --only burst --merge", ["runtime", "trainer runtime"],
                 id="a-whole-suite-replaces-the-updates-of-that-suite-alone"),
    pytest.param("python -m bench --only burst --burst-systems ours --merge",
                 ["burst ours", "burst knative", "runtime", "trainer runtime"],
                 id="some-systems-replace-nothing-whole"),
    pytest.param("python -m bench --only burst --burst-no-large --merge",
                 ["burst ours", "burst knative", "runtime", "trainer runtime"],
                 id="one-size-replaces-nothing-whole"),
    pytest.param("python -m bench --quick --merge",
                 ["burst ours", "burst knative", "runtime", "trainer runtime"],
                 id="smoke-sizes-replace-nothing"),
    pytest.param("python -m bench --only runtime trainer --merge", ["burst ours",
                                                                    "burst knative"],
                 id="two-suites-replace-updates-within-them"),
])
def test_an_update_that_measured_suites_whole_leaves_out_their_earlier_updates(
        command: str, kept: list[str]) -> None:
    from bench.__main__ import superseded_left_out

    updates = [
        {"command": "python -m bench --only burst --burst-systems ours --merge",
         "name": "burst ours"},
        {"command": "python -m bench --only burst --burst-systems ours-knative "
                    "--burst-large-only --merge", "name": "burst knative"},
        {"command": "python -m bench --only runtime --merge", "name": "runtime"},
        {"command": "python -m bench --only trainer runtime --merge", "name": "trainer runtime"},
    ]
    assert [u["name"] for u in superseded_left_out(updates, command)] == kept
