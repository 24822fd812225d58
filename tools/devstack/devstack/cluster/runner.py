"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (which plays every kubelet on a few fake nodes).

Everything the product relies on (Server-Side Apply, status subresources, finalizers, CRD
validation, admission policies, garbage collection, Deployments becoming available, pods
running and failing) is done here by the real components, so tests exercise the API server's
behaviour instead of a model of it. No container runtime is needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster import kwok, pki
from devstack.cluster.ports import free_port
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KCM_CONTROLLERS = (
    "garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
    "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
    "deployment-controller", "replicaset-controller", "job-controller",
    "ttl-after-finished-controller", "pod-garbage-collector-controller",
    "resourcequota-controller", "endpointslice-controller",
    # Lifts the not-ready taint that admission puts on every new node once kwok reports it
    # Ready, and taints nodes whose lease kwok stops renewing.
    "node-lifecycle-controller",
)
# Every request at Metadata level (who, verb, object; no bodies), once per request: the
# RequestReceived stage would log each request twice.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


class ClusterError(RuntimeError):
    """A component failed to start; the message names it, its log and a way forward."""


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=self.env)

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_process_group(pid: int, timeout: float = 3.0) -> None:
    """SIGTERM the group led by ``pid``, then SIGKILL whatever is left after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            _reap(pid)
            time.sleep(0.02)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@dataclass
class LocalCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; usable as a context manager."""

    bin_dir: Path
    state_dir: Path | None = None
    nodes: list[dict[str, Any]] = field(default_factory=kwok.default_nodes)
    components: list[Component] = field(default_factory=list)
    keep_state: bool = False
    # Write an audit log of every API request to ``audit_log`` (for benchmarks that count
    # requests per client identity). Blocking mode: an event is written in the request's path,
    # so none is ever dropped and the log is complete once the answers are in.
    audit: bool = False
    # Controllers of kube-controller-manager to run besides KCM_CONTROLLERS (e.g. the
    # endpoints controller, for clients that still read v1 Endpoints).
    extra_controllers: tuple[str, ...] = ()
    # The Unix socket of an HTTP CONNECT proxy for the API server's egress to the cluster
    # network (admission webhooks and other services it calls); without it, it dials Service
    # IPs directly, and nothing answers there.
    egress_socket: Path | None = None
    # Images whose pods kwok must not start (another kubelet runs them).
    kwok_local_images: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.root = self.state_dir or Path(tempfile.mkdtemp(prefix="odh-cluster-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs = self.root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.pki = self.root / "pki"
        self.pki.mkdir(exist_ok=True)
        self.kubeconfig = self.root / "admin.kubeconfig"
        self.audit_log = self.root / "audit.log"
        self._ca: pki.CertificateAuthority | None = None
        self._admin_context: ssl.SSLContext | None = None
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self, timeout: float = 90.0) -> None:
        """Start every component and return once the cluster is ready; on failure stop all."""
        try:
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, deadline: float) -> None:
        ca = self._ca = pki.CertificateAuthority(self.pki)
        serving = ca.issue("apiserver", "kube-apiserver", server=True,
                           names=pki.SERVICE_NAMES, addresses=(pki.SERVICE_IP,))
        admin = ca.issue("admin", "admin", organizations=("system:masters",))
        sa = pki.service_account_keys(self.pki)
        self._write_kubeconfig(self.kubeconfig, ca.files.cert, admin, "admin")
        etcd_port, peer_port = free_port(), free_port()
        etcd = self._component("etcd", [
            "--name=local", f"--data-dir={self.root}/etcd",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=local=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync=true", "--log-level=warn",
            "--listen-metrics-urls=http://127.0.0.1:0",
        ])
        self._wait(etcd, deadline, lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"))
        apiserver = self._component("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", f"--secure-port={self.api_port}",
            "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.files.cert}",
            f"--service-account-issuer={pki.ISSUER}",
            f"--service-account-jwks-uri={pki.JWKS_URI}",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            f"--api-audiences={pki.ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC", "--allow-privileged=true",
            f"--cert-dir={self.pki}",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
            "--event-ttl=1h",
            *self._audit_args(),
            *self._egress_args(),
        ])
        self._admin_context = self._admin_ssl(ca.files.cert, admin)
        kube = self._wait_apiserver(apiserver, deadline)
        common = [f"--kubeconfig={self.kubeconfig}",
                  f"--authentication-kubeconfig={self.kubeconfig}",
                  f"--authorization-kubeconfig={self.kubeconfig}",
                  # no front-proxy here: do not look up its CA (which does not exist)
                  "--authentication-skip-lookup=true",
                  "--leader-elect=false", "--bind-address=127.0.0.1"]
        kcm_port, scheduler_port = free_port(), free_port()
        kcm = self._component("kube-controller-manager", [
            *common, f"--secure-port={kcm_port}",
            f"--controllers={','.join((*KCM_CONTROLLERS, *self.extra_controllers))}",
            f"--root-ca-file={ca.files.cert}",
            f"--service-account-private-key-file={sa.key}",
            "--use-service-account-credentials=false",
            "--kube-api-qps=1000", "--kube-api-burst=2000",
            "--concurrent-gc-syncs=20", "--concurrent-deployment-syncs=10",
            "--concurrent-replicaset-syncs=10", "--concurrent-job-syncs=10",
        ])
        scheduler = self._component("kube-scheduler", [
            *common, f"--secure-port={scheduler_port}",
            "--kube-api-qps=1000", "--kube-api-burst=2000",
        ])
        stages = self.root / "kwok-stages.yaml"
        stages.write_text(kwok.stages_config(self.bin_dir / "kwok-stages",
                                             self.kwok_local_images))
        kwok_process = self._component("kwok", [
            f"--kubeconfig={self.kubeconfig}", f"--config={stages}",
            f"--manage-nodes-with-annotation-selector={kwok.NODE_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--server-address=", "--node-ip=10.240.0.1", "--v=WARN",
        ])
        for obj in self.nodes:
            kube.create(obj, res=resources.NODES)
        self._wait(kcm, deadline, lambda: _http_ok(f"https://127.0.0.1:{kcm_port}/healthz"))
        self._wait(scheduler, deadline,
                   lambda: _http_ok(f"https://127.0.0.1:{scheduler_port}/healthz"))
        self._wait(kwok_process, deadline, lambda: self._nodes_ready(kube))
        self._wait(kcm, deadline,
                   lambda: kube.get(resources.SERVICEACCOUNTS, "default", "default") is not None)
        self._write_state()

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop the kube-apiserver and start it again with the same flags (as an upgrade or a
        crash does): every client's watch ends, and its new watch cache starts from etcd's
        current revision, so a watch resumed from an older version is refused as too old."""
        [apiserver] = [c for c in self.components if c.name == "kube-apiserver"]
        assert apiserver.process is not None
        stop_process_group(apiserver.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            apiserver.process.wait(timeout=2)
        apiserver.start()
        self._wait_apiserver(apiserver, time.monotonic() + timeout)

    def stop(self) -> None:
        """Stop every process that was started and remove temporary state."""
        for component in reversed(self.components):
            if component.process is not None:
                stop_process_group(component.process.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    component.process.wait(timeout=2)
        self.components.clear()
        if not self.keep_state:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- clients, waits and files ------------------------------------------------------------

    def client(self, **kwargs: Any) -> KubeClient:
        return KubeClient.from_config(from_kubeconfig(self.kubeconfig), **kwargs)

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for ``user`` in ``groups``, signed by the
        cluster's CA: a process run with it has its own identity in the audit log and RBAC
        (``system:masters`` among the groups makes it an administrator)."""
        if self._ca is None:
            raise ClusterError("the cluster is not started")
        stem = "user-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
        cert = self._ca.issue(stem, user, organizations=groups)
        path = self.root / f"{stem}.kubeconfig"
        self._write_kubeconfig(path, self._ca.files.cert, cert, user)
        return path

    def logs_summary(self, lines: int = 40) -> str:
        return "\n".join(f"--- {c.name} ({c.log}) ---\n{c.tail(lines)}" for c in self.components)

    def _component(self, name: str, args: list[str]) -> Component:
        binary = self.bin_dir / name
        if not os.access(binary, os.X_OK):
            raise ClusterError(
                f"{name}: binary not found at {binary}. Build it with `make testbin`, or set "
                "KUBEBUILDER_ASSETS to a directory that has it.")
        component = Component(name, [str(binary), *args], self.logs / f"{name}.log")
        component.start()
        self.components.append(component)
        return component

    def _wait_apiserver(self, apiserver: Component, deadline: float) -> KubeClient:
        """Wait until the API server is ready (its post-start hooks, RBAC's bootstrap roles
        among them) and serves reads; returns an admin client."""
        self._wait(apiserver, deadline,
                   lambda: _http_ok(f"{self.server}/readyz", self._admin_context))
        kube = self.client()
        self._wait(apiserver, deadline,
                   lambda: kube.get(resources.NAMESPACES, "default") is not None)
        return kube

    def _wait(self, component: Component, deadline: float, ready: Callable[[], bool]) -> None:
        while True:
            code = component.exited()
            if code is not None:
                raise ClusterError(self._failure(component, f"exited early with code {code}"))
            try:
                if ready():
                    return
            except Exception:  # noqa: S110 - not ready yet; the deadline bounds it
                pass
            if time.monotonic() > deadline:
                raise ClusterError(self._failure(component, "did not become ready in time"))
            time.sleep(0.05)

    def _failure(self, component: Component, what: str) -> str:
        tail = component.tail()
        hint = ""
        if "address already in use" in tail:
            hint = "\nA port it needs is in use: stop the other process or cluster first."
        return (f"{component.name} {what}; log: {component.log}\n"
                f"--- last lines ---\n{tail}{hint}\n"
                "Binaries: `make testbin` or KUBEBUILDER_ASSETS.")

    def _nodes_ready(self, kube: KubeClient) -> bool:
        ready = 0
        for node in kube.list(resources.NODES):
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    ready += 1
        return ready >= len(self.nodes)

    def _admin_ssl(self, ca: Path, admin: pki.CertFiles) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(admin.cert), str(admin.key))
        return context

    def _audit_args(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.root / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking",
                # one file however long the run (the default rotates at 100 MB)
                "--audit-log-maxsize=1000000"]

    def _egress_args(self) -> list[str]:
        if self.egress_socket is None:
            return []
        config = self.root / "egress-selector.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
            "egressSelections": [{"name": "cluster", "connection": {
                "proxyProtocol": "HTTPConnect",
                "transport": {"uds": {"udsName": str(self.egress_socket)}}}}]}))
        return [f"--egress-selector-config-file={config}"]

    def _write_kubeconfig(self, path: Path, ca: Path, cert: pki.CertFiles, user: str) -> None:
        def b64(file: Path) -> str:
            return base64.b64encode(file.read_bytes()).decode()

        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {
                "server": self.server, "certificate-authority-data": b64(ca)}}],
            "users": [{"name": user, "user": {
                "client-certificate-data": b64(cert.cert),
                "client-key-data": b64(cert.key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": {c.name: c.process.pid for c in self.components if c.process},
            "logs": str(self.logs),
        }
        (self.root / "state.json").write_text(json.dumps(state, indent=2))


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    if context is None and url.startswith("https"):
        context = ssl._create_unverified_context()  # noqa: S323 - self-signed health endpoint
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
