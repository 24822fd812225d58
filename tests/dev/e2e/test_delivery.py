"""Delivery through the real Broker: a subscriber's 503 is retried as the Trigger's delivery
says and then dead-lettered, a 400 is dead-lettered without a retry. With authentication-oidc
on, an event goes into the Broker with a token for its audience, and a dead letter reaches the
sink with the Trigger's own, for the audience the Trigger names for its sink."""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from devstack import knative
from devstack.post_server import PostServer
from devstack.stack import DevStack
from devstack.tokens import service_account_token
from functions.core.delivery_auth import audience_for
from functions.kube.client import KubeClient
from tests.dev.e2e.conftest import NAMESPACE
from tests.support import wait_for

BROKER = "odh-training"
PROBE_TYPE = "dev.odh.e2e.delivery"
PROBE_RETRIES = 3


class Subscriber:
    """A subscriber that answers each event with the status its ``ce-answer`` names, counting
    the attempts per event id."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.server = PostServer(self.accept, "e2e-subscriber")

    def accept(self, headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        lowered = {k.lower(): v for k, v in headers.items()}
        with self._lock:
            self.attempts[lowered.get("ce-id", "")] += 1
        return int(lowered.get("ce-answer", "200")), "as asked"


@pytest.fixture(scope="module")
def subscriber(stack: DevStack, kube: KubeClient) -> Iterator[Subscriber]:
    """A Trigger on the Broker for the probe events, with its own delivery (few, short
    retries) and the Broker's dead-letter sink, the dead-letters function."""
    assert stack.knative is not None
    found = Subscriber()
    found.server.start()
    stack.knative.route("e2e-subscriber", "odh-e2e", [found.server.url])
    trigger = {
        "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
        "metadata": {"name": "e2e-delivery", "namespace": NAMESPACE},
        "spec": {"broker": BROKER, "filter": {"attributes": {"type": PROBE_TYPE}},
                 "subscriber": {"uri": "http://e2e-subscriber.odh-e2e.svc.cluster.local"},
                 "delivery": {"retry": PROBE_RETRIES, "backoffPolicy": "linear",
                              "backoffDelay": "PT0.2S", "deadLetterSink": {"ref": {
                                  "apiVersion": "serving.knative.dev/v1", "kind": "Service",
                                  "name": "odh-training-dead-letters"},
                                  "audience": audience_for(NAMESPACE,
                                                           "odh-training-dead-letters")}}},
    }
    kube.apply(trigger, "e2e-user")
    knative.wait_until(lambda: knative.not_ready(kube, knative.refs_of([trigger])), 60,
                       "the probe Trigger is not Ready")
    try:
        yield found
    finally:
        found.server.stop()


def publish(stack: DevStack, kube: KubeClient, event_id: str, answer: int,
            event_type: str = PROBE_TYPE) -> None:
    """One CloudEvent into the Broker ingress, through the cluster network, with a token for
    the Broker's audience of a ServiceAccount of its namespace (with no EventPolicy, Knative
    admits the senders of the Broker's own namespace)."""
    assert stack.knative is not None
    broker = kube.get(kube.resource_for("eventing.knative.dev/v1", "Broker"), BROKER, NAMESPACE)
    assert broker is not None
    address = broker["status"]["address"]
    token = service_account_token(kube, NAMESPACE, "default", audiences=[address["audience"]],
                                  seconds=600)
    request = urllib.request.Request(
        address["url"], data=b'{"probe": true}', method="POST",
        headers={"Content-Type": "application/json", "Ce-Specversion": "1.0",
                 "Ce-Id": event_id, "Ce-Type": event_type, "Ce-Source": "/e2e",
                 "Ce-Answer": str(answer), "Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": stack.knative.proxy_url}))
    with opener.open(request, timeout=10) as response:
        assert response.status == 202


def dead_letters(stack: DevStack) -> dict[str, dict[str, Any]]:
    """What the dead-letters function logged, by event id."""
    assert stack.cluster is not None
    found = {}
    for line in (stack.cluster.logs / "function-dead-letters.log").read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("deadLetter"):
                found[record["attributes"].get("id", "")] = record
    return found


@pytest.mark.parametrize(("answer", "attempts"), [
    pytest.param(503, 1 + PROBE_RETRIES, id="503-retried-then-dead-lettered"),
    pytest.param(400, 1, id="400-not-retried-dead-lettered"),
])
def test_a_refused_delivery_ends_in_the_dead_letter_sink(
        stack: DevStack, kube: KubeClient, subscriber: Subscriber, answer: int,
        attempts: int) -> None:
    event_id = f"e2e-{answer}-{uuid.uuid4().hex[:8]}"
    publish(stack, kube, event_id, answer)
    letter = wait_for(lambda: dead_letters(stack).get(event_id), 30, 0.2,
                      f"{event_id} in the dead-letter sink")
    assert letter["error"].get("code") == str(answer), letter
    assert subscriber.attempts[event_id] == attempts
