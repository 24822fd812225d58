"""The fault-injecting transport: which faults it makes, at what rate, and repeatably."""

from __future__ import annotations

import pytest

from devstack.faults import FAULT_KINDS, FaultInjectingTransport, FaultPlan, plan_from_text
from functions.core.errors import TemporaryError
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import CONFIGMAPS
from functions.kube.transport import Request, Response, TransportError


class Counting:
    def __init__(self) -> None:
        self.sent: list[Request] = []

    def send(self, request: Request, timeout: float) -> Response:
        self.sent.append(request)
        return Response(200, {}, b'{"kind":"ConfigMap","metadata":{"name":"x"}}')

    def refresh_credentials(self) -> None:
        pass


@pytest.mark.parametrize(("kind", "method", "status", "reaches_server"), [
    pytest.param("throttle", "GET", 429, False, id="throttle"),
    pytest.param("error", "GET", 500, False, id="error"),
    pytest.param("unavailable", "GET", 503, False, id="unavailable"),
    pytest.param("conflict", "PATCH", 409, False, id="conflict-on-write"),
    pytest.param("conflict", "GET", 503, False, id="conflict-on-read-becomes-503"),
    pytest.param("timeout", "PATCH", None, True, id="timeout-after-the-write"),
    pytest.param("reset", "GET", None, False, id="reset-before-sending"),
])
def test_each_fault(kind: str, method: str, status: int | None, reaches_server: bool) -> None:
    inner = Counting()
    transport = FaultInjectingTransport(inner, FaultPlan(rate=1.0, kinds=(kind,),
                                                         timeout_delay=0.0))
    request = Request(method, "/api/v1/namespaces/a/configmaps/x")
    if status is None:
        with pytest.raises(TransportError, match="injected"):
            transport.send(request, 1.0)
    else:
        response = transport.send(request, 1.0)
        assert response.status == status
        if status == 429:
            assert response.headers["Retry-After"] == "0"
    assert len(inner.sent) == (1 if reaches_server else 0)
    assert transport.faults() == 1


def test_rate_is_respected_and_repeatable() -> None:
    def run(seed: int) -> list[bool]:
        transport = FaultInjectingTransport(Counting(), FaultPlan(rate=0.2, seed=seed,
                                                                  timeout_delay=0.0))
        outcomes = []
        for _ in range(2000):
            try:
                outcomes.append(transport.send(Request("GET", "/api/v1/pods"), 1.0).status
                                == 200)
            except TransportError:
                outcomes.append(False)
        return outcomes

    first = run(3)
    assert first == run(3)
    assert first != run(4)
    assert 0.17 < first.count(False) / len(first) < 0.23


def test_disabled_passes_everything() -> None:
    transport = FaultInjectingTransport(Counting(), FaultPlan(rate=1.0), enabled=False)
    assert transport.send(Request("GET", "/api/v1/pods"), 1.0).status == 200
    assert transport.passed == 1


@pytest.mark.parametrize("plan", [
    pytest.param({"rate": 1.5}, id="rate-above-one"),
    pytest.param({"kinds": ("meteor",)}, id="unknown-kind"),
    pytest.param({"kinds": ()}, id="no-kind"),
])
def test_invalid_plans(plan: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FaultPlan(**plan)  # type: ignore[arg-type]


def test_client_sees_retriable_faults_as_temporary_and_conflicts_as_api_errors() -> None:
    always = FaultInjectingTransport(Counting(), FaultPlan(rate=1.0, kinds=("unavailable",)))
    with pytest.raises(TemporaryError):
        KubeClient(always, retries=1, max_backoff=0.0).get(CONFIGMAPS, "x", "a")
    conflicts = FaultInjectingTransport(Counting(), FaultPlan(rate=1.0, kinds=("conflict",)))
    with pytest.raises(ApiError) as caught:
        KubeClient(conflicts).patch(CONFIGMAPS, "x", {"data": {}}, "a")
    assert caught.value.conflict
    assert set(FAULT_KINDS) >= {"throttle", "conflict", "timeout", "reset"}


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("rate=0.1,seed=3", FaultPlan(rate=0.1, seed=3), id="rate-and-seed"),
    pytest.param("kinds=throttle+conflict", FaultPlan(kinds=("throttle", "conflict")),
                 id="kinds"),
    pytest.param("", FaultPlan(), id="defaults"),
])
def test_plan_from_text(text: str, expected: FaultPlan) -> None:
    assert plan_from_text(text) == expected
    assert plan_from_text(text, salt=5).seed == expected.seed + 5


@pytest.mark.parametrize("text", [
    pytest.param("rate", id="no-value"), pytest.param("speed=3", id="unknown"),
    pytest.param("rate=2", id="not-a-probability"), pytest.param("kinds=fire", id="bad-kind"),
])
def test_bad_plan_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        plan_from_text(text)
