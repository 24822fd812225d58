"""HTTP behaviour of a function app (Flask's test client; no API server involved).

The API client given to these apps refuses every request, which proves that routing a
Resource-mode event (parent or child) costs no API call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from functions.core.errors import PermanentError, TemporaryError
from functions.core.keys import ObjectKey
from functions.kube.client import ApiError, KubeClient
from functions.kube.transport import Request, Response
from functions.runtime.app import create_app, runtime_of
from functions.runtime.registry import Context, Controller
from tests.core.test_events import BINARY, POD, load_sample
from tests.runtime.controllers import JOB_LABEL, Calls, recording_controller

MNIST = ObjectKey("kubeflow.org/v1", "PyTorchJob", "team-a", "mnist")


class RefusingTransport:
    def send(self, request: Request, timeout: float) -> Response:
        raise AssertionError(f"unexpected API request {request.method} {request.path}")

    def refresh_credentials(self) -> None:
        pass


def refusing_kube(hook: Any) -> KubeClient:
    return KubeClient(RefusingTransport(), on_request=hook)


def make_app(controllers: list[Controller], function: str = "reconcile",
             **kwargs: Any) -> Flask:
    return create_app(function, controllers=controllers, kube_factory=refusing_kube,
                      warm_up="now", **kwargs)


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def client(calls: Calls) -> FlaskClient:
    return make_app([recording_controller(calls)]).test_client()


def post_sample(client: FlaskClient, name: str) -> Any:
    headers, body = load_sample(name)
    return client.post("/", headers=headers, data=body)


@pytest.mark.parametrize(("sample", "keys"), [
    pytest.param("01-captured-resource-add-clusterscoped-trainer.http.json", [],
                 id="kind-of-no-controller"),
    pytest.param("02-captured-resource-update-pytorchjob-status.http.json", [MNIST],
                 id="resource-update"),
    pytest.param("03-captured-resource-delete-pytorchjob.http.json", [MNIST],
                 id="resource-delete"),
    pytest.param("04-captured-ref-add-pytorchjob-with-ceoverrides.http.json", [MNIST],
                 id="reference-mode-parent-needs-no-read"),
    pytest.param("05-openshift-kubevirt-vm-resource-add-via-broker.structured.json", [],
                 id="structured-foreign-kind"),
])
def test_samples_are_accepted_with_an_empty_body(client: FlaskClient, calls: Calls,
                                                 sample: str, keys: list[ObjectKey]) -> None:
    response = post_sample(client, sample)
    assert response.status_code == 202
    assert response.data == b""
    assert calls.keys() == keys


@pytest.mark.parametrize(("headers", "body", "status", "reason"), [
    pytest.param(BINARY, POD[:40], 400, "truncated", id="truncated-json"),
    pytest.param({**BINARY, "Content-Type": "text/plain"}, POD, 415, "not JSON",
                 id="wrong-content-type"),
    pytest.param({k: v for k, v in BINARY.items() if k != "Ce-Type"}, POD, 400, "ce-type",
                 id="missing-ce-type"),
    pytest.param({k: v for k, v in BINARY.items() if k != "Ce-Source"}, POD, 400, "ce-source",
                 id="missing-ce-source"),
    pytest.param({k: v for k, v in BINARY.items() if k != "Ce-Id"}, POD, 400, "ce-id",
                 id="missing-ce-id"),
    pytest.param({**BINARY, "Ce-Specversion": "9.9"}, POD, 400, "specversion",
                 id="unknown-specversion"),
    pytest.param(BINARY, b"[]", 400, "JSON object", id="data-not-an-object"),
    pytest.param(BINARY, b'{"a": "\xc3\x28"}', 400, "UTF-8", id="non-utf8"),
    pytest.param(BINARY, b"x" * 2048, 413, "limit", id="over-the-limit"),
    pytest.param({**BINARY, "Ce-Type": "com.example.unrelated"}, POD, 422, "unsupported",
                 id="foreign-event-type"),
])
def test_bad_input_is_4xx_with_a_reason_and_serving_goes_on(
        calls: Calls, headers: dict[str, str], body: bytes, status: int, reason: str) -> None:
    client = make_app([recording_controller(calls)], max_body_bytes=1500).test_client()
    response = client.post("/", headers=headers, data=body)
    assert response.status_code == status
    assert response.mimetype == "application/problem+json"
    problem = response.get_json()
    assert problem["status"] == status
    assert reason in problem["detail"]
    assert "Retry-After" not in response.headers
    assert calls.keys() == []
    assert post_sample(client, "02-captured-resource-update-pytorchjob-status.http.json"
                       ).status_code == 202
    assert calls.keys() == [MNIST]


def child_event(kind: str, labels: dict[str, str], owner: str | None = None) -> tuple[
        dict[str, str], bytes]:
    meta: dict[str, Any] = {"name": "mnist-worker-0", "namespace": "team-a", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                    "name": owner, "uid": "u", "controller": True}]
    obj = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    headers = {**BINARY, "Ce-Kind": kind, "Ce-Name": "mnist-worker-0", "Ce-Namespace": "team-a"}
    return headers, json.dumps(obj).encode()


@pytest.mark.parametrize(("kind", "labels", "owner", "keys"), [
    pytest.param("Pod", {JOB_LABEL: "mnist"}, None, [MNIST], id="pod-by-label"),
    pytest.param("Service", {}, "mnist", [MNIST], id="service-by-owner-reference"),
    pytest.param("Pod", {"app": "other"}, None, [], id="pod-of-no-job"),
])
def test_child_event_reaches_the_parents_handler(client: FlaskClient, calls: Calls, kind: str,
                                                 labels: dict[str, str], owner: str | None,
                                                 keys: list[ObjectKey]) -> None:
    headers, body = child_event(kind, labels, owner)
    response = client.post("/", headers=headers, data=body)
    assert response.status_code == 202
    assert calls.keys() == keys


def failing(error: Exception, times: int = 1_000) -> Callable[[Context, ObjectKey], None]:
    remaining = [times]

    def behaviour(ctx: Context, key: ObjectKey) -> None:
        if remaining[0] > 0:
            remaining[0] -= 1
            raise error

    return behaviour


@pytest.mark.parametrize(("error", "times", "status", "retry_after", "runs"), [
    pytest.param(TemporaryError("API server answered 503", 2.5), 1_000, 503, "3", 1,
                 id="temporary-error"),
    pytest.param(ApiError(409, "Conflict", "object was modified"), 1, 202, None, 2,
                 id="conflict-retried-once-then-ok"),
    pytest.param(ApiError(409, "Conflict", "object was modified"), 1_000, 503, "1", 2,
                 id="conflict-surviving-a-retry"),
    pytest.param(KeyError("spec"), 1_000, 503, "30", 1, id="handler-bug"),
    pytest.param(ApiError(403, "Forbidden", "no RBAC"), 1_000, 503, "30", 1,
                 id="unexpected-api-error"),
    pytest.param(PermanentError("spec.replicas must be positive"), 1_000, 422, None, 1,
                 id="permanent-error"),
])
def test_handler_failures_map_to_statuses(calls: Calls, error: Exception, times: int,
                                          status: int, retry_after: str | None,
                                          runs: int) -> None:
    client = make_app([recording_controller(calls, failing(error, times))]).test_client()
    response = post_sample(client, "02-captured-resource-update-pytorchjob-status.http.json")
    assert response.status_code == status
    assert response.headers.get("Retry-After") == retry_after
    assert len(calls.keys()) == runs
    if status >= 400:
        assert response.mimetype == "application/problem+json"
        assert "mnist" in response.get_json()["detail"]


def test_all_runs_every_function(calls: Calls) -> None:
    client = make_app([recording_controller(calls)], function="all").test_client()
    assert post_sample(client, "03-captured-resource-delete-pytorchjob.http.json"
                       ).status_code == 202
    assert [name for name, _ in calls.seen] == ["reconcile", "gc", "status"]


def test_only_this_functions_handlers_run(calls: Calls) -> None:
    client = make_app([recording_controller(calls, functions=("status",))],
                      function="gc").test_client()
    response = post_sample(client, "02-captured-resource-update-pytorchjob-status.http.json")
    assert response.status_code == 202
    assert calls.seen == []


@pytest.mark.parametrize(("age", "lag"), [
    pytest.param(30.0, 30.0, id="thirty-seconds-behind"),
    pytest.param(-5.0, 0.0, id="clock-ahead-of-the-source"),
    pytest.param(None, 0.0, id="no-time"),
])
def test_the_delivery_lag_is_how_far_behind_the_events_come(calls: Calls, age: float | None,
                                                            lag: float) -> None:
    """What a catch-up holds back beyond its own hold (functions.kube.gaps.DeliveryLag):
    an event's receipt less its ``time``."""
    app = make_app([recording_controller(calls)])
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    headers = {k: v for k, v in headers.items() if k != "Ce-Time"}
    if age is not None:
        sent = datetime.now(UTC) - timedelta(seconds=age)
        headers["Ce-Time"] = sent.isoformat().replace("+00:00", "Z")
    assert app.test_client().post("/", headers=headers, data=body).status_code == 202
    assert runtime_of(app).delivery_lag() == pytest.approx(lag, abs=2.0)


def test_probes_and_metrics(client: FlaskClient) -> None:
    assert client.get("/health/liveness").status_code == 200
    assert client.get("/health/readiness").status_code == 200
    post_sample(client, "02-captured-resource-update-pytorchjob-status.http.json")
    client.post("/", headers=BINARY, data=b"{")
    text = client.get("/metrics").get_data(as_text=True)
    assert ('odh_training_events_total{function="reconcile",kind="PyTorchJob",outcome="ok",'
            'type="dev.knative.apiserver.resource.update"} 1.0') in text
    assert 'odh_training_events_total{function="reconcile",kind="",outcome="invalid",type=""} 1.0' \
        in text
    assert ('odh_training_handler_duration_seconds_count{controller="recording",'
            'function="reconcile",outcome="ok"} 1.0') in text


def test_not_ready_until_warmed_up_and_failure_is_reported(monkeypatch: pytest.MonkeyPatch,
                                                           calls: Calls) -> None:
    release = threading.Event()

    def slow_kube(hook: Any) -> KubeClient:
        release.wait(5)
        return refusing_kube(hook)

    app = create_app("reconcile", controllers=[recording_controller(calls)],
                     kube_factory=slow_kube, warm_up="background")
    client = app.test_client()
    response = client.get("/health/readiness")
    assert (response.status_code, response.get_data(as_text=True)) == (503, "warming up\n")
    release.set()
    assert runtime_of(app).wait_ready(5) is None
    assert client.get("/health/readiness").status_code == 200

    monkeypatch.setenv("FUNCTIONS_CONTROLLER_MODULES", "tests.runtime.no_such_module")
    broken = create_app("reconcile", kube_factory=refusing_kube, warm_up="now").test_client()
    readiness = broken.get("/health/readiness")
    assert readiness.status_code == 503
    assert "no_such_module" in readiness.get_data(as_text=True)
    response = post_sample(broken, "02-captured-resource-update-pytorchjob-status.http.json")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"


def test_unexpected_errors_are_503_never_500(client: FlaskClient,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = runtime_of(client.application)

    def explode(headers: dict[str, str], body: bytes) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(runtime, "receive", explode)
    response = post_sample(client, "02-captured-resource-update-pytorchjob-status.http.json")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "30"
    assert client.get("/nowhere").status_code == 404
    assert client.get("/nowhere").mimetype == "application/problem+json"
    assert client.get("/").status_code == 405


@pytest.mark.parametrize("body", [
    pytest.param(b"[" * 50_000, id="50000-arrays"),
    pytest.param(b'{"a":' * 50_000, id="50000-objects"),
])
def test_deeply_nested_json_is_400_never_retried(client: FlaskClient, calls: Calls,
                                                 body: bytes) -> None:
    response = client.post("/", headers=BINARY, data=body)
    assert response.status_code == 400
    assert "nested too deeply" in response.get_json()["detail"]
    assert "Retry-After" not in response.headers
    assert calls.keys() == []
