"""The upstream training-operator counters: names and labels in every app's ``/metrics``, what
each write counts, and that a status transition is counted once by the write that makes it
(a replica that loses the race, or a write whose answer was lost, counts nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from functions.jobs import metrics
from functions.jobs.core.frameworks import JAX, MPI, PYTORCH
from functions.runtime.metrics import Metrics
from tests.jobs.fake_api import JobApi, run_status
from tests.jobs.fixtures import load

Obj = dict[str, Any]
UPSTREAM_JOB_COUNTERS = ("training_operator_jobs_created_total",
                         "training_operator_jobs_deleted_total",
                         "training_operator_jobs_successful_total",
                         "training_operator_jobs_failed_total",
                         "training_operator_jobs_restarted_total")
UPSTREAM_COUNTERS = ("created_pods_total", "deleted_pods_total", "failed_pods_total",
                     "succeeded_service_creation_total", "failed_service_creation_total",
                     "created_pod_groups_total", "deleted_pod_groups_total")


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a fresh app's ``/metrics`` text, by name and sorted labels."""
    text, _ = Metrics().render()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples}


def value(name: str, **labels: str) -> float:
    return scrape().get((name, tuple(sorted(labels.items()))), 0.0)


def job_value(name: str, namespace: str, framework: str) -> float:
    return value(name, job_namespace=namespace, framework=framework)


def test_upstream_names_show_in_every_app_next_to_ours() -> None:
    metrics.job_deleted(JAX, "names-ns")
    names = {name for name, _ in scrape()}
    assert set(UPSTREAM_COUNTERS) <= names
    assert "training_operator_jobs_deleted_total" in names
    assert ("training_operator_jobs_deleted_total",
            (("framework", "jax"), ("job_namespace", "names-ns"))) in scrape()


def conditions(*types: str, at: str = "2026-01-01T00:00:10Z", **fields: str) -> Obj:
    return {"conditions": [{"type": t, "status": "True", "lastTransitionTime": at}
                           for t in types], **fields}


def job(namespace: str, **annotations: str) -> Obj:
    return {"metadata": {"namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": annotations}}


@pytest.mark.parametrize(("before", "after", "counted"), [
    pytest.param({}, conditions("Created"), {"training_operator_jobs_created_total": 1},
                 id="created"),
    pytest.param(conditions("Created"), conditions("Created", "Succeeded"),
                 {"training_operator_jobs_successful_total": 1}, id="succeeded"),
    pytest.param(conditions("Created"), conditions("Created", "Failed"),
                 {"training_operator_jobs_failed_total": 1}, id="failed"),
    pytest.param(conditions("Created", "Running"), conditions("Created", "Restarting"),
                 {"training_operator_jobs_restarted_total": 1}, id="restarted"),
    pytest.param(conditions("Created", "Running"), conditions("Created", "Running"), {},
                 id="unchanged"),
])
def test_status_written_counts_transitions(before: Obj, after: Obj,
                                           counted: dict[str, int]) -> None:
    namespace = f"written-{len(counted)}-{sorted(counted)}"[:40]
    was = {name: job_value(name, namespace, "pytorch") for name in UPSTREAM_JOB_COUNTERS}
    metrics.status_written(PYTORCH, job(namespace), before, after)
    for name in UPSTREAM_JOB_COUNTERS:
        assert job_value(name, namespace, "pytorch") - was[name] == counted.get(name, 0), name


def test_failed_pods_count_growth_of_failed_replicas() -> None:
    was = value("failed_pods_total")
    metrics.status_written(JAX, job("pods-ns"), {"replicaStatuses": {"Worker": {"failed": 1}}},
                           {"replicaStatuses": {"Worker": {"failed": 3}}})
    assert value("failed_pods_total") - was == 2


@pytest.mark.parametrize(("before", "after", "counted"), [
    pytest.param({}, conditions("Created"), {"mpi_operator_jobs_created_total": 1},
                 id="created"),
    pytest.param(conditions("Created"), conditions("Created", "Succeeded"),
                 {"mpi_operator_jobs_successful_total": 1}, id="succeeded"),
    pytest.param(conditions("Created"), conditions("Created", "Failed"),
                 {"mpi_operator_jobs_failed_total": 1}, id="failed"),
    pytest.param(conditions("Created"), conditions("Created"), {}, id="unchanged"),
])
def test_mpi_operator_counters_count_mpijobs_alone(before: Obj, after: Obj,
                                                   counted: dict[str, int]) -> None:
    names = ("mpi_operator_jobs_created_total", "mpi_operator_jobs_successful_total",
             "mpi_operator_jobs_failed_total")
    was = {name: value(name) for name in names}
    metrics.status_written(MPI, job("mpi-ns"), before, after)
    metrics.status_written(PYTORCH, job("mpi-ns"), before, after)  # not an MPIJob
    assert {name: value(name) - was[name] for name in names} == {
        name: counted.get(name, 0) for name in names}


RUNNING_AT = "2026-01-01T00:00:40Z"
DONE = {"startTime": "2026-01-01T00:00:05Z", "completionTime": "2026-01-01T00:02:05Z"}


@pytest.mark.parametrize(("annotations", "before", "after", "observed"), [
    pytest.param({}, {}, conditions("Created", startTime="2026-01-01T00:00:05Z"),
                 {"odh_training_job_to_created_seconds": 10.0,
                  "odh_training_job_queued_seconds": 5.0}, id="created-and-admitted"),
    pytest.param({}, conditions("Created"), conditions("Created", "Running", at=RUNNING_AT),
                 {"odh_training_job_to_running_seconds": 40.0}, id="first-running"),
    pytest.param({"training.opendatahub.io/restarts": "1"}, conditions("Created"),
                 conditions("Created", "Running", at=RUNNING_AT), {},
                 id="running-after-a-restart"),
    pytest.param({}, conditions("Created", "Restarting"),
                 conditions("Created", "Running", at=RUNNING_AT), {}, id="running-again"),
    pytest.param({}, conditions("Created", "Running", startTime=DONE["startTime"]),
                 conditions("Created", "Running", "Succeeded", **DONE),
                 {"odh_training_job_run_seconds": 120.0}, id="succeeded"),
    pytest.param({}, conditions("Created", "Running", "Succeeded", **DONE),
                 conditions("Created", "Running", "Succeeded", **DONE), {},
                 id="unchanged"),
])
def test_service_level_histograms_observe_the_write_that_makes_the_transition(
        annotations: dict[str, str], before: Obj, after: Obj,
        observed: dict[str, float]) -> None:
    histograms = ("odh_training_job_queued_seconds", "odh_training_job_to_created_seconds",
                  "odh_training_job_to_running_seconds", "odh_training_job_run_seconds")

    def sums() -> dict[str, float]:
        found = dict.fromkeys(histograms, 0.0)
        for (name, _labels), sample in scrape().items():
            if name.endswith("_sum") and name.removesuffix("_sum") in histograms:
                found[name.removesuffix("_sum")] += sample
        return found

    was = sums()
    metrics.status_written(JAX, job("slo-ns", **annotations), before, after)
    now = sums()
    assert {name: now[name] - was[name] for name in histograms} == {
        name: observed.get(name, 0.0) for name in histograms}


def test_service_levels_carry_the_namespace_only_where_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    after = conditions("Created")
    metrics.status_written(JAX, job("unlabelled-ns"), {}, after)
    monkeypatch.setenv("METRICS_JOB_NAMESPACE", "true")
    metrics.status_written(JAX, job("labelled-ns"), {}, after)
    namespaces = {dict(labels).get("job_namespace") for (name, labels) in scrape()
                  if name == "odh_training_job_to_created_seconds_count"}
    assert "labelled-ns" in namespaces and "unlabelled-ns" not in namespaces
    assert "" in namespaces


@pytest.mark.parametrize(("action", "kind", "name"), [
    pytest.param(metrics.created, "Pod", "created_pods_total", id="pod-created"),
    pytest.param(metrics.created, "Service", "succeeded_service_creation_total",
                 id="service-created"),
    pytest.param(metrics.created, "PodGroup", "created_pod_groups_total", id="podgroup-created"),
    pytest.param(metrics.not_created, "Service", "failed_service_creation_total",
                 id="service-refused"),
    pytest.param(metrics.deleted, "Pod", "deleted_pods_total", id="pod-deleted"),
    pytest.param(metrics.deleted, "PodGroup", "deleted_pod_groups_total",
                 id="podgroup-deleted"),
])
def test_child_writes(action: Callable[[Obj], None], kind: str, name: str) -> None:
    before = {n: value(n) for n in UPSTREAM_COUNTERS}
    action({"kind": kind})
    action({"kind": "ConfigMap"})  # not a child upstream counts
    assert {n: value(n) - before[n] for n in UPSTREAM_COUNTERS} == {
        n: (1.0 if n == name else 0.0) for n in UPSTREAM_COUNTERS}


@pytest.mark.parametrize(("race", "lose", "counted"), [
    pytest.param(False, 0, 1, id="uncontested-write-counts"),
    pytest.param(True, 0, 0, id="replica-losing-the-race-counts-nothing"),
    pytest.param(False, 1, 0, id="write-with-lost-answer-is-not-counted-twice"),
])
def test_status_handler_counts_the_write_that_makes_the_transition(
        race: bool, lose: int, counted: int) -> None:
    job = load("jaxjob-workers.yaml")
    job["metadata"]["namespace"] = f"race-{race}-{lose}".lower()
    job["metadata"]["uid"] = f"uid-race-{race}-{lose}"
    api = JobApi(job)
    if race:
        api.before_patch = lambda: api.write({"conditions": [
            {"type": "Created", "status": "True", "reason": "JAXJobCreated",
             "message": "JAXJob spmd is created."}]})
    api.lose_answers = lose
    namespace = job["metadata"]["namespace"]
    was = job_value("training_operator_jobs_created_total", namespace, "jax")
    run_status(api)
    run_status(api)  # a redelivery of the same event
    assert api.job["status"]["conditions"][0]["type"] == "Created"
    assert job_value("training_operator_jobs_created_total", namespace, "jax") - was == counted
