"""A function's ``/metrics``: its own series under the application's prefix, and the process
and Python collectors' standard series beside them."""

from __future__ import annotations

import pytest

from functions.runtime.metrics import Metrics


@pytest.fixture
def exposition() -> str:
    metrics = Metrics()
    metrics.event("reconcile", "dev.knative.apiserver.resource.add", "PyTorchJob", "ok")
    metrics.api_request("get", 200, 0.01)
    metrics.handler_finished("reconcile", "pytorchjobs", 0.02, "ok")
    metrics.delivery_checked("reconcile", "accepted")
    return metrics.render()[0].decode()


@pytest.mark.parametrize("series", [
    pytest.param("odh_training_events_total", id="events"),
    pytest.param("odh_training_handler_duration_seconds_count", id="handler-time"),
    pytest.param("odh_training_kube_api_requests_total", id="api-requests"),
    pytest.param("odh_training_kube_api_request_duration_seconds_count", id="api-time"),
    pytest.param("odh_training_delivery_auth_total", id="delivery-verdicts"),
    pytest.param("process_resident_memory_bytes", id="process"),
    pytest.param("python_info", id="platform"),
    pytest.param("python_gc_collections_total", id="garbage-collector"),
])
def test_a_series_is_exposed(exposition: str, series: str) -> None:
    assert any(line.startswith(series) for line in exposition.splitlines()), series


def test_no_series_keeps_the_old_unprefixed_names(exposition: str) -> None:
    """The upstream operators' series (training_operator_*, created_pods, ...) keep their
    names; ours were renamed from functions_* (CHANGELOG.md)."""
    names = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE")}
    assert not [name for name in names if name.startswith("functions_")]
