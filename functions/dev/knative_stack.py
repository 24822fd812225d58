"""The real Knative event path of the local stack: Knative Eventing's controllers, webhook and
data plane running as local pods, the cluster network they talk through, and our ``eventing/``
manifests applied to them.

What runs, and who stands in for what a cluster provides:

* Knative Eventing itself, from its own manifests (:mod:`functions.dev.knative`); its pods,
  and the receive adapter and PingSource adapter Deployments its controllers create, are run
  by :class:`~functions.dev.kubelet.LocalKubelet`;
* cluster DNS and kube-proxy: :mod:`functions.dev.network` (one process), which is also the
  API server's egress to the cluster network, so admission webhooks are reached as in a
  cluster;
* Knative Serving: the Knative Services of ``config/serving`` are applied and published with
  their cluster-local address; the network routes that address to the local function
  processes (:meth:`KnativeEventing.route`);
* a recording subscriber, when asked for: one more Trigger on the Broker, with no filter,
  whose subscriber is :class:`Recorder`; every event the Broker accepted reaches it.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from functions.cluster.manifests import FIELD_MANAGER, apply_objects, load_documents
from functions.cluster.runner import Component, LocalCluster, stop_process_group
from functions.dev import knative
from functions.dev.kubelet import LocalKubelet, PodNetwork
from functions.kube.client import KubeClient
from functions.runtime.post_server import PostServer
from functions.runtime.recording import RecordedRequest, now_stamp

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


def recorder_trigger(brokers: list[Obj]) -> Obj:
    broker = brokers[0]["metadata"]
    return {
        "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
        "metadata": {"name": RECORDER_TRIGGER, "namespace": broker.get("namespace"),
                     "labels": {"functions.opendatahub.io/dev": "recorder"}},
        "spec": {"broker": broker["name"],
                 "subscriber": {"uri": f"http://{RECORDER_HOST}.svc.cluster.local"}},
    }


@dataclass
class KnativeEventing:
    """Start with :meth:`start_network` (right after the cluster), then :meth:`install`."""

    cluster: LocalCluster
    bin_dir: Path
    proxy_port: int
    record: Callable[[RecordedRequest], None] | None = None
    recording: bool = False
    network: Component | None = None
    kubelet: LocalKubelet | None = None
    recorder: Recorder | None = None
    routes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.cluster.root / "net"

    @property
    def proxy_url(self) -> str:
        """The cluster network's HTTP proxy, for callers on this machine."""
        return f"http://127.0.0.1:{self.proxy_port}"

    @staticmethod
    def proxy_socket(cluster: LocalCluster) -> Path:
        """The cluster network's proxy socket: the pods' ``HTTP_PROXY`` and the API server's
        egress to the cluster network."""
        return cluster.root / "net" / "proxy.sock"

    def pod_network(self) -> PodNetwork:
        return PodNetwork(api_port=self.cluster.api_port, api_sock=self.run_dir / "api.sock",
                          proxy_port=self.proxy_port, proxy_sock=self.proxy_socket(self.cluster),
                          pods_dir=self.cluster.root / "p")

    def start_network(self) -> None:
        self.run_dir.mkdir(exist_ok=True)
        net = self.pod_network()
        net.pods_dir.mkdir(exist_ok=True)
        if self.recording or self.record is not None:
            self.recorder = Recorder(self.record)
            self.recorder.server.start()
            self.routes[RECORDER_HOST] = [self.recorder.server.url]
        self._write_routes()
        config = {"kubeconfig": str(self.cluster.kubeconfig), "listen_port": self.proxy_port,
                  "api_port": self.cluster.api_port, "api_sock": str(net.api_sock),
                  "proxy_sock": str(net.proxy_sock), "pods_dir": str(net.pods_dir),
                  "routes_file": str(self.run_dir / "routes.json")}
        config_file = self.run_dir / "network.json"
        config_file.write_text(json.dumps(config))
        self.network = Component("network", [sys.executable, "-m", "functions.dev.network",
                                              str(config_file)], self.cluster.logs / "network.log")
        self.network.start()
        deadline = time.monotonic() + 30
        while not (net.proxy_sock.exists() and net.api_sock.exists()):
            if self.network.exited() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster network did not start; log: "
                                   f"{self.network.log}\n{self.network.tail()}")
            time.sleep(0.05)

    def route(self, service: str, namespace: str, urls: list[str]) -> None:
        """Send ``<service>.<namespace>`` (any port) to ``urls`` in turn, as Knative Serving
        routes a Knative Service's address to its pods."""
        self.routes[f"{service}.{namespace}"] = list(urls)
        self._write_routes()

    def _write_routes(self) -> None:
        path = self.run_dir / "routes.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.routes))
        temporary.replace(path)

    def install(self, kube: KubeClient) -> None:
        """Knative Eventing (and the Serving CRDs), and the kubelet that runs its pods."""
        apply_objects(kube, load_documents([self.bin_dir / "crds" / "serving"]))
        knative.install(kube, self.bin_dir)
        self.kubelet = LocalKubelet(kube, self.bin_dir, self.cluster.kubeconfig,
                                    self.pod_network(), self.cluster.logs).start()

    def wait_webhooks(self, kube: KubeClient, timeout: float = 90.0) -> None:
        knative.wait_until(lambda: knative.webhooks_configured(kube), timeout,
                           "Knative's webhooks not configured")

    def apply_eventing(self, kube: KubeClient, eventing_dir: Path,
                       resync: float | None) -> list[knative.Ref]:
        """Our ``eventing/`` kustomization (and the recorder's Trigger); returns what must
        become Ready."""
        objects = with_resync(kustomization_documents(eventing_dir), resync)
        brokers = [o for o in objects if o.get("kind") == "Broker"]
        if self.recorder is not None and brokers:
            objects.append(recorder_trigger(brokers))
        for obj in objects:
            kube.apply(obj, FIELD_MANAGER)
        return knative.refs_of(o for o in objects if str(o.get("apiVersion", "")).startswith(
            ("eventing.knative.dev/", "sources.knative.dev/")))

    def events(self) -> list[RecordedRequest]:
        return self.recorder.snapshot() if self.recorder is not None else []

    def check(self) -> None:
        if self.network is not None and self.network.exited() is not None:
            raise RuntimeError(f"the cluster network exited; log: {self.network.log}\n"
                               f"{self.network.tail()}")

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            for pod in self.kubelet.snapshot():
                if pod.process is not None:
                    stop_process_group(pod.process.pid, 3.0)
            self.kubelet = None
        if self.network is not None and self.network.process is not None:
            stop_process_group(self.network.process.pid)
            self.network = None
        if self.recorder is not None:
            self.recorder.server.stop()
