"""The local Broker emulation, over real local HTTP servers."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import BaseWSGIServer, make_server

from devstack.broker import Router, event_attributes, ping_event
from devstack.recording import RecordedRequest, RecordSink
from functions.core.errors import PermanentError, TemporaryError
from functions.core.keys import ObjectKey
from functions.runtime.registry import Context
from functions.runtime.sender import post_event
from tests.core.test_events import load_sample
from tests.runtime.controllers import Calls, recording_controller
from tests.runtime.test_app import MNIST, make_app

REPO = Path(__file__).resolve().parents[2]
UPDATE = "02-captured-resource-update-pytorchjob-status.http.json"

BROKER = """
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: test, namespace: ns}
spec:
  delivery:
    retry: 3
    backoffPolicy: linear
    backoffDelay: PT0.05S
    deadLetterSink:
      ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dead-letters}
"""
TRIGGER = """
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: fn, namespace: ns}
spec:
  broker: test
  filters:
    - prefix: {type: dev.knative.apiserver.resource.}
    - exact: {kind: PyTorchJob}
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: fn}
"""


@pytest.fixture
def eventing_dir(tmp_path: Path) -> Path:
    (tmp_path / "broker.yaml").write_text(BROKER)
    (tmp_path / "trigger.yaml").write_text(TRIGGER)
    return tmp_path


def serve_wsgi(app: Any) -> tuple[BaseWSGIServer, str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


class _Fixed(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    status = 500
    times: list[float]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.times.append(time.monotonic())
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture
def always_500() -> Iterator[tuple[str, list[float]]]:
    times: list[float] = []
    server, url = _serve(type("Always500", (_Fixed,), {"status": 500, "times": times}))
    yield url, times
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_letters() -> Iterator[tuple[RecordSink, list[RecordedRequest]]]:
    received: list[RecordedRequest] = []
    sink = RecordSink(received.append).start()
    yield sink, received
    sink.stop()


def test_transient_failure_answers_503_with_retry_after_and_the_retry_succeeds(
        eventing_dir: Path) -> None:
    calls = Calls()
    seen_at: list[float] = []

    def fail_once(ctx: Context, key: ObjectKey) -> None:
        seen_at.append(time.monotonic())
        if len(seen_at) == 1:
            raise TemporaryError("API server answered 503", retry_after=0.5)

    server, url = serve_wsgi(make_app([recording_controller(calls, fail_once)]))
    router = Router(eventing_dir, {"fn": url}, resync_interval=0).start()
    try:
        headers, body = load_sample(UPDATE)
        direct = post_event(url, headers, body)
        assert (direct.status, direct.retry_after) == (503, 1.0)
        seen_at.clear()
        calls.seen.clear()
        accepted = post_event(router.url, headers, body)
        assert accepted.status == 202
        assert router.wait_idle(10)
    finally:
        router.stop()
        server.shutdown()
    [delivery] = router.deliveries
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 202, 2)
    assert calls.keys() == [MNIST, MNIST]
    # The backoff alone is 0.05 s; the wait honours Retry-After (1 s).
    assert seen_at[1] - seen_at[0] >= 0.95
    assert router.dead_letters == []


def test_retries_are_spent_then_the_event_is_dead_lettered(
        eventing_dir: Path, always_500: tuple[str, list[float]],
        dead_letters: tuple[RecordSink, list[RecordedRequest]]) -> None:
    url, times = always_500
    sink, received = dead_letters
    router = Router(eventing_dir, {"fn": url, "dead-letters": sink.url}, resync_interval=0)
    headers, body = load_sample(UPDATE)
    [future] = router.publish(headers, body)
    delivery = future.result(timeout=10)
    router.stop()
    assert (delivery.delivered, delivery.status, delivery.attempts) == (False, 500, 4)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for gap, backoff in zip(gaps, [0.05, 0.10, 0.15], strict=True):  # linear: 0.05 s x n
        assert backoff <= gap < backoff + 0.5
    assert len(router.dead_letters) == 1
    [letter] = received
    assert letter.body == body
    assert letter.headers["Ce-Knativeerrorcode"] == "500"
    assert letter.headers["Ce-Knativeerrordest"] == url
    assert letter.headers["Ce-Id"] == headers["Ce-Id"]


def test_permanent_failure_is_not_retried(eventing_dir: Path) -> None:
    calls = Calls()

    def reject(ctx: Context, key: ObjectKey) -> None:
        raise PermanentError("spec is invalid")

    server, url = serve_wsgi(make_app([recording_controller(calls, reject)]))
    router = Router(eventing_dir, {"fn": url}, resync_interval=0)
    [future] = router.publish(*load_sample(UPDATE))
    delivery = future.result(timeout=10)
    router.stop()
    server.shutdown()
    assert (delivery.delivered, delivery.status, delivery.attempts) == (False, 422, 1)
    assert len(calls.keys()) == 1
    assert len(router.dead_letters) == 1


def test_unreachable_subscriber_is_retried_as_a_transport_error(eventing_dir: Path) -> None:
    router = Router(eventing_dir, {"fn": "http://127.0.0.1:9/"}, resync_interval=0)
    [future] = router.publish(*load_sample(UPDATE))
    delivery = future.result(timeout=10)
    router.stop()
    assert (delivery.delivered, delivery.status, delivery.attempts) == (False, None, 4)
    assert "Connection" in delivery.error


AUDIENCES = {"fn": "serving.knative.dev/service/ns/fn",
             "dead-letters": "serving.knative.dev/service/ns/dead-letters"}


@pytest.fixture
def audiences_dir(eventing_dir: Path) -> Path:
    """The Trigger and the Broker's dead-letter sink name their OIDC audiences."""
    (eventing_dir / "trigger.yaml").write_text(TRIGGER.replace(
        "name: fn}\n", f"name: fn}}\n    audience: {AUDIENCES['fn']}\n"))
    (eventing_dir / "broker.yaml").write_text(BROKER.replace(
        "name: dead-letters}\n", f"name: dead-letters}}\n      audience: "
        f"{AUDIENCES['dead-letters']}\n"))
    return eventing_dir


def test_deliveries_and_dead_letters_carry_a_token_for_their_audience(
        audiences_dir: Path, always_500: tuple[str, list[float]],
        dead_letters: tuple[RecordSink, list[RecordedRequest]]) -> None:
    """As Knative's Broker with authentication-oidc: the ingress's own Authorization is
    dropped, each delivery is sent with a token for the Trigger's audience."""
    received: list[RecordedRequest] = []
    subscriber = RecordSink(received.append).start()
    sink, letters = dead_letters
    asked: list[str] = []

    def credentials(audience: str) -> str:
        asked.append(audience)
        return f"token-for-{audience}"

    router = Router(audiences_dir, {"fn": subscriber.url, "dead-letters": sink.url},
                    resync_interval=0, credentials=credentials).start()
    headers, body = load_sample(UPDATE)
    try:
        assert post_event(router.url, {**headers, "Authorization": "Bearer the-senders"},
                          body).status == 202
        assert router.wait_idle(10)
    finally:
        router.stop()
        subscriber.stop()
    [delivery] = received
    assert delivery.headers["Authorization"] == f"Bearer token-for-{AUDIENCES['fn']}"
    refused = Router(audiences_dir, {"fn": always_500[0], "dead-letters": sink.url},
                     resync_interval=0, credentials=credentials)
    [future] = refused.publish(headers, body)
    future.result(timeout=10)
    refused.stop()
    [letter] = letters
    assert letter.headers["Authorization"] == f"Bearer token-for-{AUDIENCES['dead-letters']}"
    assert set(asked) == set(AUDIENCES.values())


def test_a_token_that_cannot_be_had_fails_the_attempt_and_is_retried(
        audiences_dir: Path) -> None:
    received: list[RecordedRequest] = []
    subscriber = RecordSink(received.append).start()
    attempts = iter([RuntimeError("TokenRequest refused"), None])

    def credentials(audience: str) -> str:
        failure = next(attempts)
        if failure is not None:
            raise failure
        return "a-token"

    router = Router(audiences_dir, {"fn": subscriber.url}, resync_interval=0,
                    credentials=credentials)
    [future] = router.publish(*load_sample(UPDATE))
    delivery = future.result(timeout=10)
    router.stop()
    subscriber.stop()
    assert (delivery.delivered, delivery.attempts) == (True, 2)
    assert [r.headers["Authorization"] for r in received] == ["Bearer a-token"]


def test_without_credentials_nothing_is_sent_for_the_audience(audiences_dir: Path) -> None:
    received: list[RecordedRequest] = []
    subscriber = RecordSink(received.append).start()
    router = Router(audiences_dir, {"fn": subscriber.url}, resync_interval=0)
    [future] = router.publish(*load_sample(UPDATE))
    assert future.result(timeout=10).delivered
    router.stop()
    subscriber.stop()
    assert "Authorization" not in received[0].headers


def test_ingress_rejects_what_is_not_a_cloudevent(eventing_dir: Path) -> None:
    router = Router(eventing_dir, {"fn": "http://127.0.0.1:9/"}, resync_interval=0).start()
    try:
        answer = post_event(router.url, {"Content-Type": "application/json"}, b"{}")
    finally:
        router.stop()
    assert answer.status == 400
    assert b"missing specversion, id, source, type" in answer.body


def test_ticker_emits_pingsource_events(tmp_path: Path) -> None:
    (tmp_path / "trigger.yaml").write_text(TRIGGER.replace(
        "- prefix: {type: dev.knative.apiserver.resource.}\n    - exact: {kind: PyTorchJob}",
        "- exact: {type: dev.knative.sources.ping}"))
    (tmp_path / "ping.yaml").write_text(
        (REPO / "eventing" / "pingsource.yaml").read_text())
    received: list[RecordedRequest] = []
    sink = RecordSink(received.append).start()
    router = Router(tmp_path, {"fn": sink.url}, resync_interval=0.05).start()
    deadline = time.monotonic() + 5
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    router.stop()
    sink.stop()
    assert len(received) >= 2
    first = received[0].headers
    assert first["Ce-Type"] == "dev.knative.sources.ping"
    assert first["Ce-Source"] == "/apis/v1/namespaces/opendatahub/pingsources/odh-training-resync"
    assert received[0].headers["Ce-Id"] != received[1].headers["Ce-Id"]
    assert json.loads(received[0].body) == {"reason": "periodic resync"}


def resource_event(kind: str, name: str = "x", event_type: str = "resource.update") -> dict[
        str, str]:
    return {"specversion": "1.0", "id": "1", "source": "https://10.96.0.1:443",
            "type": f"dev.knative.apiserver.{event_type}", "kind": kind, "name": name,
            "namespace": "ns"}


PING = {"specversion": "1.0", "id": "2", "type": "dev.knative.sources.ping",
        "source": "/apis/v1/namespaces/opendatahub/pingsources/odh-training-resync",
        "function": "all"}


def wake(function: str) -> dict[str, str]:
    return {**PING, "function": function,
            "source": f"/apis/v1/namespaces/opendatahub/pingsources/odh-training-wake-{function}"}


@pytest.mark.parametrize(("attributes", "functions"), [
    pytest.param(resource_event("PyTorchJob"), {"reconcile", "gc", "status"}, id="job"),
    pytest.param(resource_event("Trainer", event_type="resource.delete"),
                 {"reconcile", "gc", "status"}, id="trainer-delete"),
    pytest.param(resource_event("PyTorchJob", event_type="resource.add"),
                 {"reconcile", "gc", "status"}, id="job-added"),
    pytest.param(resource_event("Pod"), {"status"}, id="pod-changed"),
    pytest.param(resource_event("Pod", event_type="resource.delete"), {"reconcile", "status"},
                 id="pod-deleted"),
    pytest.param(resource_event("Pod", event_type="resource.add"), set(),
                 id="pod-added-is-our-own-create"),
    pytest.param(resource_event("Service", event_type="resource.delete"), {"reconcile"},
                 id="service-deleted"),
    pytest.param(resource_event("Service"), set(), id="service-changed-matters-to-nobody"),
    pytest.param(resource_event("Job"), {"reconcile", "status"}, id="mpi-launcher-job"),
    pytest.param(resource_event("Deployment"), {"reconcile", "gc", "status"},
                 id="trainer-deployment"),
    pytest.param(resource_event("PodGroup"), {"reconcile"}, id="podgroup-admitted"),
    pytest.param(resource_event("ConfigMap", "odh-trainer-config"), {"reconcile"},
                 id="platform-configmap"),
    pytest.param(resource_event("ConfigMap", "kube-root-ca.crt"), set(),
                 id="other-configmap"),
    pytest.param(resource_event("PyTorchJob", event_type="ref.add"), set(),
                 id="reference-mode-is-not-subscribed"),
    pytest.param(resource_event("Secret"), set(), id="unwatched-kind"),
    pytest.param(PING, {"reconcile", "gc", "status"}, id="resync-tick"),
    pytest.param(wake("status"), {"status"}, id="a-wake-of-status"),
    pytest.param(wake("gc"), {"gc"}, id="a-wake-of-gc"),
    pytest.param(wake("reconcile"), {"reconcile"}, id="a-wake-of-reconcile"),
    pytest.param({k: v for k, v in PING.items() if k != "function"}, set(),
                 id="a-ping-of-no-function"),
])
def test_repository_triggers_route_like_a_broker(attributes: dict[str, str],
                                                 functions: set[str]) -> None:
    subscribers = {f"odh-training-{name}": f"http://{name}/" for name in
                   ("reconcile", "gc", "status")}
    router = Router(REPO / "eventing", subscribers, resync_interval=0)
    try:
        matched = {s.name.removeprefix("odh-training-") for s in router.matching(attributes)}
    finally:
        router.stop()
    assert matched == functions


def test_ping_event_matches_the_pingsource_shape() -> None:
    ping = {"metadata": {"name": "resync", "namespace": "ns"},
            "spec": {"ceOverrides": {"extensions": {"controller": "x"}}}}
    headers, body = ping_event(ping)
    attributes = event_attributes(headers, body)
    assert attributes["type"] == "dev.knative.sources.ping"
    assert attributes["source"] == "/apis/v1/namespaces/ns/pingsources/resync"
    assert attributes["controller"] == "x"
    assert body == b""


def test_child_updates_a_function_is_not_sent_are_behind_its_cache_barrier() -> None:
    """The Triggers leave out some child updates; for each cached child kind whose updates a
    function is not sent, either its cache barrier covers it (functions.runtime.app) or the
    function never acts on that child's content. A change to the Triggers must revisit this."""
    from functions.runtime.app import UNSENT_CHILD_UPDATES
    from functions.runtime.registry import FUNCTIONS, load_controllers

    subscribers = {f"odh-training-{name}": f"http://{name}/" for name in FUNCTIONS}
    router = Router(REPO / "eventing", subscribers, resync_interval=0)
    controllers = load_controllers()
    # Services carry nothing reconcile decides on; only their deletion matters (and is sent).
    content_never_read = {"reconcile": {"Service"}}
    try:
        for function in FUNCTIONS:
            cached = {spec.resource.kind for c in controllers
                      for spec in c.cached.get(function, ())}
            children = {child.kind for c in controllers if function in c.handlers
                        for child in c.children} & cached
            unsent = {kind for kind in children if f"odh-training-{function}" not in {
                s.name for s in router.matching(resource_event(kind))}}
            assert unsent == set(UNSENT_CHILD_UPDATES.get(function, ())) | \
                content_never_read.get(function, set()), function
    finally:
        router.stop()


class _Gated(_Fixed):
    gate: threading.Event

    def do_POST(self) -> None:
        self.gate.wait(10)
        super().do_POST()


def test_a_slow_subscriber_holds_back_no_other_triggers_deliveries(tmp_path: Path) -> None:
    """Each Trigger has workers of its own, as Knative's channel sends to every subscription
    independently: while one subscriber holds all of its deliveries, another still gets each
    event at once."""
    (tmp_path / "broker.yaml").write_text(BROKER)
    (tmp_path / "trigger.yaml").write_text(TRIGGER)
    (tmp_path / "other.yaml").write_text(TRIGGER.replace("name: fn", "name: other"))
    gate = threading.Event()
    slow_times: list[float] = []
    quick_times: list[float] = []
    slow, slow_url = _serve(type("Slow", (_Gated,),
                                 {"status": 200, "times": slow_times, "gate": gate}))
    quick, quick_url = _serve(type("Quick", (_Fixed,), {"status": 200, "times": quick_times}))
    router = Router(tmp_path, {"fn": slow_url, "other": quick_url}, resync_interval=0,
                    workers=2)
    headers, body = load_sample(UPDATE)
    try:
        futures = [future for _ in range(4) for future in router.publish(headers, body)]
        deadline = time.monotonic() + 5
        while len(quick_times) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (len(quick_times), len(slow_times)) == (4, 0)
        gate.set()
        deliveries = [future.result(timeout=10) for future in futures]
    finally:
        gate.set()
        router.stop()
        for server in (slow, quick):
            server.shutdown()
            server.server_close()
    assert sorted(d.trigger for d in deliveries if d.delivered) == ["fn"] * 4 + ["other"] * 4
