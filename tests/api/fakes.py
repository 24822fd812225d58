"""An API server stand-in for the training API's tests that need no cluster.

It answers what the API asks in the order it asks: TokenReview (a known token is a user),
SubjectAccessReview (``allowed``), then the job, pod, event, ConfigMap and
ClusterTrainingRuntime reads and job creation (an empty world that keeps what is created).
``mode`` switches it to an unreachable server (every request fails in transport) or to a
service fault (every request raises a plain exception, as a bug in a layer below the routes
would).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Literal

from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube.client import KubeClient
from functions.kube.reviews import SUBJECTACCESSREVIEWS, TOKENREVIEWS
from functions.kube.transport import Request, Response, TransportError

TOKEN = "valid-token"
USER = {"Authorization": f"Bearer {TOKEN}"}
Mode = Literal["healthy", "unreachable", "fault"]
COLLECTIONS = frozenset((*(fw.plural for fw in FRAMEWORKS), "trainjobs", "pods", "events"))


class FakeApiServer:
    def __init__(self, *, allowed: bool = True,
                 configmaps: Mapping[tuple[str, str], dict[str, str]] | None = None,
                 configmap_status: int | None = None, runtimes: tuple[str, ...] = ()) -> None:
        self.mode: Mode = "healthy"
        self.runtimes = runtimes  # the ClusterTrainingRuntimes that exist
        self.allowed = allowed
        self.configmaps = dict(configmaps or {})
        self.configmap_status = configmap_status  # answered to every ConfigMap read when set
        self.created: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def client(self) -> KubeClient:
        return KubeClient(self, retries=0, timeout=1.0)

    def refresh_credentials(self) -> None:
        pass

    def send(self, request: Request, timeout: float) -> Response:
        with self._lock:
            self.requests.append((request.method, request.path))
        if self.mode == "unreachable":
            raise TransportError(f"{request.method} {request.path}: connection refused")
        if self.mode == "fault":
            raise RuntimeError("a fault below the routes")
        body = json.loads(request.body) if request.body else {}
        path = request.path
        if path == TOKENREVIEWS.path():
            known = body.get("spec", {}).get("token") == TOKEN
            return _answer(201, {"status": {"authenticated": known, "user": {
                "username": "system:serviceaccount:team:alice", "groups": ["team"]}}})
        if path == SUBJECTACCESSREVIEWS.path():
            return _answer(201, {"status": {"allowed": self.allowed}})
        parts = path.strip("/").split("/")
        if "configmaps" in parts and request.method == "GET":
            if self.configmap_status is not None:
                return _answer(self.configmap_status, {"reason": "Injected", "message": "no"})
            namespace, name = parts[parts.index("namespaces") + 1], parts[-1]
            data = self.configmaps.get((namespace, name))
            if data is None:
                return _answer(404, {"reason": "NotFound", "message": "not found"})
            return _answer(200, {"metadata": {"name": name, "namespace": namespace},
                                 "data": data})
        if "clustertrainingruntimes" in parts[:-1] and request.method == "GET":
            if parts[-1] in self.runtimes:
                return _answer(200, {"metadata": {"name": parts[-1]}})
            return _answer(404, {"reason": "NotFound", "message": "not found"})
        if request.method == "POST":
            created = {**body, "metadata": {**body.get("metadata", {}), "uid": "u-1",
                                            "resourceVersion": "1",
                                            "creationTimestamp": "2026-01-01T00:00:00Z"}}
            with self._lock:
                self.created[created["metadata"].get("name", "")] = created
            return _answer(201, created)
        if request.method == "DELETE":
            return _answer(200, {"status": "Success"})
        # A collection ends in its plural; an object named like a plural ("…/pytorchjobs/pods")
        # is a single object that does not exist.
        if parts[-1] in COLLECTIONS and (len(parts) < 2 or parts[-2] not in COLLECTIONS):
            return _answer(200, {"items": [], "metadata": {}})
        return _answer(404, {"reason": "NotFound", "message": "not found"})


def _answer(status: int, body: dict[str, Any]) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())
