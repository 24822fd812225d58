"""Replay a recorded stream into the real function app (all three functions in one process,
API client on a test cluster), let the cluster settle, resync once, and read the state.

"Settle" waits for what the cluster does on its own after the handlers wrote: kwok moving the
pods (every pod past Pending, pods told to finish in a terminal phase, nothing changing for a
moment) and, with the Trainer, its Deployments available. No handler runs while it waits.

From the resync on, the functions' own writes are echoed back to them, as the ApiServerSource
adapter turns every write into an event in a cluster: a status write that finishes a job is
what tells the gc function to clean up, whichever function the resync reached first. The
echoes are Resource-mode events built from the objects the API server answered the writes with.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask

from devstack.broker import ping_event
from devstack.cluster import kwok
from devstack.recording import RecordedRequest, ReplayReport, Sender, replay
from functions.core.delivery import parse_retry_after
from functions.kube import resources
from functions.kube.client import KubeClient, RequestHook
from functions.kube.transport import Request, Response, Transport
from functions.runtime.app import create_app, runtime_of
from functions.runtime.eventing import load_manifests
from tests.support import REPO

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
STABLE_SECONDS = 1.5


def trainer_environment(bin_dir: Path, work_dir: Path, upstream: Path) -> dict[str, str]:
    """What the dev stack gives the functions to render the Trainer's manifests
    (``upstream``: the upstream trainer manifests' tree)."""
    return {"KUSTOMIZE_BIN": str(bin_dir / "kustomize"),
            "TRAINER_WORK_DIR": str(work_dir),
            "TRAINER_MANIFESTS_DIR": str(upstream),
            "TRAINER_RUNTIMES_DIR": str(REPO / "manifests" / "runtimes"),
            "TRAINER_IMAGESTREAMS_DIR": str(REPO / "manifests" / "imagestreams")}


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resync_event() -> tuple[dict[str, str], bytes]:
    """The PingSource event of ``eventing/``, as the router's ticker sends it."""
    ping = load_manifests(REPO / "eventing").ping_sources[0]
    return ping_event(ping)


WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
NOT_ECHOED = frozenset({"Event", "Status", "TokenRequest", "SubjectAccessReview"})


class EchoingTransport:
    """Remembers the objects every successful write returned (for :meth:`take`)."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.enabled = False
        self._written: list[tuple[str, Obj]] = []
        self._guard = threading.Lock()

    def send(self, request: Request, timeout: float) -> Response:
        response = self.inner.send(request, timeout)
        if self.enabled and request.method in WRITES and response.status < 300:
            try:
                obj = json.loads(response.body)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and obj.get("kind") not in NOT_ECHOED and obj.get(
                    "metadata"):
                operation = "add" if request.method == "POST" else "update"
                with self._guard:
                    self._written.append((operation, obj))
        return response

    def refresh_credentials(self) -> None:
        self.inner.refresh_credentials()

    def stream(self, request: Request, timeout: float) -> tuple[int, Mapping[str, str], Any]:
        """Watches pass through (the functions' watch caches need them)."""
        result: tuple[int, Mapping[str, str], Any] = self.inner.stream(  # type: ignore[attr-defined]
            request, timeout)
        return result

    def take(self) -> list[tuple[str, Obj]]:
        with self._guard:
            written, self._written = self._written, []
        return written


def adapter_event(operation: str, obj: Obj) -> RecordedRequest:
    """The Resource-mode event an ApiServerSource adapter sends for a change of ``obj``."""
    meta = obj["metadata"]
    namespace = meta.get("namespace", "")
    group_version = obj["apiVersion"]
    prefix = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    plural = f"{obj['kind'].lower()}s"
    headers = {"Ce-Specversion": "1.0", "Ce-Id": str(uuid.uuid4()),
               "Ce-Type": f"dev.knative.apiserver.resource.{operation}",
               "Ce-Source": "https://127.0.0.1:6443", "Ce-Apiversion": group_version,
               "Ce-Kind": obj["kind"], "Ce-Name": meta["name"], "Ce-Namespace": namespace,
               "Ce-Subject": f"{prefix}/namespaces/{namespace}/{plural}/{meta['name']}",
               "Content-Type": "application/json"}
    return RecordedRequest(headers=headers, body=json.dumps(obj).encode())


class FunctionUnderTest:
    """``create_app("all")`` with an API client built by ``client_factory``."""

    def __init__(self, client_factory: Callable[[RequestHook], KubeClient]) -> None:
        self.clients: list[KubeClient] = []
        self.echo: EchoingTransport | None = None

        def factory(hook: RequestHook) -> KubeClient:
            base = client_factory(hook)
            self.echo = EchoingTransport(base.transport)
            self.clients.append(KubeClient(self.echo, on_request=hook))
            return self.clients[-1]

        self.app: Flask = create_app("all", kube_factory=factory, warm_up="now")
        self.http = self.app.test_client()

    def send(self, request: RecordedRequest) -> tuple[int | None, float | None]:
        response = self.http.post(request.path or "/", headers=request.event_headers(),
                                  data=request.body)
        return response.status_code, parse_retry_after(response.headers.get("Retry-After"),
                                                       datetime.now(UTC))

    def sender(self) -> Sender:
        return self.send

    def replay(self, events: Sequence[RecordedRequest], **mutation: Any) -> ReplayReport:
        return replay(events, self.send, backoff=0.05, sleep=lambda s: time.sleep(min(s, 0.5)),
                      **mutation)

    def resync(self, attempts: int = 10) -> int:
        """One resync event; re-sent (like a Broker) while the answer asks for a retry.
        Writes from here on are echoed by :meth:`echo_writes`."""
        assert self.echo is not None
        self.echo.enabled = True
        headers, body = resync_event()
        status = 0
        for _ in range(attempts):
            response = self.http.post("/", headers=headers, data=body)
            status = response.status_code
            if status < 300 or status not in (429, 503):
                return status
            time.sleep(0.5)
        return status

    def echo_writes(self, wait: Callable[[], None], rounds: int = 6) -> int:
        """Deliver the events of the functions' own writes until a round writes nothing;
        ``wait`` runs before each round. Returns how many rounds wrote."""
        assert self.echo is not None
        for round_number in range(rounds):
            wait()
            written = self.echo.take()
            if not written:
                return round_number
            report = self.replay([adapter_event(op, obj) for op, obj in written])
            assert not report.rejected, report
        raise AssertionError(f"the functions still write after {rounds} rounds of echoes")

    def close(self) -> None:
        """Stop the runtime's background work (requeue timers, informers, Event sender), so
        none of it acts after the test."""
        runtime_of(self.app).close()


def _pods_settled(pods: Iterable[Obj]) -> bool:
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if pod["metadata"].get("deletionTimestamp") or phase in (None, "Pending"):
            return False
        finishes = labels.get(kwok.RESULT_LABEL) or labels.get("batch.kubernetes.io/job-name")
        if finishes and phase not in TERMINAL:
            return False
    return True


def _deployments_available(kube: KubeClient, namespace: str) -> bool:
    for deployment in kube.list(resources.DEPLOYMENTS, namespace):
        wanted = (deployment.get("spec") or {}).get("replicas", 1)
        if (deployment.get("status") or {}).get("availableReplicas", 0) != wanted:
            return False
    return True


def settle(kube: KubeClient, namespaces: Sequence[str], *, trainer_namespace: str | None = None,
           timeout: float = 60.0) -> None:
    """Wait until kwok (and the Deployment controller) are done with what exists."""
    deadline = time.monotonic() + timeout
    previous: object = None
    stable_since = time.monotonic()
    while True:
        pods = [p for ns in namespaces for p in kube.list(resources.PODS, ns)]
        seen = sorted((p["metadata"]["name"], (p.get("status") or {}).get("phase"),
                       bool(p["metadata"].get("deletionTimestamp"))) for p in pods)
        ready = _pods_settled(pods) and (trainer_namespace is None or _deployments_available(
            kube, trainer_namespace))
        if seen != previous or not ready:
            previous = seen
            stable_since = time.monotonic()
        elif time.monotonic() - stable_since >= STABLE_SECONDS:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the cluster did not settle in {timeout}s: {seen}")
        time.sleep(0.25)
