"""A child's name taken by an object the job does not control: ErrResourceExists on the job,
and nothing adopted or overwritten; a name taken by the job's own child is no news."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.core.errors import TemporaryError
from functions.jobs.core.frameworks import PYTORCH
from functions.jobs.core.planning import Plan
from functions.jobs.writes import RECONCILE_MANAGER, execute
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context

Obj = dict[str, Any]
JOB: Obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": "ns", "uid": "job-uid"}}
OWNED = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist",
          "uid": "job-uid", "controller": True}]
FOREIGN = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "other",
            "controller": True}]


def _answer(status: int, body: Obj) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())


class NameTaken:
    """Refuses every create with 409; reads show the holder with ``owners``."""

    def __init__(self, owners: list[Obj] | None) -> None:
        self.owners = owners   # None: nothing holds the name any more
        self.writes: list[tuple[str, str]] = []

    def refresh_credentials(self) -> None:
        pass

    def holder(self, name: str, kind: str) -> Obj:
        return {"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "namespace": "ns", "ownerReferences": self.owners}}

    def send(self, request: Request, timeout: float) -> Response:
        if request.method == "POST":
            self.writes.append((request.method, request.path))
            return _answer(409, {"reason": "AlreadyExists", "message": "already exists"})
        if request.method == "GET" and "/services/" in request.path:
            if self.owners is None:
                return _answer(404, {"reason": "NotFound", "message": "not found"})
            return _answer(200, self.holder(request.path.rsplit("/", 1)[-1], "Service"))
        if request.method == "GET" and request.path.endswith("/pods"):
            name = request.query["fieldSelector"].removeprefix("metadata.name=")
            items = [] if self.owners is None else [self.holder(name, "Pod")]
            return _answer(200, {"items": items, "metadata": {}})
        self.writes.append((request.method, request.path))
        return _answer(500, {"message": "unexpected"})


class Recorded(EventRecorder):
    def __init__(self, kube: KubeClient) -> None:
        super().__init__(kube, "test")
        self.events: list[tuple[str, str, str]] = []

    def record(self, obj: Obj, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


def child(kind: str, name: str) -> Obj:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ns"}}


@pytest.mark.parametrize(("owners", "expected"), [
    pytest.param(FOREIGN, [
        ("Warning", "ErrResourceExists", 'Resource "mnist-worker-0" of Kind "Pod" already '
                                         "exists and is not managed by PyTorchJob mnist"),
        ("Warning", "ErrResourceExists", 'Resource "mnist-worker-0" of Kind "Service" already '
                                         "exists and is not managed by PyTorchJob mnist")],
        id="foreign-owner"),
    pytest.param([], [
        ("Warning", "ErrResourceExists", 'Resource "mnist-worker-0" of Kind "Pod" already '
                                         "exists and is not managed by PyTorchJob mnist"),
        ("Warning", "ErrResourceExists", 'Resource "mnist-worker-0" of Kind "Service" already '
                                         "exists and is not managed by PyTorchJob mnist")],
        id="no-owner"),
    pytest.param(OWNED, [], id="ours-already"),
])
def test_create_meeting_a_taken_name(owners: list[Obj],
                                     expected: list[tuple[str, str, str]]) -> None:
    api = NameTaken(owners)
    kube = KubeClient(api, retries=0, timeout=1.0)
    recorder = Recorded(kube)
    ctx = Context(kube, recorder, "reconcile")
    execute(ctx, PYTORCH, JOB, Plan(creates=[child("Pod", "mnist-worker-0"),
                                             child("Service", "mnist-worker-0")]),
            RECONCILE_MANAGER)
    assert sorted(recorder.events) == expected
    assert [m for m, _ in api.writes] == ["POST", "POST"], "nothing adopted or overwritten"


@pytest.mark.parametrize("kind", [pytest.param("Pod", id="pod"),
                                  pytest.param("Service", id="service")])
def test_a_create_refused_for_a_name_free_again_is_retried(kind: str) -> None:
    """A 409 for a name nothing holds by the time it is read (the holder was deleted
    meanwhile): no later event would ask for the child, so the pass fails and is retried."""
    api = NameTaken(None)
    kube = KubeClient(api, retries=0, timeout=1.0)
    recorder = Recorded(kube)
    with pytest.raises(TemporaryError, match="nothing holds the name now"):
        execute(Context(kube, recorder, "reconcile"), PYTORCH, JOB,
                Plan(creates=[child(kind, "mnist-worker-0")]), RECONCILE_MANAGER)
    assert recorder.events == []
