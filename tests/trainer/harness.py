"""What the Trainer cluster tests share: a request-recording client, handler runs, waits."""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response, Transport
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context
from functions.trainer import controller
from functions.trainer.controller import TRAINER_KEY

Obj = dict[str, Any]
DATA = Path(__file__).resolve().parent / "data"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PATH = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?(?P<version>v[^/]+)"
                   r"(?:/namespaces/[^/]+)?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?")


@dataclass
class RecordingTransport:
    """Delegates to a real transport and remembers every request's method and path."""

    inner: Transport
    seen: list[tuple[str, str]] = field(default_factory=list)

    def send(self, request: Request, timeout: float) -> Response:
        self.seen.append((request.method, request.path))
        return self.inner.send(request, timeout)

    def refresh_credentials(self) -> None:
        self.inner.refresh_credentials()

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.seen if m in WRITE_METHODS]

    def reads_per_type(self) -> Counter[str]:
        """GETs (single objects and lists) counted by resource type (``group/plural``)."""
        counts: Counter[str] = Counter()
        for method, path in self.seen:
            match = _PATH.match(path)
            if method == "GET" and match is not None and match.group("plural"):
                counts[f"{match.group('group') or 'core'}/{match.group('plural')}"] += 1
        return counts


def recording_client(kube: KubeClient) -> tuple[KubeClient, RecordingTransport]:
    transport = RecordingTransport(kube.transport)
    return KubeClient(transport), transport


def context(kube: KubeClient, function: str = "reconcile") -> Context:
    return Context(kube=kube, recorder=EventRecorder(kube, "trainer"),
                   function=function,  # type: ignore[arg-type]
                   log=logging.getLogger("tests.trainer"))


def reconcile(kube: KubeClient) -> None:
    controller.reconcile(context(kube), TRAINER_KEY)


def status(kube: KubeClient) -> None:
    controller.status(context(kube, "status"), TRAINER_KEY)


def gc(kube: KubeClient) -> None:
    controller.gc(context(kube, "gc"), TRAINER_KEY)


def load(name: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((DATA / name).read_text()) if d]


def trainer(kube: KubeClient) -> Obj | None:
    return kube.get(resources.TRAINERS, TRAINER_KEY.name)


from tests.support import wait_for  # noqa: E402 - re-exported for the tests


def wait_until(predicate: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    return wait_for(predicate, timeout, 0.2, what)
