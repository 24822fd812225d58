"""The real Knative event path of the local stack: Knative Eventing's controllers, webhook and
data plane running as local pods, the cluster network they talk through, and our ``eventing/``
manifests applied to them.

What runs, and who stands in for what a cluster provides:

* Knative Eventing itself, from its own manifests (:mod:`devstack.knative`); its pods,
  and the receive adapter and PingSource adapter Deployments its controllers create, are run
  by :class:`~devstack.kubelet.LocalKubelet`;
* cluster DNS and kube-proxy: :mod:`devstack.network` (one process), which is also the
  API server's egress to the cluster network, so admission webhooks are reached as in a
  cluster;
* Knative Serving: the Knative Services of ``config/serving`` are applied and published with
  their cluster-local address; the network routes that address to the local function
  processes (:meth:`KnativeEventing.route`);
* a recording subscriber, when asked for: one more Trigger, with no filter, on every Broker
  (ours, and each one a namespace makes, for the lifecycle of its jobs, as it appears), whose
  subscriber is :class:`Recorder`; every event a Broker accepted reaches it, the Broker named
  by the path it was delivered to (``/<namespace>/<name>``; ``/`` for ours).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack import knative
from devstack.cluster.manifests import FIELD_MANAGER, apply_objects, load_documents
from devstack.podhost import PodHost
from devstack.post_server import PostServer
from devstack.recording import RecordedRequest, now_stamp
from functions.kube.client import KubeClient
from functions.kube.resources import BROKERS
from functions.runtime.eventing import SOURCE_FILTERS_FEATURE, with_source_filters

log = logging.getLogger(__name__)

Obj = dict[str, Any]
RECORDER_HOST = "recorder.odh-dev"
RECORDER_TRIGGER = "odh-training-dev-recorder"


@dataclass
class Recorder:
    """The recording subscriber: keeps every event it is sent and answers 202 (no reply)."""

    sink: Callable[[RecordedRequest], None] | None = None
    events: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.server = PostServer(self.accept, "recorder")

    def accept(self, headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        request = RecordedRequest(headers=dict(headers), body=body, path=path,
                                  received=now_stamp())
        with self._lock:
            self.events.append(request)
        if self.sink is not None:
            self.sink(request)
        return 202, ""

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self.events)


def kustomization_documents(directory: Path) -> list[Obj]:
    """The objects of a kustomization's ``resources`` (files only), in its order."""
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    objects: list[Obj] = []
    for name in listed.get("resources") or []:
        path = directory / str(name)
        if path.is_file():
            objects += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return objects


def cron_every(seconds: float) -> str:
    """A PingSource schedule that fires every ``seconds`` (Knative's cron takes an optional
    seconds field but refuses ``@every``), for periods below a day that divide a minute, an
    hour or a day; anything else raises ``ValueError``."""
    whole = round(seconds)
    if whole <= 0 or whole != seconds:
        raise ValueError(f"a resync period must be a whole number of seconds, not {seconds:g}")
    for size, within, fields in ((1, 60, "{} * * * * *"), (60, 60, "0 {} * * * *"),
                                 (3600, 24, "0 0 {} * * *")):
        count, rest = divmod(whole, size)
        if not rest and count < within and within % count == 0:
            return fields.format("*" if count == 1 else f"*/{count}")
        if whole < size * within:
            break
    raise ValueError(f"a PingSource cannot fire every {whole}s: choose a period below a day "
                     "that divides a minute, an hour or a day")


def with_resync(objects: list[Obj], resync: float | None) -> list[Obj]:
    """``resync``: ``None`` keeps each PingSource as written, ``0`` leaves them out, seconds
    replace their schedule with :func:`cron_every`."""
    if resync is None:
        return objects
    kept = []
    for obj in objects:
        if obj.get("kind") == "PingSource":
            if not resync:
                continue
            obj = copy.deepcopy(obj)
            obj["spec"]["schedule"] = cron_every(resync)
        kept.append(obj)
    return kept


# How often the Brokers namespaces make are looked for, to record them too.
FOLLOW_SECONDS = 2.0


def recorder_trigger(brokers: list[Obj], *, path: str = "") -> Obj:
    """The recorder's Trigger on ``brokers[0]``: ``path`` (``/<namespace>/<name>``) for a
    Broker other than ours, which also names the Trigger after it."""
    broker = brokers[0]["metadata"]
    name = RECORDER_TRIGGER + (f"-{broker['name']}" if path else "")
    return {
        "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
        "metadata": {"name": name, "namespace": broker.get("namespace"),
                     "labels": {"functions.opendatahub.io/dev": "recorder"}},
        "spec": {"broker": broker["name"],
                 "subscriber": {"uri": f"http://{RECORDER_HOST}.svc.cluster.local{path}"}},
    }


@dataclass
class KnativeEventing(PodHost):
    """Start with :meth:`start_network` (right after the cluster), then :meth:`install`."""

    record: Callable[[RecordedRequest], None] | None = None
    recording: bool = False
    recorder: Recorder | None = None
    # ApiServerSource patches giving sources ``spec.filters`` (config/components/
    # source-filters); Knative's flag for them is turned on at install when there are any.
    source_filters: list[Obj] = field(default_factory=list)
    # authentication-oidc: every sender in the data plane (the sources' adapters, the Broker
    # ingress and filter, the channel) sends with a token of its OIDC identity and every
    # receiver checks it; the Broker's filter sends the functions tokens of their Triggers'.
    oidc: bool = True
    _followed: set[tuple[str, str]] = field(default_factory=set)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def start_network(self) -> None:
        if self.recording or self.record is not None:
            self.recorder = Recorder(self.record)
            self.recorder.server.start()
            self.routes[RECORDER_HOST] = [self.recorder.server.url]
        super().start_network()

    def install(self, kube: KubeClient) -> None:
        """Knative Eventing (and the Serving CRDs), and the kubelet that runs its pods."""
        apply_objects(kube, load_documents([self.bin_dir / "crds" / "serving"]))
        knative.install(kube, self.bin_dir, self.features())
        self.start_kubelet(kube)

    def features(self) -> dict[str, str]:
        """The flags this install sets in ``config-features`` over Knative's defaults."""
        flags = {SOURCE_FILTERS_FEATURE: "enabled"} if self.source_filters else {}
        if self.oidc:
            flags[knative.OIDC_FEATURE] = "enabled"
        return flags

    def wait_webhooks(self, kube: KubeClient, timeout: float = 90.0) -> None:
        knative.wait_until(lambda: knative.webhooks_configured(kube), timeout,
                           "Knative's webhooks not configured")

    def apply_eventing(self, kube: KubeClient, eventing_dir: Path,
                       resync: float | None) -> list[knative.Ref]:
        """Our ``eventing/`` kustomization (and the recorder's Trigger); returns what must
        become Ready."""
        objects = with_source_filters(with_resync(kustomization_documents(eventing_dir), resync),
                                      self.source_filters)
        brokers = [o for o in objects if o.get("kind") == "Broker"]
        if self.recorder is not None and brokers:
            objects.append(recorder_trigger(brokers))
            self._followed.update((str(b["metadata"].get("namespace")), b["metadata"]["name"])
                                  for b in brokers)
            threading.Thread(target=self._follow_brokers, args=(kube,), daemon=True,
                             name="recorder-brokers").start()
        for obj in objects:
            kube.apply(obj, FIELD_MANAGER)
        return knative.refs_of(o for o in objects if str(o.get("apiVersion", "")).startswith(
            ("eventing.knative.dev/", "sources.knative.dev/")))

    def _follow_brokers(self, kube: KubeClient) -> None:
        """Give each Broker a namespace makes the recorder's Trigger too."""
        while not self._stopping.wait(FOLLOW_SECONDS):
            try:
                for broker in kube.list(BROKERS):
                    meta = broker["metadata"]
                    key = (str(meta.get("namespace")), str(meta["name"]))
                    if key not in self._followed:
                        kube.apply(recorder_trigger([broker], path=f"/{key[0]}/{key[1]}"),
                                   FIELD_MANAGER)
                        self._followed.add(key)
                        log.info("recording Broker %s/%s too", *key)
            except Exception as exc:  # the next look tries again
                log.warning("Brokers not looked at: %s", exc)

    def events(self) -> list[RecordedRequest]:
        return self.recorder.snapshot() if self.recorder is not None else []

    def stop(self) -> None:
        self._stopping.set()
        super().stop()
        if self.recorder is not None:
            self.recorder.server.stop()
