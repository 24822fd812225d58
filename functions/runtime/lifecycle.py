"""Sends a lifecycle (a training job's, :mod:`functions.jobs.core.lifecycle`; the Trainer's,
:mod:`functions.trainer.core.lifecycle`) to the Brokers that subscribe to it, and records on
the object what was sent (the outbox, :mod:`functions.core.lifecycle`).

Where a job's events go: the Broker of the job's namespace that the namespace's
:data:`BROKER_LABEL` names, else its ``default`` Broker, when that Broker has an address; and,
where the administrator turns it on (``LIFECYCLE_PLATFORM_BROKER=namespace/name``), the
platform's Broker too. A tenant therefore subscribes with a Trigger in their own namespace and
sees only their own jobs. Brokers and namespaces are read at most every
:data:`LOOKUP_SECONDS` per namespace, so a pass costs no API request in the steady state; a job
in a namespace with no Broker costs nothing more.

A Broker that requires OIDC (``status.address.audience``) is sent a token of this function's
ServiceAccount for that audience (a TokenRequest, kept until most of its life is gone). The
POSTs are urllib3's (:class:`functions.runtime.sender.ConnectionPool`), through the proxy the
environment names. A destination that cannot take an event now (no answer, 5xx, 408, 429)
fails the pass with a :class:`TemporaryError`: the delivery that brought the pass is retried,
and the retried pass sends what is still owed. One that refuses it (any other 4xx: a Broker
whose EventPolicies do not name this function, say) is logged and counted, and what it
refused stays owed, for the job's next pass once the tenant has fixed it; the pass itself
does not fail, as retrying it changes nothing. Every outcome is counted in
``odh_training_lifecycle_events_total`` (``result``: sent, refused, failed).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent
from prometheus_client import Counter
from pydantic import BaseModel

from functions.core import lifecycle as core
from functions.core.errors import TemporaryError
from functions.core.times import parse_time
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.runtime.metrics import register_process_collector
from functions.runtime.sender import ConnectionPool

log = logging.getLogger(__name__)
Obj = dict[str, Any]

BROKER_LABEL = "training.opendatahub.io/lifecycle-broker"
PLATFORM_BROKER_ENV = "LIFECYCLE_PLATFORM_BROKER"
LOOKUP_SECONDS = 30.0
SEND_TIMEOUT = 10.0
TOKEN_SECONDS = 3600
# A token is asked for again once this share of its life is gone.
TOKEN_RENEW_SHARE = 0.8
# Answers that say "later", not "never".
RETRIABLE = frozenset({408, 429})

SENT = Counter("odh_training_lifecycle_events", "Lifecycle events by outcome",
               ("result",), registry=None)
register_process_collector(SENT)


class Refused(Exception):
    """A destination refused an event for good (a 4xx other than 408 and 429)."""


@dataclass(frozen=True, slots=True)
class Destination:
    broker: str          # namespace/name
    url: str
    audience: str | None
    since: datetime      # the Broker's creation: transitions before it are not owed to it


def broker_audience(namespace: str, name: str) -> str:
    """The OIDC audience Knative gives a Broker (whatever its class)."""
    return f"eventing.knative.dev/broker/{namespace}/{name}"


def broker_destination(broker: Obj) -> Destination | None:
    """A Broker that has an address, as a destination. A token is asked for the Broker's own
    audience only: an address whose audience is anything else (a status written by hand to
    name, say, the API server's) would have this function hand a token good elsewhere to
    whoever wrote it, so such a Broker gets nothing (logged). Plain HTTP(S) addresses only."""
    meta = broker.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    address = (broker.get("status") or {}).get("address") or {}
    url, audience = address.get("url"), address.get("audience") or None
    created = parse_time(meta.get("creationTimestamp"))
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or created is None:
        return None
    if audience is not None and audience != broker_audience(namespace, name):
        log.warning("lifecycle: Broker %s/%s names the audience %r, not its own: not sent",
                    namespace, name, audience)
        return None
    return Destination(f"{namespace}/{name}", url, audience, created)


class Destinations:
    """The destinations of each namespace's lifecycle (``""``: a cluster-scoped object's, the
    platform's Broker alone), looked up at most every ``ttl`` seconds per namespace;
    thread-safe."""

    def __init__(self, kube: KubeClient, platform: str | None = None,
                 ttl: float = LOOKUP_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.platform, self.ttl, self.clock = kube, platform, ttl, clock
        self._found: dict[str, tuple[float, list[Destination]]] = {}
        self._lock = threading.Lock()

    def of(self, namespace: str) -> list[Destination]:
        now = self.clock()
        with self._lock:
            cached = self._found.get(namespace)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        found = self._lookup(namespace)
        with self._lock:
            self._found[namespace] = (now, found)
        return found

    def _lookup(self, namespace: str) -> list[Destination]:
        refs = []
        if namespace:
            ns = self.kube.get(resources.NAMESPACES, namespace) or {}
            labels = (ns.get("metadata") or {}).get("labels") or {}
            refs.append((namespace, labels.get(BROKER_LABEL) or "default"))
        if self.platform and "/" in self.platform:
            platform_ns, platform_name = self.platform.split("/", 1)
            if (platform_ns, platform_name) not in refs:
                refs.append((platform_ns, platform_name))
        found = []
        for broker_ns, name in refs:
            try:
                broker = self.kube.get(resources.BROKERS, name, broker_ns)
            except ApiError as exc:  # 403/404: no Eventing, or not ours to read
                log.debug("lifecycle: Broker %s/%s unreadable: %s", broker_ns, name, exc)
                broker = None
            destination = broker_destination(broker) if broker else None
            if destination is not None:
                found.append(destination)
        return found


class Tokens:
    """OIDC tokens of this process's ServiceAccount, one per audience (TokenRequest)."""

    def __init__(self, kube: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self._account: tuple[str, str] | None = None
        self._tokens: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def for_audience(self, audience: str) -> str:
        with self._lock:
            held = self._tokens.get(audience)
            if held is not None and self.clock() < held[0]:
                return held[1]
            namespace, name = self._whoami()
            asked = self.clock()
            answer = self.kube.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "metadata": {"name": name, "namespace": namespace},
                 "spec": {"audiences": [audience], "expirationSeconds": TOKEN_SECONDS}},
                res=_tokens_of(name))
            token = str((answer.get("status") or {}).get("token") or "")
            if not token:
                raise TemporaryError("the TokenRequest answered no token", retry_after=5)
            self._tokens[audience] = (asked + TOKEN_SECONDS * TOKEN_RENEW_SHARE, token)
            return token

    def _whoami(self) -> tuple[str, str]:
        """This process's ServiceAccount, as the API server authenticates it."""
        if self._account is None:
            review = self.kube.create({"apiVersion": "authentication.k8s.io/v1",
                                       "kind": "SelfSubjectReview", "metadata": {}},
                                      res=SELF_SUBJECT_REVIEWS)
            user = str(((review.get("status") or {}).get("userInfo") or {}).get("username", ""))
            parts = user.split(":")
            if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
                raise TemporaryError(f"lifecycle events need a ServiceAccount, not {user!r}",
                                     retry_after=60)
            self._account = (parts[2], parts[3])
        return self._account


SELF_SUBJECT_REVIEWS = resources.Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                                          "SelfSubjectReview", namespaced=False)


def _tokens_of(name: str) -> resources.Resource:
    """The ``token`` subresource of one ServiceAccount, as a collection to POST to."""
    return resources.Resource("", "v1", f"serviceaccounts/{name}/token", "TokenRequest")


# Builds an event: (object, transition) -> (attributes, data).
Build = Callable[[Obj, core.Transition], tuple[Obj, BaseModel]]


class Publisher:
    """Sends what an object owes its destinations and records it on the object; one per
    process."""

    def __init__(self, kube: KubeClient, destinations: Destinations, tokens: Tokens,
                 pool: ConnectionPool) -> None:
        self.kube, self.destinations, self.tokens, self.pool = kube, destinations, tokens, pool

    def publish(self, res: Resource, obj: Obj, rules: core.Rules, statuses: list[Obj],
                build: Build, field_manager: str | None) -> int:
        """Send the transitions ``statuses`` show that ``obj`` still owes (``obj``: as read,
        with the status written, if any) and record them on it as ``field_manager`` (``None``:
        not recorded, for an object about to be deleted); returns how many were sent."""
        meta = obj.get("metadata") or {}
        destinations = self.destinations.of(str(meta.get("namespace") or ""))
        if not destinations:
            return 0
        sent = rules.sent_record(meta.get("annotations"))
        due = rules.owed(statuses, sent, min(d.since for d in destinations))
        if not due:
            return 0
        delivered: list[core.Transition] = []
        try:
            for transition in due:
                self.send(obj, transition, build, destinations)
                delivered.append(transition)
        except Refused:
            pass  # owed still; logged and counted where it was refused
        finally:
            if delivered and field_manager is not None:
                self._record(res, obj, sent, delivered, field_manager)
        return len(delivered)

    def send(self, obj: Obj, transition: core.Transition, build: Build,
             destinations: list[Destination]) -> None:
        """POST one transition's event to each destination that existed when it happened."""
        attributes, data = build(obj, transition)
        message = to_binary_event(CloudEvent(
            {**attributes, "time": transition.at.astimezone(UTC)},
            orjson.loads(data.model_dump_json(exclude_none=True))))
        for destination in destinations:
            if transition.at < destination.since:
                continue
            headers = dict(message.headers)
            if destination.audience:
                token = self.tokens.for_audience(destination.audience)
                headers["Authorization"] = f"Bearer {token}"
            result = self.pool.post(destination.url, headers, message.body, SEND_TIMEOUT)
            subject = f"{transition.name} of {attributes['source']}"
            if result.status is None or not 200 <= result.status < 300:
                refused = (result.status is not None and 400 <= result.status < 500
                           and result.status not in RETRIABLE)
                SENT.labels("refused" if refused else "failed").inc()
                log.warning("lifecycle: %s %s by Broker %s: %s", subject,
                            "refused" if refused else "not accepted", destination.broker,
                            result.status or result.error)
                if refused:
                    raise Refused(destination.broker)
                raise TemporaryError(
                    f"lifecycle event {attributes['id']}: Broker {destination.broker} answered "
                    f"{result.status or result.error}", retry_after=result.retry_after or 2.0)
            SENT.labels("sent").inc()
            log.info("lifecycle: sent %s to %s", subject, destination.broker)

    def _record(self, res: Resource, obj: Obj, sent: dict[str, datetime],
                delivered: list[core.Transition], field_manager: str) -> None:
        meta = obj["metadata"]
        try:
            self.kube.patch(res, meta["name"], core.sent_patch(sent, delivered),
                            meta.get("namespace") or None, field_manager=field_manager)
        except ApiError as exc:
            if exc.status != 404:  # an object gone has nothing left to owe
                raise


_PUBLISHERS: dict[int, Publisher] = {}
_LOCK = threading.Lock()


def publisher(kube: KubeClient) -> Publisher:
    """The process's publisher for ``kube`` (the platform Broker from the environment)."""
    with _LOCK:
        found = _PUBLISHERS.get(id(kube))
        if found is None or found.kube is not kube:
            found = _PUBLISHERS[id(kube)] = Publisher(
                kube, Destinations(kube, os.environ.get(PLATFORM_BROKER_ENV) or None),
                Tokens(kube), ConnectionPool(max_idle=8, env_proxies=True))
        return found
