"""The training API when something besides the request is wrong: no API client, a cluster out
of reach, a fault below the routes (503 with ``Retry-After``, never a 500); and bodies that
cannot be read or parsed (400, never retried). Against :mod:`tests.api.fakes`, no cluster."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from functions.api.app import create_api_app
from functions.kube.client import KubeClient
from tests.api.conftest import job_request
from tests.api.fakes import USER, FakeApiServer

BASE = "/v1/namespaces/team/jobs"
ROUTES = [
    pytest.param("POST", BASE, job_request("x"), id="create"),
    pytest.param("GET", BASE, None, id="list"),
    pytest.param("GET", f"{BASE}/x", None, id="get"),
    pytest.param("DELETE", f"{BASE}/x", None, id="delete"),
    pytest.param("GET", f"{BASE}/x/logs", None, id="logs"),
    pytest.param("GET", f"{BASE}/x/events", None, id="events"),
]


def no_client() -> KubeClient:
    raise FileNotFoundError("no kubeconfig and not in a cluster")


def app_client(server: FakeApiServer | None) -> FlaskClient:
    factory: Callable[[], KubeClient] = server.client if server is not None else no_client
    return create_api_app(kube_factory=factory).test_client()


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize(("cause", "retry_after", "detail"), [
    pytest.param("no-client", "10", "no Kubernetes API client", id="no-client"),
    pytest.param("unreachable", "2", "unavailable", id="unreachable"),
    pytest.param("fault", "30", "internal error", id="fault"),
])
def test_trouble_beside_the_request_is_503_with_retry_after(
        method: str, path: str, body: Any, cause: str, retry_after: str,
        detail: str) -> None:
    server = None if cause == "no-client" else FakeApiServer()
    if server is not None:
        server.mode = "unreachable" if cause == "unreachable" else "fault"
    answer = app_client(server).open(path, method=method, json=body, headers=USER)
    assert answer.status_code == 503, answer.get_data(as_text=True)
    assert answer.mimetype == "application/problem+json"
    assert answer.headers["Retry-After"] == retry_after
    assert detail in answer.get_json()["detail"]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_the_same_routes_answer_when_the_cluster_does(method: str, path: str,
                                                      body: Any) -> None:
    answer = app_client(FakeApiServer()).open(path, method=method, json=body, headers=USER)
    assert answer.status_code < 500, answer.get_data(as_text=True)


@pytest.mark.parametrize("name", [
    pytest.param("x", id="plain"),
    pytest.param("pods", id="named-like-pods"),
    pytest.param("pytorchjobs", id="named-like-a-kind"),
    pytest.param("subjectaccessreviews", id="named-like-a-review"),
])
@pytest.mark.parametrize(("method", "suffix"), [
    pytest.param("GET", "", id="get"), pytest.param("DELETE", "", id="delete"),
    pytest.param("GET", "/logs", id="logs"), pytest.param("GET", "/events", id="events"),
])
def test_a_job_that_does_not_exist_is_404(method: str, suffix: str, name: str) -> None:
    answer = app_client(FakeApiServer()).open(f"{BASE}/{name}{suffix}", method=method,
                                              headers=USER)
    assert answer.status_code == 404, answer.get_data(as_text=True)
    assert answer.mimetype == "application/problem+json"


def test_no_token_is_401_before_any_client_is_needed() -> None:
    answer = app_client(None).get(BASE)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


class Unreadable(io.BytesIO):
    """A request body whose connection breaks while it is read."""

    def read(self, size: int | None = -1) -> bytes:
        raise ConnectionResetError("the client went away")

    def readline(self, size: int | None = -1) -> bytes:
        raise ConnectionResetError("the client went away")

    def readinto(self, buffer: Any) -> int:
        raise ConnectionResetError("the client went away")


@pytest.mark.parametrize(("body", "message"), [
    pytest.param(b"[" * 50_000, "nested too deeply", id="50000-arrays-deep"),
    pytest.param(b'{"a":' * 12_000, "nested too deeply", id="12000-objects-deep"),
    pytest.param(b"[" * 500 + b"]" * 500, "invalid request", id="deep-but-parsable"),
    pytest.param(b"{not json", "not JSON", id="broken"),
    pytest.param(b"\xff\xfe{}", "not JSON", id="not-utf-8"),
    pytest.param(b"", "not JSON", id="empty"),
])
def test_bodies_that_cannot_be_parsed_are_4xx(body: bytes, message: str) -> None:
    answer = app_client(FakeApiServer()).post(BASE, data=body, headers=USER,
                                              content_type="application/json")
    assert answer.status_code in (400, 422), answer.get_data(as_text=True)
    assert answer.mimetype == "application/problem+json"
    assert message in answer.get_json()["detail"]


def test_a_body_that_cannot_be_read_is_400() -> None:
    # as a server that terminates the stream itself (gunicorn, for chunked bodies) passes it
    answer = app_client(FakeApiServer()).post(
        BASE, input_stream=Unreadable(), content_type="application/json", headers=USER,
        environ_overrides={"wsgi.input_terminated": True})
    assert answer.status_code == 400
    assert "could not be read" in answer.get_json()["detail"]


POLICY = ("platform", "odh-training-queue-policy")


@pytest.mark.parametrize(("data", "namespace", "priority", "status"), [
    pytest.param(None, "team", 0, 201, id="no-policy-priority-0"),
    pytest.param(None, "team", -5, 201, id="no-policy-lower"),
    pytest.param(None, "team", 1, 403, id="no-policy-no-jumping"),
    pytest.param({"maxPriority": "10"}, "team", 10, 201, id="at-the-default-max"),
    pytest.param({"maxPriority": "10"}, "team", 11, 403, id="above-the-default-max"),
    pytest.param({"maxPriority": "10", "maxPriority.vip": "500"}, "vip", 500, 201,
                 id="namespace-max"),
    pytest.param({"maxPriority": "10", "maxPriority.vip": "500"}, "vip", 501, 403,
                 id="above-the-namespace-max"),
    pytest.param({"maxPriority": "lots"}, "team", 1, 403, id="unreadable-entry-grants-nothing"),
])
def test_priority_is_bounded_by_the_admins_policy(
        monkeypatch: pytest.MonkeyPatch, data: dict[str, str] | None, namespace: str,
        priority: int, status: int) -> None:
    monkeypatch.setenv("TRAINING_QUEUE_POLICY_NAMESPACE", POLICY[0])
    server = FakeApiServer(configmaps={POLICY: data} if data is not None else None)
    answer = app_client(server).post(f"/v1/namespaces/{namespace}/jobs", headers=USER,
                                     json=job_request("x", priority=priority))
    assert answer.status_code == status, answer.get_data(as_text=True)
    if status == 403:
        assert answer.mimetype == "application/problem+json"
        [error] = answer.get_json()["errors"]
        assert error["field"] == "priority"
        assert "odh-training-queue-policy" in error["message"]
        assert not server.created


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param(403, 503, id="policy-forbidden"),
    pytest.param(404, 403, id="policy-absent"),
])
def test_a_policy_that_cannot_be_read_is_503(monkeypatch: pytest.MonkeyPatch, status: int,
                                            expected: int) -> None:
    monkeypatch.setenv("TRAINING_QUEUE_POLICY_NAMESPACE", POLICY[0])
    server = FakeApiServer(configmap_status=status)
    answer = app_client(server).post(BASE, headers=USER, json=job_request("x", priority=3))
    assert answer.status_code == expected
    if expected == 503:
        assert answer.headers["Retry-After"]
    plain = app_client(server).post(BASE, headers=USER, json=job_request("y"))
    assert plain.status_code == 201  # priority 0 never needs the policy


@pytest.mark.parametrize(("runtimes", "status", "created"), [
    pytest.param(("torch-distributed",), 201, "TrainJob", id="runtime-exists"),
    pytest.param((), 422, None, id="no-such-runtime"),
])
def test_a_trainjob_is_created_only_on_an_existing_runtime(
        runtimes: tuple[str, ...], status: int, created: str | None) -> None:
    server = FakeApiServer(runtimes=runtimes)
    answer = app_client(server).post(BASE, json={
        "name": "llm", "runtime": "torch-distributed", "image": "img:1"}, headers=USER)
    assert answer.status_code == status, answer.get_json()
    assert [job["kind"] for job in server.created.values()] == ([created] if created else [])
    if created is None:
        assert answer.get_json()["errors"][0]["field"] == "runtime"
    else:
        assert (answer.get_json()["kind"], answer.get_json()["state"]) == (created, "Queued")
