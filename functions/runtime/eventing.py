"""The Knative eventing manifests in ``eventing/``, read for local runs.

The files that a cluster applies (ApiServerSource, Broker, Triggers, PingSource) also drive
the local router and the local receive adapter, so local runs route exactly as a cluster
would. This module reads them (``yaml.safe_load_all``) and derives what local runs need:
Trigger subscriptions with their filter and delivery spec, the resync period of each
PingSource, the receive adapter's environment for each ApiServerSource, and the sources'
``filters`` that ``config/components/source-filters`` adds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from functions.core.delivery import DeliverySpec
from functions.core.triggers import TriggerFilter, compile_trigger_filter

Obj = dict[str, Any]

# config-br-defaults of a Knative install: what a Broker without spec.delivery gets.
BROKER_DEFAULT_DELIVERY = DeliverySpec(retry=10, backoff_policy="exponential",
                                       backoff_delay=0.2)


@dataclass(frozen=True)
class EventingManifests:
    triggers: list[Obj] = field(default_factory=list)
    brokers: list[Obj] = field(default_factory=list)
    ping_sources: list[Obj] = field(default_factory=list)
    apiserver_sources: list[Obj] = field(default_factory=list)
    others: list[Obj] = field(default_factory=list)


def load_manifests(directory: Path | str) -> EventingManifests:
    """Every YAML document under ``directory`` (``kustomization.yaml`` excluded), by kind."""
    found = EventingManifests()
    buckets = {("eventing.knative.dev", "Trigger"): found.triggers,
               ("eventing.knative.dev", "Broker"): found.brokers,
               ("sources.knative.dev", "PingSource"): found.ping_sources,
               ("sources.knative.dev", "ApiServerSource"): found.apiserver_sources}
    paths = sorted(p for pattern in ("*.yaml", "*.yml") for p in Path(directory).rglob(pattern))
    for path in paths:
        if path.name.startswith("kustomization."):
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict):
                continue
            group = str(doc.get("apiVersion", "")).rpartition("/")[0]
            buckets.get((group, str(doc.get("kind"))), found.others).append(doc)
    return found


@dataclass(frozen=True)
class Subscription:
    """One Trigger made concrete: where matching events go and how delivery is retried."""

    name: str
    broker: str
    filter: TriggerFilter
    url: str
    delivery: DeliverySpec
    dead_letter_url: str | None
    # Every replica behind the subscriber's address (``url`` first), for spreading deliveries
    # as a Service's load balancer does.
    replicas: tuple[str, ...] = ()
    # The OIDC audiences the Trigger names for its subscriber and its dead-letter sink: a
    # Broker with authentication-oidc sends each delivery with a token for them.
    audience: str | None = None
    dead_letter_audience: str | None = None

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self.replicas or (self.url,)


Subscribers = Mapping[str, "str | Sequence[str]"]


def destination_urls(destination: Mapping[str, Any] | None,
                     subscribers: Subscribers) -> tuple[str, ...]:
    """A Destination's URLs: ``uri``, or its ``ref`` name looked up in ``subscribers`` (one URL
    or one per replica)."""
    if not destination:
        return ()
    ref = destination.get("ref") or {}
    name = ref.get("name")
    if name and name in subscribers:
        return _urls(subscribers[name])
    uri = destination.get("uri")
    return (str(uri),) if uri else ()


def destination_url(destination: Mapping[str, Any] | None,
                    subscribers: Subscribers) -> str | None:
    """A Destination's (first) URL."""
    urls = destination_urls(destination, subscribers)
    return urls[0] if urls else None


def _urls(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def subscriptions(manifests: EventingManifests,
                  subscribers: Subscribers) -> tuple[list[Subscription], list[str]]:
    """Subscriptions for the Triggers whose subscriber has a URL, and a note per skipped one.

    ``subscribers`` maps a Trigger name, or the name in its ``spec.subscriber.ref``, to a URL
    (or to the URLs of its replicas). A Trigger's ``spec.delivery`` replaces its Broker's (as
    in Knative, not merged).
    """
    brokers = {b["metadata"]["name"]: b for b in manifests.brokers}
    found: list[Subscription] = []
    skipped: list[str] = []
    for trigger in manifests.triggers:
        name = trigger["metadata"]["name"]
        spec = trigger.get("spec") or {}
        urls = (_urls(subscribers[name]) if name in subscribers
                else destination_urls(spec.get("subscriber"), subscribers))
        if not urls:
            skipped.append(f"Trigger {name}: no URL for its subscriber")
            continue
        broker_name = str(spec.get("broker", "default"))
        broker_delivery = (brokers.get(broker_name, {}).get("spec") or {}).get("delivery")
        delivery_spec = spec.get("delivery") or broker_delivery
        delivery = DeliverySpec.from_spec(delivery_spec, BROKER_DEFAULT_DELIVERY
                                          if delivery_spec is None else DeliverySpec())
        found.append(Subscription(
            name=name, broker=broker_name, filter=compile_trigger_filter(spec), url=urls[0],
            delivery=delivery,
            dead_letter_url=destination_url(delivery.dead_letter_sink, subscribers),
            replicas=urls if len(urls) > 1 else (),
            audience=(spec.get("subscriber") or {}).get("audience"),
            dead_letter_audience=(delivery.dead_letter_sink or {}).get("audience")))
    return found, skipped


# -- PingSource ------------------------------------------------------------------------------

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def schedule_period(schedule: str) -> float:
    """Seconds between ticks of a PingSource schedule, for the schedules a resync uses:
    ``@every <go duration>``, ``@hourly``, ``* * * * *`` and ``*/N * * * *``."""
    text = schedule.strip()
    if text.startswith("CRON_TZ=") or text.startswith("TZ="):
        text = text.partition(" ")[2].strip()
    if text.startswith("@every "):
        spec = text.removeprefix("@every ").strip()
        parts = _GO_DURATION.findall(spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise ValueError(f"not a duration: {spec!r}")
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if text == "@hourly":
        return 3600.0
    fields = text.split()
    if len(fields) == 5 and fields[1:] == ["*"] * 4:
        if fields[0] == "*":
            return 60.0
        if fields[0].startswith("*/") and fields[0][2:].isdigit():
            return 60.0 * int(fields[0][2:])
    raise ValueError(f"schedule {schedule!r} is not periodic in a way the local ticker "
                     "understands; pass an explicit resync interval")


def ping_source_of(ping: Mapping[str, Any]) -> str:
    meta = ping["metadata"]
    return f"/apis/v1/namespaces/{meta.get('namespace', 'default')}/pingsources/{meta['name']}"


# -- ApiServerSource -------------------------------------------------------------------------


def guess_plural(kind: str) -> str:
    """The adapter's plural: lower-case, then ``s``, ``es`` after ``s`` or ``ies`` for ``y``
    (``meta.UnsafeGuessKindToResource``)."""
    lowered = kind.lower()
    if lowered.endswith("s"):
        return lowered + "es"
    if lowered.endswith("y"):
        return lowered[:-1] + "ies"
    return lowered + "s"


def label_selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector as the string form the adapter config takes."""
    if not selector:
        return ""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            terms.append(f"{key} {op.lower()} ({','.join(values)})")
    return ",".join(terms)


def adapter_environment(source: Obj, sink: str, *, namespaces: list[str] | None = None) -> dict[
        str, str]:
    """Environment for ``apiserver_receive_adapter`` run locally from an ApiServerSource."""
    meta, spec = source["metadata"], source.get("spec") or {}
    resources = []
    for item in spec.get("resources") or []:
        group, _, version = str(item["apiVersion"]).rpartition("/")
        entry: Obj = {"gvr": {"Group": group, "Version": version,
                              "Resource": guess_plural(item["kind"])}}
        selector = label_selector_string(item.get("selector"))
        if selector:
            entry["selector"] = selector
        resources.append(entry)
    namespace_selector = spec.get("namespaceSelector")
    all_namespaces = namespace_selector is not None and not namespace_selector
    config: Obj = {
        "namespaces": namespaces or [meta.get("namespace", "default")],
        "allNamespaces": all_namespaces,
        "resources": resources,
        "mode": spec.get("mode", "Reference"),
        "failFast": False,
    }
    if spec.get("owner"):
        config["owner"] = spec["owner"]
    if spec.get("filters"):
        config["filters"] = spec["filters"]
    env = {"K_SINK": sink, "K_SOURCE_CONFIG": json.dumps(config), "NAME": meta["name"],
           "NAMESPACE": meta.get("namespace", "default"), "K_LOGGING_CONFIG": "{}",
           "K_OBSERVABILITY_CONFIG": "{}"}
    extensions = (spec.get("ceOverrides") or {}).get("extensions")
    if extensions:
        env["K_CE_OVERRIDES"] = json.dumps({"extensions": extensions})
    return env


# The Knative feature flag an ApiServerSource with ``spec.filters`` needs (alpha in
# knative.dev/eventing v0.49.2; its webhook refuses such a source while the flag is off).
SOURCE_FILTERS_FEATURE = "new-apiserversource-filters"


def source_filter_patches(component: Path) -> list[Obj]:
    """The ApiServerSource patches of a kustomize Component (``config/components/
    source-filters``): each names a source and gives its ``spec.filters``."""
    listed = yaml.safe_load((component / "kustomization.yaml").read_text(encoding="utf-8"))
    patches: list[Obj] = []
    for entry in (listed or {}).get("patches") or []:
        text = (component / str(entry["path"])).read_text(encoding="utf-8")
        patches += [doc for doc in yaml.safe_load_all(text)
                    if isinstance(doc, dict) and doc.get("kind") == "ApiServerSource"]
    return patches


def with_source_filters(objects: Sequence[Obj], patches: Sequence[Obj]) -> list[Obj]:
    """``objects`` with each ApiServerSource a patch names given that patch's
    ``spec.filters`` (what the Component's patch does under ``kustomize build``); the other
    objects as they are. Copies: ``objects`` are not changed."""
    filters = {str(p["metadata"]["name"]): (p.get("spec") or {}).get("filters") or []
               for p in patches}
    merged: list[Obj] = []
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name"))
        if obj.get("kind") == "ApiServerSource" and name in filters:
            obj = {**obj, "spec": {**(obj.get("spec") or {}), "filters": filters[name]}}
        merged.append(obj)
    return merged
