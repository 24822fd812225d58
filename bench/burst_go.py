"""The upstream Go Kubeflow training-operator (v1.9.3, ``cmd/training-operator.v1``) run
against a :class:`~devstack.cluster.runner.LocalCluster`, as the baseline of the burst
benchmark.

It runs as deployed upstream (``manifests/base/deployment.yaml``: no arguments, so every
scheme is enabled and logging is zap's development mode) plus the client and worker flags
under test, with these local adjustments:

* identity: a client certificate from the cluster's CA for user ``training-operator`` in
  ``system:masters`` (its own kubeconfig), so the audit log tells its requests apart;
* addresses: metrics and health probes on 127.0.0.1 at free ports; the webhook server on a free
  port. Upstream gives the webhook server no host flag, so it listens on every interface; no
  ValidatingWebhookConfiguration is installed, so the API server never calls it;
* certificates: the operator always runs its cert rotator (``pkg/cert``), which needs the
  Secret ``training-operator-webhook-cert`` in ``MY_POD_NAMESPACE`` (created empty here; the
  rotator fills it) and waits for ``tls.crt`` in the fixed directory
  ``/tmp/k8s-webhook-server/serving-certs``, where a cluster mounts that Secret. A throw-away
  key pair is written there instead (the webhook server, with ``TMPDIR=/tmp``, serves it),
  under a lock, since the path is shared by the machine; it is removed on stop. The rotator
  finds no webhook configuration to inject its CA into and reports ready anyway.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from devstack.cluster import pki
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.ports import free_port
from devstack.cluster.runner import Component, LocalCluster, stop_process_group
from functions.kube import resources

USER = "training-operator"
NAMESPACE = "kubeflow"  # upstream's default MY_POD_NAMESPACE
SECRET = "training-operator-webhook-cert"  # noqa: S105 - a Secret's name
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 - fixed upstream
CERT_LOCK = Path("/tmp/k8s-webhook-server.lock")  # noqa: S108 - guards the fixed directory
# controller-runtime logs this once a controller's caches are synced and its workers run.
STARTED = "Starting workers"

# --kube-api-qps, --kube-api-burst, --controller-threads
SETTINGS = {
    "go-default": (20, 30, 1),  # upstream's defaults
    "go-tuned": (500, 1000, 8),
}


def install_crds(cluster: LocalCluster, bin_dir: Path) -> None:
    """The operator's own CRDs (``manifests/base/crds`` of the module that was built)."""
    apply_objects(cluster.client(), load_documents([bin_dir / "training-operator-crds"]))


@dataclass
class GoOperator:
    binary: Path
    cluster: LocalCluster
    qps: int
    burst: int
    threads: int
    component: Component | None = None
    # more flags, e.g. --enable-scheme=pytorchjob (all kinds by default)
    extra_args: tuple[str, ...] = ()
    _lock: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        process = self.component.process if self.component is not None else None
        if process is None:
            raise RuntimeError("training-operator is not running")
        return process.pid

    def start(self, timeout: float = 90.0) -> GoOperator:
        try:
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, deadline: float) -> None:
        kube = self.cluster.client()
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                   "bench")
        kube.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": SECRET, "namespace": NAMESPACE}},
                    res=resources.SECRETS)
        self._write_serving_cert()
        kubeconfig = self.cluster.user_kubeconfig(USER, ("system:masters",))
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "MY_POD_NAMESPACE": NAMESPACE,
               "TMPDIR": "/tmp"}  # noqa: S108 - where the webhook server looks for CERT_DIR
        self.component = Component("training-operator", [
            str(self.binary),
            f"--kube-api-qps={self.qps}", f"--kube-api-burst={self.burst}",
            f"--controller-threads={self.threads}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            f"--webhook-server-port={free_port()}",
            *self.extra_args,
        ], self.cluster.logs / "training-operator.log", env=env)
        self.component.start()
        while True:
            code = self.component.exited()
            if code is not None:
                raise RuntimeError(f"training-operator exited with code {code}; log: "
                                   f"{self.component.log}\n{self.component.tail()}")
            if self._pytorch_started():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"training-operator not started; log: {self.component.log}"
                                   f"\n{self.component.tail()}")
            time.sleep(0.1)

    def _pytorch_started(self) -> bool:
        assert self.component is not None
        try:
            text = self.component.log.read_text(errors="replace")
        except OSError:
            return False
        return any(STARTED in line and "pytorchjob" in line.lower()
                   for line in text.splitlines())

    def _write_serving_cert(self) -> None:
        self._lock = CERT_LOCK.open("wb")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RuntimeError(f"another training-operator run holds {CERT_LOCK}") from exc
        with tempfile.TemporaryDirectory() as scratch:
            files = pki.CertificateAuthority(Path(scratch)).issue(
                "tls", "training-operator.kubeflow.svc", server=True)
            CERT_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files.cert, CERT_DIR / "tls.crt")
            shutil.copyfile(files.key, CERT_DIR / "tls.key")

    def stop(self) -> None:
        if self.component is not None and self.component.process is not None:
            stop_process_group(self.component.process.pid)
            self.component.process.wait(5)
        self.component = None
        if self._lock is not None:
            shutil.rmtree(CERT_DIR.parent, ignore_errors=True)
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
