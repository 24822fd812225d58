"""The burst benchmark: its pure parts (audit-log counting, /proc parsing, progress from watch
events, run summaries, the report rows) and one smallest run of the limit system."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import burst, burst_audit, burst_proc, burst_systems, report_burst
from bench.burst import best_limit, one_run, per_job, summarise
from bench.burst_workload import JOB_LABEL, Progress


def event(audit_id: str, user: str, verb: str, *, resource: str | None = "pods",
          subresource: str | None = None, stage: str = "ResponseComplete",
          received: str = "2026-01-01T00:00:01.000000Z", uri: str = "/api/v1/pods") -> str:
    ref = {"resource": resource, "namespace": "burst"} if resource else None
    if ref is not None and subresource:
        ref["subresource"] = subresource
    body: dict[str, Any] = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
                            "auditID": audit_id, "stage": stage, "requestURI": uri, "verb": verb,
                            "user": {"username": user}, "requestReceivedTimestamp": received,
                            "stageTimestamp": received}
    if ref is not None:
        body["objectRef"] = ref
    return json.dumps(body)


START = burst_audit.timestamp("2026-01-01T00:00:00Z")


@pytest.mark.parametrize(("lines", "since", "until", "expected"), [
    pytest.param([event("a", "op", "create"), event("b", "op", "create"),
                  event("c", "op", "get")], None, None,
                 {"op": {"total": 3, "by_verb": {"create": 2, "get": 1},
                         "by_verb_resource": {"create pods": 2, "get pods": 1}}},
                 id="by-verb-and-resource"),
    pytest.param([event("w", "op", "watch", stage="ResponseStarted"),
                  event("w", "op", "watch")], None, None,
                 {"op": {"total": 1, "by_verb": {"watch": 1},
                         "by_verb_resource": {"watch pods": 1}}},
                 id="a-watch-logs-two-stages-once-counted"),
    pytest.param([event("s", "op", "update", resource="pytorchjobs", subresource="status")],
                 None, None,
                 {"op": {"total": 1, "by_verb": {"update": 1},
                         "by_verb_resource": {"update pytorchjobs/status": 1}}},
                 id="subresource"),
    pytest.param([event("h", "kubelet", "get", resource=None, uri="/healthz?verbose=1")],
                 None, None,
                 {"kubelet": {"total": 1, "by_verb": {"get": 1},
                              "by_verb_resource": {"get /healthz": 1}}},
                 id="non-resource-path"),
    pytest.param([event("early", "op", "get", received="2025-12-31T23:59:59Z"),
                  event("in", "op", "get", received="2026-01-01T00:00:05.5Z"),
                  event("late", "op", "get", received="2026-01-01T00:00:11Z")],
                 START, START + 10,
                 {"op": {"total": 1, "by_verb": {"get": 1},
                         "by_verb_resource": {"get pods": 1}}},
                 id="window"),
    pytest.param(["", "{not json", '{"kind": "Status"}', event("a", "x", "list")], None, None,
                 {"x": {"total": 1, "by_verb": {"list": 1},
                        "by_verb_resource": {"list pods": 1}}},
                 id="junk-lines-skipped"),
])
def test_audit_counts(lines: list[str], since: float | None, until: float | None,
                      expected: burst_audit.Counts) -> None:
    assert burst_audit.count(burst_audit.parse(lines), since, until) == expected


def test_combined_adds_identities_and_ignores_absent_ones() -> None:
    counts = burst_audit.count(burst_audit.parse([
        event("1", "sa:reconcile", "create"), event("2", "sa:status", "patch",
                                                      resource="pytorchjobs",
                                                      subresource="status"),
        event("3", "admin", "get")]))
    assert burst_audit.combined(counts, ["sa:reconcile", "sa:status", "sa:gc"]) == {
        "total": 2, "by_verb": {"create": 1, "patch": 1},
        "by_verb_resource": {"create pods": 1, "patch pytorchjobs/status": 1}}


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("42 (python3) S 7 42 42 0 -1 4194560 1 0 0 0 150 30 5 2 20 0 1 0",
                 (7, 180, 7), id="plain"),
    pytest.param("43 (gunicorn: worker [a) b]) R 42 42 42 0 -1 0 1 0 0 0 10 5 0 0 20 0 1 0",
                 (42, 15, 0), id="name-with-spaces-and-parens"),
])
def test_parse_stat(text: str, expected: tuple[int, int, int]) -> None:
    assert burst_proc.parse_stat(text) == expected


def test_descendants_follow_the_tree_from_live_roots_only() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1}
    assert burst_proc.descendants([10, 99], parents) == {10, 11, 12, 13}


def pod(name: str, job: str, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {JOB_LABEL: job}}, "status": {"phase": phase}}


def pytorchjob(name: str, *conditions: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def feed(progress: Progress, job: str, *, phase: str, conditions: tuple[str, ...]) -> None:
    for index in range(3):
        progress.apply("pods", "ADDED", pod(f"{job}-{index}", job, phase))
        progress.apply("services", "ADDED", {"metadata": {"name": f"{job}-{index}"}})
    progress.apply("pytorchjobs", "MODIFIED", pytorchjob(job, *conditions))


@pytest.mark.parametrize(("by_pods", "phase", "conditions", "created", "running"), [
    pytest.param(False, "Running", ("Created",), True, False, id="created-not-yet-running"),
    pytest.param(False, "Running", ("Created", "Running"), True, True, id="controller-running"),
    pytest.param(False, "Pending", (), False, False, id="no-conditions"),
    pytest.param(True, "Running", ("Created",), True, True, id="limit-pods-running"),
    pytest.param(True, "Pending", ("Created",), True, False, id="limit-pods-pending"),
])
def test_progress(by_pods: bool, phase: str, conditions: tuple[str, ...], created: bool,
                  running: bool) -> None:
    progress = Progress(2, by_pods)
    feed(progress, "a", phase=phase, conditions=conditions)
    feed(progress, "b", phase=phase, conditions=conditions)
    assert progress.all_created() is created
    assert progress.all_running() is running
    assert progress.all_pods_running() is (phase == "Running")
    assert progress.counts()["jobs_not_running"] == (0 if running else 2)


def test_progress_forgets_deleted_objects() -> None:
    progress = Progress(1)
    feed(progress, "a", phase="Running", conditions=("Created", "Running"))
    progress.apply("pods", "DELETED", pod("a-0", "a", "Running"))
    assert not progress.all_created()
    assert not progress.all_pods_running()
    assert progress.counts()["pods"] == 2


def run_result(created: float | None, running: float | None, *, total: int = 70,
               timed_out: bool = False, missing: int = 0) -> dict[str, Any]:
    return {"jobs": 10, "created_s": created, "running_s": running,
            "pods_running_s": None if running is None else running - 0.5,
            "settled_s": None if running is None else running + 1, "timed_out": timed_out,
            "jobs_not_created": missing, "jobs_not_running": missing, "create_errors": 0,
            "controller_cpu_s_at_end": 1.0, "controller_peak_rss_mib": 50.0,
            "controller_requests": {"total": total, "by_verb": {"create": total},
                                    "by_verb_resource": {"create pods": total}},
            "event_path_requests": {"total": 0}, "requests_by_user": {"op": total}}


def test_summarise_reports_timed_out_runs_instead_of_dropping_them() -> None:
    found = summarise([run_result(2.0, 3.0), run_result(4.0, None, timed_out=True, missing=3),
                       run_result(3.0, 5.0, total=90)])
    assert found["runs"] == 3
    assert found["runs_timed_out"] == 1
    assert found["created_s"] == {"median": 3.0, "min": 2.0, "max": 4.0, "n": 3}
    assert found["running_s"] == {"median": 4.0, "min": 3.0, "max": 5.0, "n": 2}
    assert found["pods_running_s"] == {"median": 3.5, "min": 2.5, "max": 4.5, "n": 2}
    assert found["jobs_not_running"]["max"] == 3
    assert found["controller_requests_per_job"]["total_requests"]["median"] == 7.0
    assert found["controller_requests_per_job"]["by_verb_resource"] == {"create pods": 7.0}
    assert found["event_path_requests_per_job"] == {}


@pytest.mark.parametrize(("counts", "expected_verbs"), [
    pytest.param([{"total": 20, "by_verb": {"get": 20}},
                  {"total": 40, "by_verb": {"get": 30, "list": 10}}],
                 {"get_requests": {"median": 2.5, "min": 2.0, "max": 3.0, "n": 2},
                  "list_requests": {"median": 0.5, "min": 0.0, "max": 1.0, "n": 2}},
                 id="a-verb-missing-in-a-run-counts-zero"),
])
def test_per_job(counts: list[dict[str, Any]], expected_verbs: dict[str, Any]) -> None:
    assert per_job(counts, 10)["by_verb"] == expected_verbs


@pytest.mark.parametrize(("points", "best"), [
    pytest.param({4: {"created_s": {"median": 9.0}}, 8: {"created_s": {"median": 7.0}},
                  16: {"created_s": {"median": 7.5}}}, 8, id="fastest"),
    pytest.param({4: {"created_s": {"median": 7.0}}, 8: {"created_s": {"median": 7.0}}}, 4,
                 id="tie-goes-to-fewer-threads"),
    pytest.param({4: {}, 8: {"created_s": {"median": 9.0}}}, 8, id="timed-out-point-skipped"),
])
def test_best_limit(points: dict[int, dict[str, Any]], best: int) -> None:
    assert best_limit(points) == best


def test_report_row_and_sweep_line() -> None:
    limit = {**summarise([run_result(2.0, 2.5)]), "best_threads": 16,
             "sweep": {"threads_8": {"created_s": {"median": 3.0, "min": 3.0, "max": 3.0,
                                                   "n": 1}},
                       "threads_16": {"created_s": {"median": 2.0, "min": 2.0, "max": 2.0,
                                                    "n": 1}}}}
    limit["controller_peak_rss_mib"] = {"median": 0.0, "min": 0.0, "max": 0.0, "n": 1}
    lines = report_burst.markdown_lines({"jobs_10": {"limit": limit}, "repeats": 1})
    assert lines[0] == "### 10 jobs"
    assert ("| limit (best of sweep: 16 threads) | 2 | 2 | 2.5 | 3.5 | n/a | n/a | 7 | create 7 "
            "| 0 / 0 | 1 (0 timed out) |") in lines
    assert "Limit sweep (T by create-loop concurrency): 8 threads: 3 s, 16 threads: 2 s." in lines


def test_report_lists_the_event_path_by_part_largest_first() -> None:
    def figure(value: float) -> dict[str, float]:
        return {"median": value, "min": value, "max": value, "n": 1}

    ours = {**summarise([run_result(2.0, 2.5)]),
            "event_path_cpu_s.imc-dispatcher_at_created": figure(5.3),
            "event_path_cpu_s.imc-dispatcher_at_end": figure(9.0),
            "event_path_cpu_s.cluster-network_at_created": figure(7.5)}
    lines = report_burst.markdown_lines({"jobs_10": {"ours-knative": ours}})
    assert ("ours-knative: event path CPU to T by part (s): cluster-network 7.5, "
            "imc-dispatcher 5.3.") in lines


@pytest.mark.parametrize(("meta", "workload"), [
    pytest.param({"name": "mt-broker-filter-7d9f8c6b5-x2x9z",
                  "generateName": "mt-broker-filter-7d9f8c6b5-",
                  "labels": {"pod-template-hash": "7d9f8c6b5"}}, "mt-broker-filter",
                 id="deployment-pod"),
    pytest.param({"name": "apiserversource-odh-training-ob1f-5c6d7-abcde",
                  "generateName": "apiserversource-odh-training-ob1f-5c6d7-",
                  "labels": {"pod-template-hash": "5c6d7",
                             "eventing.knative.dev/sourceName": "odh-training-objects"}},
                 "adapter-odh-training-objects", id="receive-adapter-by-its-source"),
    pytest.param({"name": "web-0", "generateName": "web-", "labels": {}}, "web",
                 id="statefulset-pod"),
    pytest.param({"name": "lonely"}, "lonely", id="bare-pod"),
])
def test_workload_of(meta: dict[str, Any], workload: str) -> None:
    assert burst_systems.workload_of({"metadata": meta}) == workload


def test_children_and_own_cpu_of_a_live_process() -> None:
    burn = ("import time\nend = time.process_time() + 0.4\n"
            "while time.process_time() < end: pass\nprint(flush=True)\ntime.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE)
    try:
        assert child.pid in burst_proc.children(os.getpid())
        assert child.stdout is not None
        child.stdout.readline()  # it has burnt its CPU
        assert burst_proc.own_cpu_of([child.pid]) >= 0.3
        assert burst_proc.own_cpu_of([2 ** 22 + 7]) == 0.0  # no such process
    finally:
        child.kill()
        child.wait()


@pytest.mark.cluster
def test_limit_run_end_to_end(bin_dir: Path) -> None:
    """The whole measuring path on the smallest burst (a fresh audited cluster, the observer
    process, /proc, the audit log); the Go operator and ours are left to the benchmark."""
    result = one_run("limit", 3, bin_dir, threads=2, timeout=60)
    assert result["created_s"] is not None and result["running_s"] is not None, result
    # Without a controller, the jobs run when their pods do.
    assert result["pods_running_s"] == result["running_s"], result
    assert result["settled_s"] is not None, result
    assert (result["jobs_not_created"], result["jobs_not_running"]) == (0, 0)
    assert result["create_errors"] == 0, result["first_errors"]
    assert result["controller_requests"]["by_verb_resource"] == {
        "create pods": 9, "create services": 9, "patch pytorchjobs/status": 3}
    assert result["requests_by_user"]["bench-driver"] == 3


@pytest.mark.cluster
def test_ours_run_starts_the_burst_only_once_the_event_path_is_live(bin_dir: Path) -> None:
    """The emulated path's adapters start with the stack; a job created before one of them
    has listed is never sent (and the burst runs without a resync). The run waits for a
    canary job's status first, so the burst's first jobs are Created like the rest."""
    result = one_run("ours", 3, bin_dir, timeout=60)
    assert (result["jobs_not_created"], result["jobs_not_running"]) == (0, 0), result
    assert result["create_errors"] == 0, result["first_errors"]
    assert result["dead_letters"] == 0


def test_report_says_which_controllers_each_systems_cluster_ran() -> None:
    with_endpoints = {**run_result(2.0, 2.5), "cluster_controllers": "endpoints-controller,x"}
    systems = {"go-tuned": summarise([with_endpoints]), "ours": summarise([with_endpoints]),
               "go-default": summarise([run_result(2.0, 2.5)])}
    assert systems["ours"]["cluster_controllers"] == "endpoints-controller,x"
    lines = report_burst.markdown_lines({"jobs_10": systems})
    assert ("Controllers beyond the local cluster's defaults: go-tuned, ours: "
            "endpoints-controller, x; go-default: none.") in lines


def test_runs_go_round_robin_over_the_systems(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose speed drifts over minutes weighs on every system alike."""
    order: list[tuple[str, int]] = []

    def fake_run(system: str, jobs: int, bin_dir: Path, *, threads: int,
                 timeout: float | None) -> dict[str, Any]:
        order.append((system, threads))
        return run_result(float(threads if system == "limit" else len(order)), 9.0)

    monkeypatch.setattr(burst, "one_run", fake_run)
    found = burst._size(10, 2, ("limit", "go-tuned", "ours"), (8, 16), Path("/bin"), None)
    assert order == [("limit", 8), ("limit", 16), ("go-tuned", 8), ("ours", 8)] * 2
    assert found["limit"]["best_threads"] == 8
    assert found["go-tuned"]["created_s"]["n"] == 2
    assert list(found) == ["limit", "go-tuned", "ours"]
