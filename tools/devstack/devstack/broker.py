"""A local stand-in for a Knative Broker: Trigger filters, delivery retries, dead letters, and a
resync ticker in place of the PingSource.

It reads the same ``eventing/`` manifests a cluster applies, accepts CloudEvents on an HTTP
ingress (answering ``202`` once accepted, like a Broker ingress), and delivers each event to
every subscriber whose Trigger matches, concurrently and in no particular order. A failed
delivery is retried per the Trigger's (else the Broker's) ``spec.delivery``, on transport
errors, 5xx, 404, 408, 409 and 429, waiting at least what ``Retry-After`` asks; after the last
attempt the event is dead-lettered: kept in :attr:`Router.dead_letters` and sent to the
dead-letter sink when that resolves to a URL, with ``knativeerror*`` extensions in binary mode.

Python entry point: ``Router(triggers_dir, {"<trigger or subscriber name>": url}).start()``,
then POST events to ``router.url`` (or call :meth:`Router.publish`) and ``stop()``.

As Knative's Broker does with ``authentication-oidc``, it sends each delivery (and dead
letter) with ``Authorization: Bearer <token>`` for the audience its Trigger names, when given
``credentials`` (audience -> token): the local stack gives it tokens of a ServiceAccount of its
own (:class:`devstack.tokens.TokenSource`), which it tells the functions to accept. A
delivery whose token cannot be had fails like one that got no answer, and is retried. Without
``credentials`` (``python -m devstack router``) it sends none, and the functions must run with
``FUNCTIONS_DELIVERY_AUTH=none``. An ``Authorization`` header the ingress was sent is never
passed on.
Differences from Knative: ``cesql`` filters are refused, a reply event in a 2xx answer is
logged, not re-published, ``Retry-After`` is honoured (Knative ignores it unless its
``delivery-retryafter`` feature is on), and the ApiServerSource adapter in front of it runs
with a configuration derived here, not the one the ApiServerSource controller writes.

What it is still for: ``make dev``, ``python -m devstack dev`` and the end-to-end tests run
the real Knative Eventing (:mod:`devstack.knative_stack`). The router is the event path
of ``DevStack(broker="emulated")`` (``python -m devstack dev --emulated-broker``), which the
benchmarks (``bench.burst``, ``bench.coldburst``), the chaos recording and the replicas chaos
test use, so that they measure the functions rather than the in-memory channel, and of
``python -m devstack router`` (a Broker without a cluster, e.g. for ``replay``).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.post_server import PostServer
from devstack.recording import RecordedRequest, now_stamp
from functions.core.delivery import is_success, should_retry
from functions.core.triggers import binary_attributes, structured_attributes
from functions.runtime.eventing import (
    Subscribers,
    Subscription,
    load_manifests,
    ping_source_of,
    schedule_period,
    subscriptions,
)
from functions.runtime.sender import ConnectionPool, SendResult, post_event

log = logging.getLogger(__name__)

REQUIRED = ("specversion", "id", "source", "type")
# Without delivery.timeout, bound a request like Knative Serving's default revision timeout.
DEFAULT_TIMEOUT = 300.0


def event_attributes(headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    """Attributes to filter on; raises ``ValueError`` when this is not a CloudEvent."""
    if any(name.lower().startswith("ce-") for name in headers):
        attributes = binary_attributes(headers)
    else:
        envelope = json.loads(body)
        if not isinstance(envelope, dict):
            raise ValueError("a structured CloudEvent is a JSON object")
        attributes = structured_attributes(envelope)
    missing = [name for name in REQUIRED if not attributes.get(name)]
    if missing:
        raise ValueError(f"not a CloudEvent: missing {', '.join(missing)}")
    return attributes


@dataclass(frozen=True)
class Delivery:
    """How delivering one event to one subscription ended."""

    trigger: str
    event_id: str
    status: int | None
    attempts: int
    delivered: bool
    error: str = ""
    subject: str = ""  # the event's subject: the object's path for an ApiServerSource event


@dataclass(frozen=True)
class DeadLetter:
    trigger: str
    status: int | None
    attempts: int
    request: RecordedRequest
    error: str = ""


@dataclass
class Router:
    """Broker emulation over the manifests in ``triggers_dir``.

    :param subscribers: Trigger name or subscriber ``ref`` name -> URL, or the URLs of its
        replicas (which take deliveries in turn, a retry maybe another).
    :param resync_interval: seconds between PingSource ticks; ``None`` takes each PingSource's
        schedule, ``0`` disables the ticker.
    :param record: called with every accepted event, as received.
    :param credentials: a bearer token for an audience (``None``: send none).
    :param workers: deliveries in flight per Trigger. Each Trigger has workers of its own, as
        Knative's channel fans an event out to every subscription independently: a subscriber
        that answers slowly (a burst of reconcile passes) never holds back another's
        deliveries (the status function's).
    """

    triggers_dir: Path | str
    subscribers: Subscribers
    port: int = 0
    host: str = "127.0.0.1"
    resync_interval: float | None = None
    record: Callable[[RecordedRequest], None] | None = None
    workers: int = 16
    credentials: Callable[[str], str] | None = None
    dead_letters: list[DeadLetter] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.manifests = load_manifests(self.triggers_dir)
        self.subscriptions, skipped = subscriptions(self.manifests, self.subscribers)
        for note in skipped:
            log.info("router: %s", note)
        # threads start on a pool's first delivery, so an idle Trigger costs none
        self._pools = {s.name: ThreadPoolExecutor(max_workers=self.workers,
                                                  thread_name_prefix=f"router-{s.name}")
                       for s in self.subscriptions}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: set[Future[Delivery]] = set()
        self._server = PostServer(self.accept, "router-ingress", self.host, self.port)
        self._connections = ConnectionPool()
        self._turns: dict[str, int] = {}
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Router:
        self._threads.append(self._server.start())
        if self.resync_interval != 0:
            for ping in self.manifests.ping_sources:
                period = self.resync_interval or schedule_period(ping["spec"]["schedule"])
                self._spawn(f"ticker-{ping['metadata']['name']}", self._tick, ping, period)
        return self

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    @property
    def url(self) -> str:
        return self._server.url

    def stop(self) -> None:
        self._stopping.set()
        self._server.stop()
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._connections.close()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until no delivery is in flight (retries included)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._in_flight:
                    return True
            time.sleep(0.01)
        return False

    # -- routing --------------------------------------------------------------------------------

    def accept(self, headers: Mapping[str, str], body: bytes,
               path: str = "/") -> tuple[int, str]:
        """Ingress: validate, record, fan out. Returns the HTTP status and a problem detail."""
        try:
            attributes = event_attributes(headers, body)
        except ValueError as exc:
            return 400, str(exc)
        request = RecordedRequest(headers=dict(headers), body=body, path=path,
                                  received=now_stamp())
        if self.record is not None:
            self.record(request)
        self._fan_out(request, attributes)
        return 202, ""

    def publish(self, headers: Mapping[str, str], body: bytes) -> list[Future[Delivery]]:
        """Route one event from Python; the futures resolve when each delivery has ended."""
        attributes = event_attributes(headers, body)
        request = RecordedRequest(headers=dict(headers), body=body, received=now_stamp())
        if self.record is not None:
            self.record(request)
        return self._fan_out(request, attributes)

    def matching(self, attributes: Mapping[str, str]) -> list[Subscription]:
        return [s for s in self.subscriptions if s.filter.matches(attributes)]

    def _fan_out(self, request: RecordedRequest,
                 attributes: Mapping[str, str]) -> list[Future[Delivery]]:
        futures = []
        for subscription in self.matching(attributes):
            future = self._pools[subscription.name].submit(
                self._deliver, subscription, request, attributes["id"],
                attributes.get("subject", ""))
            with self._lock:
                self._in_flight.add(future)
            future.add_done_callback(self._done)
            futures.append(future)
        return futures

    def _done(self, future: Future[Delivery]) -> None:
        with self._lock:
            self._in_flight.discard(future)

    def _deliver(self, subscription: Subscription, request: RecordedRequest,
                 event_id: str, subject: str) -> Delivery:
        spec = subscription.delivery
        headers = {**request.event_headers(), "Prefer": "reply"}
        result = SendResult(None, error="not sent")
        attempts = 0
        for attempt in range(spec.retry + 1):
            attempts += 1
            authorization = self._authorization(subscription.audience)
            if isinstance(authorization, SendResult):
                result = authorization
            else:
                result = self._connections.post(self._endpoint(subscription),
                                                {**headers, **authorization}, request.body,
                                                spec.timeout or DEFAULT_TIMEOUT)
            if is_success(result.status):
                if result.body.strip():
                    log.warning("router: %s answered %s with a body; a Broker treats that as "
                                "a reply (or a 502 when it is not a CloudEvent)",
                                subscription.name, result.status)
                delivery = Delivery(subscription.name, event_id, result.status, attempts, True,
                                    subject=subject)
                self._note(delivery)
                return delivery
            if not should_retry(result.status) or attempt == spec.retry:
                break
            delay = spec.delay_before(attempt + 1, result.retry_after)
            log.debug("router: %s answered %s; retry %d in %.2fs", subscription.name,
                      result.status, attempt + 1, delay)
            if self._stopping.wait(delay):
                break
        delivery = Delivery(subscription.name, event_id, result.status, attempts, False,
                            result.error, subject)
        self._note(delivery)
        self._dead_letter(subscription, request, result, attempts)
        return delivery

    def _authorization(self, audience: str | None) -> dict[str, str] | SendResult:
        """The ``Authorization`` header for ``audience``, or the failure to get its token."""
        if self.credentials is None or not audience:
            return {}
        try:
            return {"Authorization": f"Bearer {self.credentials(audience)}"}
        except Exception as exc:  # a TokenRequest refused or out of reach: retried
            return SendResult(None, error=f"no token for {audience}: {type(exc).__name__}")

    def _endpoint(self, subscription: Subscription) -> str:
        """The replica for the next attempt: each in turn (a retry may reach another)."""
        endpoints = subscription.endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        with self._lock:
            turn = self._turns.get(subscription.name, 0)
            self._turns[subscription.name] = turn + 1
        return endpoints[turn % len(endpoints)]

    def _note(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def _dead_letter(self, subscription: Subscription, request: RecordedRequest,
                     result: SendResult, attempts: int) -> None:
        log.warning("router: dead-lettering event for %s after %d attempts (last status %s%s)",
                    subscription.name, attempts, result.status,
                    f", {result.error}" if result.error else "")
        with self._lock:
            self.dead_letters.append(DeadLetter(subscription.name, result.status, attempts,
                                                request, result.error))
        if subscription.dead_letter_url is None:
            return
        headers = request.event_headers()
        if any(name.lower().startswith("ce-") for name in headers):
            headers["Ce-Knativeerrordest"] = subscription.url
            headers["Ce-Knativeerrorcode"] = str(result.status or 0)
            if result.body:
                headers["Ce-Knativeerrordata"] = base64.b64encode(result.body[:1024]).decode()
        authorization = self._authorization(subscription.dead_letter_audience)
        if isinstance(authorization, SendResult):
            log.error("router: the dead letter was not sent: %s", authorization.error)
            return
        sent = post_event(subscription.dead_letter_url, {**headers, **authorization},
                          request.body, 10.0)
        if not is_success(sent.status):
            log.error("router: the dead-letter sink refused the event (%s)",
                      sent.status or sent.error)

    # -- resync ticker ----------------------------------------------------------------------------

    def tick(self, ping: Mapping[str, Any]) -> list[Future[Delivery]]:
        """Publish one PingSource-shaped event (binary mode) for ``ping``."""
        headers, body = ping_event(ping)
        return self.publish(headers, body)

    def _tick(self, ping: Mapping[str, Any], period: float) -> None:
        while not self._stopping.wait(period):
            try:
                self.tick(ping)
            except Exception:
                log.exception("router: resync tick failed")


def ping_event(ping: Mapping[str, Any]) -> tuple[dict[str, str], bytes]:
    """Headers and body of the event a PingSource sends on each tick."""
    spec = ping.get("spec") or {}
    headers = {
        "Ce-Specversion": "1.0",
        "Ce-Type": "dev.knative.sources.ping",
        "Ce-Source": ping_source_of(ping),
        "Ce-Id": str(uuid.uuid4()),
        "Ce-Time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    for name, value in ((spec.get("ceOverrides") or {}).get("extensions") or {}).items():
        headers[f"Ce-{name.capitalize()}"] = str(value)
    body = b""
    if spec.get("data"):
        body = str(spec["data"]).encode("utf-8")
        headers["Content-Type"] = spec.get("contentType", "text/plain")
    elif spec.get("dataBase64"):
        body = base64.b64decode(spec["dataBase64"])
        headers["Content-Type"] = spec.get("contentType", "application/octet-stream")
    return headers, body


# -- command line ------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("router", help="route events to functions like a Broker")
    parser.add_argument("--eventing", type=Path, default=Path("eventing"),
                        help="directory with the Trigger, Broker and PingSource manifests")
    parser.add_argument("--subscriber", action="append", default=[], metavar="NAME=URL",
                        help="Trigger or subscriber name and its URL (repeatable)")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--resync", type=float, default=None, metavar="SECONDS",
                        help="resync period (default: the PingSource schedule; 0 = off)")
    parser.add_argument("--record", type=Path, help="also append every event to this JSONL")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    from devstack.recording import JsonlWriter

    subscribers = dict(item.split("=", 1) for item in args.subscriber)
    writer = JsonlWriter(args.record) if args.record else None
    router = Router(args.eventing, subscribers, port=args.port, host=args.host,
                    resync_interval=args.resync, record=writer).start()
    print(f"router listening on {router.url}; triggers: "
          f"{', '.join(s.name for s in router.subscriptions) or 'none'}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        router.stop()
        if writer is not None:
            writer.close()
    return 0
