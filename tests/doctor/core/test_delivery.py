"""The delivery-auth check: Eventing's authentication-oidc on, each Trigger naming its
function's audience with an OIDC identity of its own, and no receiver opted out."""

from __future__ import annotations

from typing import Any

import pytest

from functions.doctor.core.delivery import delivery_auth
from functions.doctor.core.model import Component, Snapshot, Status
from tests.doctor.snapshots import NAMESPACE, healthy, ready, trigger, with_

BASE = healthy()
EVENTING = BASE.eventing


def features(**flags: str) -> Component:
    return EVENTING.model_copy(update={"features": {"delivery-timeout": "enabled", **flags}})


def installed(**objects: tuple[dict[str, Any], ...]) -> dict[str, tuple[dict[str, Any], ...]]:
    return {**BASE.installed, **objects}


def service(name: str, **env: str) -> dict[str, Any]:
    return {**ready("Service", name), "spec": {"template": {"spec": {"containers": [
        {"name": "function", "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}}


def broker(audience: str | None) -> dict[str, Any]:
    sink: dict[str, Any] = {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                                    "name": "odh-training-dead-letters"}}
    if audience:
        sink["audience"] = audience
    return {**ready("Broker", "odh-training"), "spec": {"delivery": {"deadLetterSink": sink}}}


DLS = f"serving.knative.dev/service/{NAMESPACE}/odh-training-dead-letters"


@pytest.mark.parametrize(("snapshot", "status", "words"), [
    pytest.param(BASE, Status.PASS, "1 Triggers name their function's audience", id="healthy"),
    pytest.param(with_(BASE, eventing=features()), Status.FAIL, "authentication-oidc is "
                 "disabled", id="flag-off-by-default"),
    pytest.param(with_(BASE, eventing=features(**{"authentication-oidc": "disabled"})),
                 Status.FAIL, "refuse every delivery", id="flag-disabled"),
    pytest.param(with_(BASE, eventing=EVENTING.model_copy(update={"features": None})),
                 Status.SKIP, "not readable", id="features-unreadable"),
    pytest.param(with_(BASE, installed=installed(Trigger=(trigger(audience="x"),))),
                 Status.FAIL, "refused", id="trigger-wrong-audience"),
    pytest.param(with_(BASE, installed=installed(Trigger=(trigger(
        audience="serving.knative.dev/service/other-ns/odh-training-reconcile"),))),
                 Status.FAIL, "refused", id="namespace-changed-without-the-replacements"),
    pytest.param(with_(BASE, installed=installed(Trigger=(trigger(account=None),))),
                 Status.FAIL, "refused", id="trigger-without-oidc-identity"),
    pytest.param(with_(BASE, installed=installed(Broker=(broker(None),))), Status.FAIL,
                 "refused", id="dead-letter-sink-without-audience"),
    pytest.param(with_(BASE, installed=installed(Broker=(broker(DLS),))), Status.PASS,
                 "enabled", id="dead-letter-sink-with-its-audience"),
    pytest.param(with_(BASE, installed=installed(Service=(
        service("odh-training-gc", FUNCTIONS_DELIVERY_AUTH="none"),))), Status.WARN,
                 "odh-training-gc accept deliveries without a token", id="opted-out"),
    pytest.param(with_(BASE, installed={}), Status.PASS, "no Trigger of ours",
                 id="before-install"),
    pytest.param(with_(BASE, installed={}, eventing=features()), Status.FAIL,
                 "authentication-oidc is disabled", id="before-install-flag-off"),
])
def test_delivery_auth(snapshot: Snapshot, status: Status, words: str) -> None:
    finding = delivery_auth(snapshot)
    assert finding.status is status, finding
    assert words in finding.summary
    assert finding.status in (Status.PASS, Status.SKIP) or finding.fix


def test_what_would_be_refused_is_named() -> None:
    finding = delivery_auth(with_(BASE, installed=installed(Trigger=(trigger(audience="x"),))))
    assert finding.details == (f"Trigger odh-training-reconcile: audience x, its function "
                               f"checks for serving.knative.dev/service/{NAMESPACE}/"
                               "odh-training-reconcile",)
    assert "replacements" in finding.fix
