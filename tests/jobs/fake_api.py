"""A stand-in API server for one job, for handler tests that need no cluster."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from functions.core.keys import ObjectKey
from functions.jobs.controller import controller_for
from functions.jobs.core.frameworks import BY_KIND
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response, TransportError
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context, Result

Obj = dict[str, Any]


# What the handlers read to find another controller of the jobs (functions/jobs/coexistence.py):
# none here, as on a cluster that serves none of it.
COEXISTENCE_READS = ("/apis/apps/v1/deployments", "/apis/datasciencecluster.opendatahub.io/",
                     "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/")
# What the lifecycle reads to find a job's Broker (functions/jobs/lifecycle.py): none here.
LIFECYCLE_READS = re.compile(r"^/api/v1/namespaces/[^/]+$|^/apis/eventing\.knative\.dev/")


def _answer(status: int, body: Obj) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())


class JobApi:
    """One job with resourceVersion semantics on its status subresource, its pods as given,
    and Events kept as created."""

    def __init__(self, job: Obj, pods: list[Obj] | None = None) -> None:
        """``job`` should have a uid of its own: handlers remember parsed jobs by uid and
        resourceVersion, as a real API server never reuses either."""
        self.job = copy.deepcopy(job)
        self.pods = list(pods or [])
        self.events: list[Obj] = []
        self.job["metadata"]["resourceVersion"] = "1"
        meta = self.job["metadata"]
        plural = BY_KIND[job["kind"]].plural
        self.path = (f"/apis/{job['apiVersion']}/namespaces/{meta['namespace']}/{plural}/"
                     f"{meta['name']}")
        self.before_patch: Callable[[], None] | None = None
        self.lose_answers = 0
        self.status_writes = 0

    def refresh_credentials(self) -> None:
        pass

    def write(self, status: Obj) -> None:
        self.job["status"] = copy.deepcopy(status)
        self.job["metadata"]["resourceVersion"] = str(int(self.job["metadata"]
                                                          ["resourceVersion"]) + 1)
        self.status_writes += 1

    def send(self, request: Request, timeout: float) -> Response:
        if request.method == "GET" and request.path == self.path:
            return _answer(200, self.job)
        if request.method == "GET" and request.path.endswith("/pods"):
            return _answer(200, {"items": self.pods, "metadata": {}})
        if "/events/" in request.path:
            return self._event(request)
        if request.method == "POST" and request.path.endswith("/events"):
            event = json.loads(request.body or b"{}")
            if any(e["metadata"]["name"] == event["metadata"]["name"] for e in self.events):
                return _answer(409, {"reason": "AlreadyExists", "message": "exists"})
            self.events.append(event)
            return _answer(201, event)
        if request.method == "PATCH" and request.path == f"{self.path}/status":
            if self.before_patch is not None:
                racing, self.before_patch = self.before_patch, None
                racing()
            body = json.loads(request.body or b"{}")
            if body["metadata"]["resourceVersion"] != self.job["metadata"]["resourceVersion"]:
                return _answer(409, {"reason": "Conflict", "message": "the object changed"})
            self.write(body["status"])
            if self.lose_answers:
                self.lose_answers -= 1
                raise TransportError("connection reset after the write")
            return _answer(200, self.job)
        if request.method == "GET" and (request.path.startswith(COEXISTENCE_READS)
                                        or LIFECYCLE_READS.match(request.path)):
            return _answer(404, {"reason": "NotFound", "message": "not found"})
        raise AssertionError(f"unexpected {request.method} {request.path}")

    def _event(self, request: Request) -> Response:
        """Read one Event by name, or bump its count (the recorder's repeat path)."""
        name = request.path.rsplit("/", 1)[-1]
        event = next((e for e in self.events if e["metadata"]["name"] == name), None)
        if event is None:
            return _answer(404, {"reason": "NotFound", "message": "not found"})
        if request.method == "PATCH":
            event.update(json.loads(request.body or b"{}"))
        return _answer(200, event)


def run_status(api: JobApi) -> Result | None:
    """One pass of the status handler of the job's kind, as a delivery would make it."""
    kube = KubeClient(api, retries=1, timeout=1.0)
    ctx = Context(kube, EventRecorder(kube, "test"), "status")
    meta = api.job["metadata"]
    fw = BY_KIND[api.job["kind"]]
    key = ObjectKey(fw.api_version, fw.kind, meta["namespace"], meta["name"])
    return controller_for(fw).handlers["status"](ctx, key)
