"""Only the Broker's deliveries are accepted, through the real Knative Eventing with
``authentication-oidc`` on (conftest.py): the Broker's filter sends each delivery with a token
of the Trigger's own ServiceAccount for the function's audience, and a job is reconciled on
them; a request straight to a function without that token is refused (401 without one or for
another audience, 403 from another ServiceAccount), and so is a Trigger that is not one of the
function's own, through the real Broker: its deliveries are refused and dead-lettered."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devstack import knative
from devstack.stack import DevStack
from devstack.tokens import service_account_token
from functions.core.delivery_auth import FUNCTION_LABEL, audience_for
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.scenario import succeeding_job
from tests.core.test_events import load_sample
from tests.dev.e2e.conftest import NAMESPACE
from tests.dev.e2e.test_delivery import dead_letters, publish
from tests.support import condition, wait_for

TRIGGERS = ("eventing.knative.dev/v1", "Trigger")
RECONCILE_AUDIENCE = audience_for(NAMESPACE, "odh-training-reconcile")
DEAD_LETTER_AUDIENCE = audience_for(NAMESPACE, "odh-training-dead-letters")
ROGUE_TYPE = "dev.odh.e2e.rogue"
SAMPLE = "02-captured-resource-update-pytorchjob-status.http.json"


def verdicts(stack: DevStack, function: str) -> dict[str, float]:
    """The function's delivery verdicts so far, by reason (its ``/metrics``)."""
    url = stack.function_urls[function].rstrip("/") + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "odh_training_delivery_auth_total"
            and sample.labels.get("function") == function}


def post_directly(stack: DevStack, authorization: str | None) -> tuple[int, Any, dict[str, Any]]:
    """A delivery POSTed to the reconcile function itself, not through the Broker."""
    headers, body = load_sample(SAMPLE)
    if authorization is not None:
        headers = {**headers, "Authorization": authorization}
    request = urllib.request.Request(stack.function_urls["reconcile"], data=body,
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, {}
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, json.loads(refused.read() or b"{}")


def reconcile_log(stack: DevStack) -> str:
    assert stack.cluster is not None
    return (stack.cluster.logs / "function-reconcile.log").read_text()


def trigger_account(kube: KubeClient, name: str) -> str:
    trigger = kube.get(kube.resource_for(*TRIGGERS), name, NAMESPACE)
    assert trigger is not None
    account = ((trigger.get("status") or {}).get("auth") or {}).get("serviceAccountName")
    assert account, f"Trigger {name} has no OIDC ServiceAccount: {trigger.get('status')}"
    return str(account)


def test_each_trigger_has_its_own_identity_and_names_its_functions_audience(
        kube: KubeClient) -> None:
    found = {t["metadata"]["name"]: t for t in kube.list(kube.resource_for(*TRIGGERS), NAMESPACE)
             if FUNCTION_LABEL in (t["metadata"].get("labels") or {})}
    assert set(found) == {"odh-training-reconcile", "odh-training-gc", "odh-training-status"}
    for name, trigger in found.items():
        assert trigger["status"]["subscriberAudience"] == audience_for(NAMESPACE, name)
        assert trigger["status"]["deadLetterSinkAudience"] == DEAD_LETTER_AUDIENCE
        assert trigger_account(kube, name).endswith("-oidc-eventing.knative.dev-trigger")


def test_the_brokers_deliveries_are_accepted_and_a_job_is_reconciled(
        stack: DevStack, kube: KubeClient) -> None:
    before = verdicts(stack, "reconcile").get("accepted", 0)
    job = succeeding_job("PyTorchJob", NAMESPACE)
    job["metadata"]["name"] = f"auth-{uuid.uuid4().hex[:6]}"
    kube.apply(job, "e2e-user")
    name = job["metadata"]["name"]
    wait_for(lambda: condition(kube.get(resources.PYTORCHJOBS, name, NAMESPACE), "Succeeded")
             .get("status") == "True", 90, 0.2, "the PyTorchJob to succeed")
    assert verdicts(stack, "reconcile").get("accepted", 0) > before
    for function in ("reconcile", "gc", "status"):
        refused = {k: v for k, v in verdicts(stack, function).items()
                   if k not in ("accepted", "missing", "wrong_audience", "forbidden")}
        assert refused == {}, (function, refused)  # nothing of the Broker's turned away
    kube.delete(resources.PYTORCHJOBS, name, NAMESPACE)


@pytest.mark.parametrize(("who", "status", "reason"), [
    pytest.param("nobody", 401, "missing", id="no-token"),
    pytest.param("trigger-for-the-broker-filter", 401, "wrong_audience",
                 id="the-triggers-own-token-for-another-audience"),
    pytest.param("another-service-account", 403, "forbidden",
                 id="a-valid-token-of-another-service-account"),
    pytest.param("trigger", 202, "accepted", id="the-triggers-token-itself"),
])
def test_a_direct_request_needs_the_token_the_broker_sends(
        stack: DevStack, kube: KubeClient, who: str, status: int, reason: str) -> None:
    account = trigger_account(kube, "odh-training-reconcile")
    tokens = {
        "nobody": None,
        "trigger-for-the-broker-filter": service_account_token(
            kube, NAMESPACE, account, audiences=["mt-broker-filter"], seconds=600),
        "another-service-account": service_account_token(
            kube, NAMESPACE, "default", audiences=[RECONCILE_AUDIENCE], seconds=600),
        "trigger": service_account_token(kube, NAMESPACE, account,
                                         audiences=[RECONCILE_AUDIENCE], seconds=600),
    }
    before = verdicts(stack, "reconcile").get(reason, 0)
    token = tokens[who]
    answered, headers, problem = post_directly(stack, token and f"Bearer {token}")
    assert answered == status, problem
    assert verdicts(stack, "reconcile").get(reason, 0) == before + 1
    if status != 202:
        assert problem["status"] == status and problem["detail"].startswith(reason)
        assert headers.get("Content-Type") == "application/problem+json"
    assert ("WWW-Authenticate" in headers) is (status == 401)
    assert not [t for t in tokens.values() if t and t in reconcile_log(stack)]


@pytest.fixture(scope="module")
def rogue(stack: DevStack, kube: KubeClient) -> Iterator[dict[str, Any]]:
    """A Trigger that is not the reconcile function's own (no function label), subscribing
    it through the real Broker with the right audience: its identity is another
    ServiceAccount. Its dead letters go to the dead-letter sink."""
    trigger = {
        "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
        "metadata": {"name": "e2e-rogue", "namespace": NAMESPACE},
        "spec": {"broker": "odh-training", "filter": {"attributes": {"type": ROGUE_TYPE}},
                 "subscriber": {"ref": {"apiVersion": "serving.knative.dev/v1",
                                        "kind": "Service", "name": "odh-training-reconcile"},
                                "audience": RECONCILE_AUDIENCE},
                 "delivery": {"retry": 1, "backoffPolicy": "linear", "backoffDelay": "PT0.2S",
                              "deadLetterSink": {
                                  "ref": {"apiVersion": "serving.knative.dev/v1",
                                          "kind": "Service", "name": "odh-training-dead-letters"},
                                  "audience": DEAD_LETTER_AUDIENCE}}},
    }
    kube.apply(trigger, "e2e-user")
    knative.wait_until(lambda: knative.not_ready(kube, knative.refs_of([trigger])), 60,
                       "the rogue Trigger is not Ready")
    try:
        yield trigger
    finally:
        kube.delete(kube.resource_for(*TRIGGERS), "e2e-rogue", NAMESPACE)


def test_a_trigger_not_the_functions_own_is_refused_and_dead_lettered(
        stack: DevStack, kube: KubeClient, rogue: dict[str, Any]) -> None:
    before = verdicts(stack, "reconcile").get("forbidden", 0)
    event_id = f"e2e-rogue-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    publish(stack, kube, event_id, 200, event_type=ROGUE_TYPE)
    letter = wait_for(lambda: dead_letters(stack).get(event_id), 30, 0.2,
                      f"{event_id} in the dead-letter sink")
    print(f"dead-lettered {time.monotonic() - started:.1f}s after it was published")
    assert letter["error"].get("code") == "403", letter
    assert verdicts(stack, "reconcile").get("forbidden", 0) == before + 1  # not retried
    account = trigger_account(kube, "e2e-rogue")
    assert f"subject system:serviceaccount:{NAMESPACE}:{account}" in reconcile_log(stack)
