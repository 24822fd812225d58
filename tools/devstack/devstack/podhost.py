"""What a cluster gives pods, for the pods the local stack really runs: the cluster network
(:mod:`devstack.network`: cluster DNS and kube-proxy, and the API server's egress to
in-cluster Services, which is how admission webhooks are reached) and the local kubelet
(:mod:`devstack.kubelet`).

Start the cluster with ``egress_socket`` set to :meth:`PodHost.proxy_socket`, the
endpoints controller among its controllers, and ``kwok_local_images`` naming the images
the kubelet runs; then :meth:`PodHost.start_network` and :meth:`PodHost.start_kubelet`.
Every address involved is a loopback address or a Unix socket of this run's directory.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devstack.cluster.runner import Component, LocalCluster, stop_process_group
from devstack.kubelet import LocalKubelet
from devstack.localpod import PodNetwork
from functions.kube.client import KubeClient

# What a cluster serving local pods runs besides the defaults: Services get endpoints (the
# network routes to them), and aggregated ClusterRoles get their rules.
POD_HOST_CONTROLLERS = ("endpoints-controller", "clusterrole-aggregation-controller")


@dataclass
class PodHost:
    """The network process and the kubelet of one local cluster."""

    cluster: LocalCluster
    bin_dir: Path
    proxy_port: int
    network: Component | None = None
    kubelet: LocalKubelet | None = None
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
        """The cluster network's HTTP proxy socket: the API server's egress to the cluster
        network."""
        return cluster.root / "net" / "proxy.sock"

    def pod_network(self) -> PodNetwork:
        return PodNetwork(api_port=self.cluster.api_port, api_sock=self.run_dir / "api.sock",
                          proxy_port=self.proxy_port, proxy_sock=self.proxy_socket(self.cluster),
                          pods_dir=self.cluster.root / "p",
                          handoff_sock=self.run_dir / "handoff.sock")

    def start_network(self) -> None:
        self.run_dir.mkdir(exist_ok=True)
        net = self.pod_network()
        net.pods_dir.mkdir(exist_ok=True)
        self._write_routes()
        config = {"kubeconfig": str(self.cluster.kubeconfig), "listen_port": self.proxy_port,
                  "api_port": self.cluster.api_port, "api_sock": str(net.api_sock),
                  "proxy_sock": str(net.proxy_sock), "pods_dir": str(net.pods_dir),
                  "handoff_sock": str(net.handoff_sock),
                  "routes_file": str(self.run_dir / "routes.json")}
        config_file = self.run_dir / "network.json"
        config_file.write_text(json.dumps(config))
        self.network = Component("network", [sys.executable, "-m", "devstack.network",
                                              str(config_file)], self.cluster.logs / "network.log")
        self.network.start()
        deadline = time.monotonic() + 30
        while not all(path.exists() for path in (net.proxy_sock, net.api_sock, net.handoff_sock)):
            if self.network.exited() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster network did not start; log: "
                                   f"{self.network.log}\n{self.network.tail()}")
            time.sleep(0.05)

    def start_kubelet(self, kube: KubeClient) -> None:
        self.kubelet = LocalKubelet(kube, self.bin_dir, self.cluster.kubeconfig,
                                    self.pod_network(), self.cluster.logs).start()

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
