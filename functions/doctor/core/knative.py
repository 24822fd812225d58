"""Knative Serving and Eventing: installed, recent enough, and configured as we rely on.

Minimum versions, and why:

* Eventing **1.12**: Trigger ``filters`` (the SQL-free CloudEvents Subscriptions API filters our
  Triggers use) exist from there. Before 1.15 they sit behind ``new-trigger-filters`` in
  ``config-features`` (enabled by default on 1.13 and 1.14; on 1.12 it must be set), and a
  release without them accepts the field and ignores it: every event reaches every function.
  From 1.15 they are always on.
* Serving **1.12**: the same release line; older lines are out of upstream support, and the
  functions rely on cluster-local visibility, ``containerConcurrency`` and ``emptyDir`` volumes
  (``kubernetes.podspec-volumes-emptydir`` must not be ``disabled``).

Features: the Broker and Triggers set ``delivery.timeout`` (``delivery-timeout``, on by default,
must not be ``disabled``). ``delivery-retryafter`` is off by default and nothing here relies on
it: with it off, a function's ``Retry-After`` is ignored and the Broker's exponential backoff
applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from functions.doctor.core.model import Component, Finding, Snapshot, Status, Workload

Version = tuple[int, int]
MIN_SERVING: Version = (1, 12)
MIN_EVENTING: Version = (1, 12)
FILTERS_ALWAYS_ON: Version = (1, 15)
FILTERS_DEFAULT_ON: Version = (1, 13)

SERVING_NAMESPACE = "knative-serving"
EVENTING_NAMESPACE = "knative-eventing"
VERSION_LABELS = ("app.kubernetes.io/version", "serving.knative.dev/release",
                  "eventing.knative.dev/release")
# What each component must serve (api version, plural) for our manifests to apply.
SERVING_RESOURCES = (("serving.knative.dev/v1", "services"),)
EVENTING_RESOURCES = (("eventing.knative.dev/v1", "brokers"),
                      ("eventing.knative.dev/v1", "triggers"),
                      ("sources.knative.dev/v1", "apiserversources"),
                      ("sources.knative.dev/v1", "pingsources"))
KAFKA_BROKER_DEPLOYMENTS = ("kafka-broker-receiver", "kafka-broker-dispatcher")
CHANNEL_BROKER_DEPLOYMENTS = ("mt-broker-ingress", "mt-broker-filter")
KAFKA_CLASS = "Kafka"
CHANNEL_CLASS = "MTChannelBasedBroker"
BROKER_CLASS_ANNOTATION = "eventing.knative.dev/broker.class"

_VERSION = re.compile(r"(?:^|[^0-9])v?(\d+)\.(\d+)")


def parse_version(text: str | None) -> Version | None:
    """``1.15.2``, ``v1.15``, ``knative-v1.15.2`` -> ``(1, 15)``; ``None`` when unreadable."""
    match = _VERSION.search(text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def component_version(component: Component) -> Version | None:
    """The oldest version any of the component's Deployments is labelled with (a half-done
    upgrade counts as the older release), else the operator CR's."""
    found = [v for w in component.deployments for key in VERSION_LABELS
             if (v := parse_version(w.labels.get(key))) is not None]
    if found:
        return min(found)
    return parse_version(component.operator_version)


def _show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def _missing(snapshot: Snapshot, wanted: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{plural}.{api_version}" for api_version, plural in wanted
            if not snapshot.serves(api_version, plural)]


def _installed(check: str, name: str, snapshot: Snapshot, component: Component,
               wanted: Iterable[tuple[str, str]], minimum: Version, fix: str) -> Finding:
    missing = _missing(snapshot, wanted)
    if missing:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{name} is not installed: {', '.join(missing)} not served",
                       fix=fix)
    version = component_version(component)
    if version is None:
        return Finding(check=check, status=Status.WARN,
                       summary=f"{name} is served, version unknown (no version label on its "
                               "Deployments, no operator CR readable)",
                       fix=f"make sure it is {_show(minimum)} or newer")
    if version < minimum:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{name} {_show(version)} is older than {_show(minimum)}",
                       fix=f"upgrade {name} to {_show(minimum)} or newer")
    unready = sorted(w.name for w in component.deployments if not w.ready)
    if unready:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{name} {_show(version)}: Deployments not ready: "
                               f"{', '.join(unready)}",
                       fix="see why with kubectl describe deployment -n <namespace> <name>")
    return Finding(check=check, status=Status.PASS,
                   summary=f"{name} {_show(version)} (minimum {_show(minimum)})")


def serving(snapshot: Snapshot) -> Finding:
    finding = _installed("knative-serving", "Knative Serving", snapshot, snapshot.serving,
                         SERVING_RESOURCES, MIN_SERVING,
                         "install Knative Serving (OpenShift: OpenShift Serverless and a "
                         "KnativeServing in knative-serving)")
    features = snapshot.serving.features or {}
    if finding.status is Status.PASS and \
            features.get("kubernetes.podspec-volumes-emptydir") == "disabled":
        return Finding(check=finding.check, status=Status.FAIL,
                       summary=finding.summary + "; emptyDir volumes are disabled",
                       fix="set kubernetes.podspec-volumes-emptydir: enabled in config-features "
                           "(KnativeServing spec.config.features)")
    return finding


def eventing(snapshot: Snapshot) -> Finding:
    return _installed("knative-eventing", "Knative Eventing", snapshot, snapshot.eventing,
                      EVENTING_RESOURCES, MIN_EVENTING,
                      "install Knative Eventing (OpenShift: OpenShift Serverless and a "
                      "KnativeEventing in knative-eventing)")


def trigger_filters(snapshot: Snapshot) -> Finding:
    check = "trigger-filters"
    version = component_version(snapshot.eventing)
    flag = (snapshot.eventing.features or {}).get("new-trigger-filters")
    if version is None:
        return Finding(check=check, status=Status.SKIP,
                       summary="Eventing version unknown: cannot tell whether Trigger filters "
                               "apply")
    if version >= FILTERS_ALWAYS_ON:
        return Finding(check=check, status=Status.PASS,
                       summary=f"Trigger filters are always on in Eventing {_show(version)}")
    on = flag == "enabled" or (flag is None and version >= FILTERS_DEFAULT_ON)
    if version >= MIN_EVENTING and on:
        return Finding(check=check, status=Status.PASS,
                       summary=f"Trigger filters on (new-trigger-filters in Eventing "
                               f"{_show(version)})")
    return Finding(check=check, status=Status.FAIL,
                   summary=f"Trigger filters are ignored by Eventing {_show(version)} "
                           f"(new-trigger-filters: {flag or 'unset'}): every event would reach "
                           "every function",
                   fix="upgrade Eventing to 1.15+, or set new-trigger-filters: enabled in "
                       "config-features of knative-eventing")


def delivery_features(snapshot: Snapshot) -> Finding:
    check = "delivery-features"
    features = snapshot.eventing.features
    if features is None:
        return Finding(check=check, status=Status.SKIP,
                       summary="config-features of knative-eventing not readable")
    timeout = features.get("delivery-timeout", "enabled")
    retry_after = features.get("delivery-retryafter", "disabled")
    note = (f"delivery-retryafter {retry_after}: "
            + ("a function's Retry-After bounds the Broker's retry delay"
               if retry_after == "enabled" else
               "Retry-After is ignored, the Broker's exponential backoff applies "
               "(nothing here relies on it)"))
    uses_retry_after = any("retryAfterMax" in ((o.get("spec") or {}).get("delivery") or {})
                           for kind in ("Broker", "Trigger") for o in snapshot.objects(kind))
    if timeout == "disabled":
        return Finding(check=check, status=Status.FAIL,
                       summary="delivery-timeout is disabled; our Broker sets delivery.timeout",
                       fix="set delivery-timeout: enabled in config-features of "
                           "knative-eventing (KnativeEventing spec.config.features)",
                       details=(note,))
    if uses_retry_after and retry_after != "enabled":
        return Finding(check=check, status=Status.FAIL,
                       summary="a Broker or Trigger sets retryAfterMax but delivery-retryafter "
                               "is off", fix="remove retryAfterMax", details=(note,))
    return Finding(check=check, status=Status.PASS,
                   summary=f"delivery-timeout {timeout}; {note}")


def _deployed(workloads: Iterable[Workload], names: Iterable[str]) -> bool:
    present = {w.name for w in workloads}
    return all(name in present for name in names)


def broker(snapshot: Snapshot) -> Finding:
    check = "broker"
    installed = [b for b in snapshot.objects("Broker")
                 if (b.get("metadata") or {}).get("name") == "odh-training"]
    defaults = (snapshot.broker_defaults or {}).get("default-br-config", "")
    default_class = KAFKA_CLASS if f"brokerClass: {KAFKA_CLASS}" in defaults else CHANNEL_CLASS
    kafka = _deployed(snapshot.eventing.deployments, KAFKA_BROKER_DEPLOYMENTS)
    channel = _deployed(snapshot.eventing.deployments, CHANNEL_BROKER_DEPLOYMENTS)
    if not installed:
        if kafka:
            return Finding(check=check, status=Status.PASS,
                           summary="the Kafka broker is available (config/overlays/openshift)")
        if channel:
            return Finding(check=check, status=Status.WARN,
                           summary="only the channel-based broker is available: not durable",
                           fix="for production install Knative Kafka (KnativeKafka with the "
                               "broker enabled) and use config/overlays/openshift")
        return Finding(check=check, status=Status.FAIL, summary="no Broker implementation runs",
                       fix="install a Broker class: Knative Kafka, or the channel-based broker")
    meta = installed[0].get("metadata") or {}
    broker_class = (meta.get("annotations") or {}).get(BROKER_CLASS_ANNOTATION, default_class)
    if broker_class == KAFKA_CLASS:
        config = (installed[0].get("spec") or {}).get("config") or {}
        where = f"{config.get('namespace', meta.get('namespace'))}/{config.get('name')}"
        if not kafka:
            return Finding(check=check, status=Status.FAIL,
                           summary="Broker odh-training is of class Kafka but the Kafka broker "
                                   "data plane is not deployed",
                           fix="create KnativeKafka with spec.broker.enabled: true")
        if config and where not in snapshot.configmaps:
            return Finding(check=check, status=Status.FAIL,
                           summary=f"the Kafka Broker's config ConfigMap {where} does not exist",
                           fix="set KnativeKafka spec.broker.defaultConfig (it creates "
                               "kafka-broker-config)")
        return Finding(check=check, status=Status.PASS,
                       summary=f"Broker odh-training: class Kafka, config {where}")
    if not channel:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"Broker odh-training is of class {broker_class}, which does "
                               "not run here", fix="install that Broker class or change it")
    return Finding(check=check, status=Status.WARN,
                   summary=f"Broker odh-training: class {broker_class} (in-memory channel, "
                           "not durable)",
                   fix="for production use the Kafka broker (config/overlays/openshift)")
