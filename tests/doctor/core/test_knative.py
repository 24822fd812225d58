"""Knative checks: installed, versions, features, Broker class; each passing and failing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from functions.doctor.core import knative
from functions.doctor.core.model import Component, Finding, Snapshot, Status
from tests.doctor.snapshots import SERVED, healthy, with_, workload

Check = Callable[[Snapshot], Finding]
BASE = healthy()


def eventing(*names: str, version: str = "1.16.1", features: dict[str, str] | None = None,
             ) -> Component:
    return Component(deployments=tuple(workload("knative-eventing", n, version) for n in names),
                     features=features)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("1.15.2", (1, 15), id="plain"),
    pytest.param("v1.12.0", (1, 12), id="v-prefix"),
    pytest.param("knative-v1.22.2", (1, 22), id="git-tag"),
    pytest.param("1.16", (1, 16), id="minor-only"),
    pytest.param("devel", None, id="unreadable"),
    pytest.param(None, None, id="absent"),
])
def test_parse_version(text: str | None, expected: tuple[int, int] | None) -> None:
    assert knative.parse_version(text) == expected


@pytest.mark.parametrize(("component", "expected"), [
    pytest.param(Component(deployments=(workload("n", "a", "1.16.0"),
                                         workload("n", "b", "1.15.3"))), (1, 15),
                 id="oldest-deployment-wins"),
    pytest.param(Component(operator_version="1.14"), (1, 14), id="operator-cr"),
    pytest.param(Component(), None, id="unknown"),
])
def test_component_version(component: Component, expected: tuple[int, int] | None) -> None:
    assert knative.component_version(component) == expected


@pytest.mark.parametrize(("check", "snapshot", "status", "words"), [
    pytest.param(knative.serving, BASE, Status.PASS, "Knative Serving 1.16", id="serving-ok"),
    pytest.param(knative.serving, with_(BASE, served=SERVED - {
        "serving.knative.dev/v1/services"}), Status.FAIL, "not installed",
                 id="serving-missing"),
    pytest.param(knative.serving, with_(BASE, serving=Component(deployments=(
        workload("knative-serving", "controller", "1.11.0"),))), Status.FAIL,
                 "older than 1.12", id="serving-too-old"),
    pytest.param(knative.serving, with_(BASE, serving=Component()), Status.WARN,
                 "version unknown", id="serving-version-unknown"),
    pytest.param(knative.serving, with_(BASE, serving=Component(deployments=(
        workload("knative-serving", "activator", ready=False),))), Status.FAIL,
                 "not ready: activator", id="serving-not-ready"),
    pytest.param(knative.serving, with_(BASE, serving=Component(
        deployments=BASE.serving.deployments,
        features={"kubernetes.podspec-volumes-emptydir": "disabled"})), Status.FAIL,
                 "emptyDir", id="serving-emptydir-disabled"),
    pytest.param(knative.eventing, BASE, Status.PASS, "Knative Eventing 1.16",
                 id="eventing-ok"),
    pytest.param(knative.eventing, with_(BASE, served=SERVED - {
        "sources.knative.dev/v1/apiserversources"}), Status.FAIL, "apiserversources",
                 id="eventing-without-sources"),
    pytest.param(knative.trigger_filters, BASE, Status.PASS, "always on", id="filters-ga"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=eventing("c", version="1.13.0")),
                 Status.PASS, "new-trigger-filters", id="filters-default-on-1-13"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=eventing(
        "c", version="1.14.0", features={"new-trigger-filters": "disabled"})), Status.FAIL,
                 "ignored", id="filters-switched-off-1-14"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=eventing("c", version="1.12.3")),
                 Status.FAIL, "unset", id="filters-unset-1-12"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=eventing(
        "c", version="1.12.3", features={"new-trigger-filters": "enabled"})), Status.PASS,
                 "on", id="filters-enabled-1-12"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=eventing("c", version="1.11.0")),
                 Status.FAIL, "ignored", id="filters-too-old"),
    pytest.param(knative.trigger_filters, with_(BASE, eventing=Component()), Status.SKIP,
                 "unknown", id="filters-version-unknown"),
    pytest.param(knative.delivery_features, BASE, Status.PASS, "Retry-After is ignored",
                 id="features-defaults"),
    pytest.param(knative.delivery_features, with_(BASE, eventing=eventing(
        "c", features={"delivery-retryafter": "enabled"})), Status.PASS, "bounds",
                 id="features-retryafter-on"),
    pytest.param(knative.delivery_features, with_(BASE, eventing=eventing(
        "c", features={"delivery-timeout": "disabled"})), Status.FAIL, "delivery.timeout",
                 id="features-timeout-off"),
    pytest.param(knative.delivery_features, with_(BASE, installed={"Broker": (
        {"spec": {"delivery": {"retryAfterMax": "PT30S"}}},)}), Status.FAIL, "retryAfterMax",
                 id="features-retryaftermax-without-flag"),
    pytest.param(knative.delivery_features, with_(BASE, eventing=Component()), Status.SKIP,
                 "not readable", id="features-unreadable"),
    pytest.param(knative.broker, BASE, Status.PASS, "class Kafka", id="broker-kafka"),
    pytest.param(knative.broker, with_(BASE, configmaps=frozenset()), Status.FAIL,
                 "does not exist", id="broker-kafka-config-missing"),
    pytest.param(knative.broker, with_(BASE, eventing=eventing("eventing-controller")),
                 Status.FAIL, "data plane", id="broker-kafka-not-deployed"),
    pytest.param(knative.broker, with_(BASE, installed={"Broker": (
        {"metadata": {"name": "odh-training"}},)}, eventing=eventing(
        *knative.CHANNEL_BROKER_DEPLOYMENTS)), Status.WARN, "not durable",
                 id="broker-channel"),
    pytest.param(knative.broker, with_(BASE, installed={"Broker": (
        {"metadata": {"name": "odh-training"}},)}), Status.FAIL, "does not run here",
                 id="broker-class-absent"),
    pytest.param(knative.broker, with_(BASE, installed={}), Status.PASS, "Kafka broker is "
                 "available", id="before-install-kafka"),
    pytest.param(knative.broker, with_(BASE, installed={}, eventing=eventing(
        *knative.CHANNEL_BROKER_DEPLOYMENTS)), Status.WARN, "only the channel-based",
                 id="before-install-channel"),
    pytest.param(knative.broker, with_(BASE, installed={}, eventing=eventing("c")),
                 Status.FAIL, "no Broker implementation", id="before-install-none"),
])
def test_knative_checks(check: Check, snapshot: Snapshot, status: Status, words: str) -> None:
    finding = check(snapshot)
    assert finding.status is status, finding
    assert words in finding.summary
    assert finding.status is Status.PASS or finding.status is Status.SKIP or finding.fix
