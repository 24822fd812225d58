"""What the lifecycle's end-to-end tests watch and send: every status an object was seen with
(and the lifecycle ids it implies), and the platform Broker's deliveries sent a second time."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3

from devstack.recording import RecordedRequest
from devstack.stack import DevStack
from functions.core.lifecycle import Rules, event_id
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from tests.dev.e2e.conftest import NAMESPACE, attributes
from tests.support import watched

Obj = dict[str, Any]


class Statuses:
    """Every status each object of a namespace (``None``: cluster-scoped) was seen with (a
    watch, from a thread)."""

    def __init__(self, kube: KubeClient, res: Resource, namespace: str | None,
                 rules: Rules) -> None:
        self.kube, self.res, self.namespace, self.rules = kube, res, namespace, rules
        self.seen: dict[str, list[Obj]] = defaultdict(list)
        self.uids: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> Statuses:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stop once the watch in progress has ended and what it saw is kept (it is read in
        windows of two seconds)."""
        self._stop.set()
        self._thread.join(10)

    def _follow(self) -> None:
        for kind, obj in watched(self.kube, self.res, self.namespace, self._stop):
            if kind in ("ADDED", "MODIFIED"):
                meta = obj["metadata"]
                self.uids[str(meta["name"])] = str(meta["uid"])
                self.seen[str(meta["name"])].append(obj.get("status") or {})

    def expected_ids(self, name: str) -> set[str]:
        """The id of each transition the job's statuses showed."""
        uid = self.uids[name]
        return {event_id(uid, t) for status in self.seen[name]
                for t in self.rules.transitions(status)}


@dataclass
class Duplicator:
    """Sends every event the platform's Broker delivered about ``namespace``'s objects to that
    Broker once more (a token for its audience, through the cluster network's proxy), so the
    functions get each delivery twice."""

    stack: DevStack
    kube: KubeClient
    namespace: str
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Duplicator:
        broker = self.kube.get(resources.BROKERS, "odh-training", NAMESPACE)
        assert broker is not None
        address = broker["status"]["address"]
        answer = self.kube.call("create", "POST", resources.SERVICEACCOUNTS.path(
            NAMESPACE, "default", "token"), body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [address["audience"]], "expirationSeconds": 3600}})
        assert answer.status == 201, answer.body[:300]
        self._token = orjson.loads(answer.body)["status"]["token"]
        self._url = address["url"]
        assert self.stack.knative is not None
        self._proxy = urllib3.ProxyManager(self.stack.knative.proxy_url)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        assert self.stack.knative is not None
        done = len(self.stack.knative.events())
        twice: set[str] = set()  # a duplicate is recorded too: it is not sent a third time
        while not self._stop.wait(0.2):
            events = self.stack.knative.events()
            for request in events[done:]:
                attrs = attributes(request)
                if attrs.get("namespace") == self.namespace and attrs.get("id") not in twice:
                    twice.add(attrs.get("id", ""))
                    self._send(request)
            done = len(events)

    def _send(self, request: RecordedRequest) -> None:
        headers = {**request.event_headers(), "Authorization": f"Bearer {self._token}"}
        answer = self._proxy.request("POST", self._url, body=request.body, headers=headers,
                                     timeout=10, retries=False)
        if 200 <= answer.status < 300:
            self.sent += 1
