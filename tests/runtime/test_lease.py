"""The Lease mutex against an in-memory Lease API: what counts as acquired, renewal while held,
and when a holder must stop acting. (``test_lease_cluster.py`` checks the same against the
real API server.)"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime import lease

NAME = "queue"


class LeaseServer:
    """Just enough of the Lease API: get, create, and a resourceVersion-guarded apply; plus
    an injected status answered to every request while ``failing`` is set."""

    def __init__(self, namespaces: tuple[str, ...] = ("ns",)) -> None:
        self.namespaces = set(namespaces)
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.failing: int | None = None
        self.lock = threading.Lock()

    def put(self, namespace: str, spec: dict[str, Any]) -> None:
        with self.lock:
            self.version += 1
            self.leases[(namespace, NAME)] = {
                "metadata": {"name": NAME, "namespace": namespace,
                             "resourceVersion": str(self.version)}, "spec": spec}

    def spec(self, namespace: str = "ns") -> dict[str, Any]:
        return dict(self.leases[(namespace, NAME)]["spec"])

    def send(self, request: Request, timeout: float) -> Response:
        if self.failing is not None:
            return self._answer(self.failing, {"reason": "Injected", "message": "injected"})
        parts = request.path.strip("/").split("/")
        namespace = parts[parts.index("namespaces") + 1]
        name = parts[-1] if parts[-1] != "leases" else None
        body = json.loads(request.body) if request.body else {}
        with self.lock:
            current = self.leases.get((namespace, name or body["metadata"]["name"]))
            if namespace not in self.namespaces:
                return self._answer(404, {"reason": "NotFound",
                                          "message": f'namespaces "{namespace}" not found'})
            if request.method == "GET":
                return self._answer(200, current) if current else self._answer(
                    404, {"reason": "NotFound", "message": "no lease"})
            if request.method == "POST" and current is not None:
                return self._answer(409, {"reason": "AlreadyExists", "message": "exists"})
            if request.method == "PATCH" and (current is None or body["metadata"].get(
                    "resourceVersion") != current["metadata"]["resourceVersion"]):
                return self._answer(409, {"reason": "Conflict", "message": "changed"})
        self.put(namespace, {k: v for k, v in body["spec"].items() if v is not None})
        return self._answer(201 if request.method == "POST" else 200,
                            self.leases[(namespace, body["metadata"]["name"])])

    @staticmethod
    def _answer(status: int, body: dict[str, Any]) -> Response:
        return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def refresh_credentials(self) -> None:
        pass


@pytest.fixture
def server() -> LeaseServer:
    return LeaseServer()


@pytest.fixture
def kube(server: LeaseServer) -> KubeClient:
    return KubeClient(server, retries=1, timeout=1.0)


def stamp(age_seconds: float) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=age_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(("namespace", "existing", "failing", "acquired"), [
    pytest.param("ns", None, None, True, id="no-lease-yet"),
    pytest.param("ns", {"holderIdentity": "other", "leaseDurationSeconds": 3600,
                        "renewTime": stamp(1)}, None, False, id="held-by-another"),
    pytest.param("ns", {"holderIdentity": "other", "leaseDurationSeconds": 30,
                        "renewTime": stamp(300)}, None, True, id="another-holder-expired"),
    pytest.param("ns", {"holderIdentity": "", "leaseDurationSeconds": 1,
                        "renewTime": stamp(1)}, None, True, id="released"),
    pytest.param("missing", None, None, False, id="namespace-does-not-exist"),
    pytest.param("ns", None, 403, False, id="forbidden"),
    pytest.param("ns", None, 503, False, id="api-server-unavailable"),
    pytest.param("ns", None, 500, False, id="api-server-error"),
])
def test_acquired_only_when_taken_cleanly(
        server: LeaseServer, kube: KubeClient, namespace: str,
        existing: dict[str, Any] | None, failing: int | None, acquired: bool) -> None:
    if existing is not None:
        server.put(namespace, existing)
    server.failing = failing
    assert lease.try_acquire(kube, NAME, namespace=namespace, holder="me") is acquired
    server.failing = None
    with lease.held(kube, NAME, namespace=namespace, holder="me") as handle:
        expected = acquired or failing is not None  # the injected failure is gone by now
        assert bool(handle) is expected
        assert handle.valid() is expected


def test_held_lease_is_renewed_while_a_long_pass_runs(server: LeaseServer,
                                                      kube: KubeClient) -> None:
    with lease.held(kube, NAME, namespace="ns", holder="me", duration_seconds=1) as handle:
        assert handle
        first = server.spec()["renewTime"]
        for _ in range(6):  # three lease durations at 0.5 s
            time.sleep(0.5)
            assert handle.valid()
            assert not lease.try_acquire(kube, NAME, namespace="ns", holder="other")
        assert handle.renewals >= 6
        assert server.spec()["renewTime"] > first
        assert server.spec()["holderIdentity"] == "me"
    assert server.spec()["holderIdentity"] == ""  # released on exit


def test_holder_stops_acting_when_renewals_fail(server: LeaseServer, kube: KubeClient) -> None:
    with lease.held(kube, NAME, namespace="ns", holder="me", duration_seconds=1) as handle:
        assert handle.valid()
        server.failing = 503
        deadline = time.monotonic() + lease.SAFE_FRACTION + 0.5
        while handle.valid():
            assert time.monotonic() < deadline, "still acting after the lease ran out"
            time.sleep(0.05)
    # nothing raised on exit, although the release could not be sent


def test_holder_stops_acting_when_taken_over(server: LeaseServer, kube: KubeClient) -> None:
    with lease.held(kube, NAME, namespace="ns", holder="me", duration_seconds=1) as handle:
        assert handle.valid()
        server.put("ns", {"holderIdentity": "other", "leaseDurationSeconds": 30,
                          "renewTime": stamp(0)})
        deadline = time.monotonic() + 1.0
        while handle.valid():
            assert time.monotonic() < deadline, "still acting after a takeover"
            time.sleep(0.05)
    assert server.spec()["holderIdentity"] == "other"  # not released: it is not ours


def _child_identity(queue: Any) -> None:
    queue.put(lease.holder_identity())


def test_a_forked_process_has_its_own_identity() -> None:
    parent = lease.holder_identity()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_identity, args=(queue,))
    child.start()
    identity = queue.get(timeout=10)
    child.join(10)
    assert identity != parent
    assert lease.holder_identity() == parent
