"""A cluster-wide mutex on a ``coordination.k8s.io`` Lease, for the few passes that must not
run in two replicas at once (the training queue's admission: two replicas each admitting up to
the limit would exceed it).

Acquisition is a compare-and-swap through the API server: ``create`` when the Lease does not
exist (409 if another replica won), otherwise an apply guarded by the observed
``resourceVersion`` (409 if it changed). A holder that died is replaced once its lease expires,
so a crash never blocks the queue for longer than the lease duration. Anything but a clean
acquisition (a missing namespace, a refusal, an API error) is "not acquired": the caller then
does not act, because acting without the Lease is exactly what it exists to prevent.

While held through :func:`held`, the Lease is renewed from a background thread every third of
its duration, so a pass longer than the duration keeps it. The holder asks
:meth:`Held.valid` before each action that needs exclusivity: it turns false when a renewal
finds another holder, or when no renewal has succeeded for most of the duration (by then
another replica may legitimately take over, so this one must stop acting).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

FIELD_MANAGER = "odh-training-lease"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A holder acts only within this fraction of the duration after its last renewal began,
# leaving the rest as a margin for request latency and clock differences between replicas.
SAFE_FRACTION = 0.8
_holder: tuple[int, str] | None = None
_holder_guard = threading.Lock()


def holder_identity() -> str:
    """This process's identity as a holder. Derived per process, so that a forked child (a
    gunicorn worker, a multiprocessing worker) never shares its parent's: two processes with
    one identity would both believe they hold the Lease."""
    global _holder
    pid = os.getpid()
    with _holder_guard:
        if _holder is None or _holder[0] != pid:
            _holder = (pid, f"{socket.gethostname()}-{pid}-{uuid.uuid4().hex[:8]}")
        return _holder[1]


def lease_namespace() -> str:
    """``LEASE_NAMESPACE``, else the pod's own namespace, else ``opendatahub``."""
    return pod_namespace("LEASE_NAMESPACE")


def pod_namespace(variable: str) -> str:
    """The namespace ``variable`` names, else the pod's own namespace, else ``opendatahub``."""
    configured = os.environ.get(variable)
    if configured:
        return configured
    try:
        return NAMESPACE_FILE.read_text().strip() or "opendatahub"
    except OSError:
        return "opendatahub"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _free(lease: dict[str, Any], holder: str, now: datetime) -> bool:
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity") or spec.get("holderIdentity") == holder:
        return True
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 0)
    return renewed is None or renewed + timedelta(seconds=duration) < now


def _body(name: str, namespace: str, spec: dict[str, Any],
          resource_version: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": spec}


def try_acquire(kube: KubeClient, name: str, *, namespace: str | None = None,
                holder: str | None = None, duration_seconds: int = 30,
                now: datetime | None = None) -> bool:
    """Take the Lease if it is free or expired. ``False`` if another holder has it, and on
    any error (logged): the caller must then not act as the holder."""
    namespace = namespace or lease_namespace()
    holder = holder or holder_identity()
    now = now or datetime.now(UTC)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
            "acquireTime": _stamp(now), "renewTime": _stamp(now)}
    try:
        current = kube.get(resources.LEASES, name, namespace)
        if current is None:
            kube.create(_body(name, namespace, spec), res=resources.LEASES,
                        field_manager=FIELD_MANAGER)
            return True
        if not _free(current, holder, now):
            return False
        kube.apply(_body(name, namespace, spec, current["metadata"]["resourceVersion"]),
                   FIELD_MANAGER, res=resources.LEASES)
    except ApiError as exc:
        if exc.status != 409:  # 409: another holder won the race, nothing to report
            log.error("lease %s/%s not acquired: the API server answered %s %s (%s)",
                      namespace, name, exc.status, exc.reason, exc.message)
        return False
    except TemporaryError as exc:
        log.warning("lease %s/%s not acquired: %s", namespace, name, exc)
        return False
    return True


def renew(kube: KubeClient, name: str, *, namespace: str | None = None,
          holder: str | None = None, duration_seconds: int = 30,
          now: datetime | None = None) -> bool:
    """Push the renew time of a Lease this holder has. ``False`` when another holder has it
    (or it is gone); API errors are raised, as they say nothing about who holds it."""
    namespace = namespace or lease_namespace()
    holder = holder or holder_identity()
    current = kube.get(resources.LEASES, name, namespace)
    spec = (current or {}).get("spec") or {}
    if current is None or spec.get("holderIdentity") != holder:
        return False
    renewed = {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
               "acquireTime": spec.get("acquireTime"),
               "renewTime": _stamp(now or datetime.now(UTC))}
    try:
        kube.apply(_body(name, namespace, renewed, current["metadata"]["resourceVersion"]),
                   FIELD_MANAGER, res=resources.LEASES)
    except ApiError as exc:
        if exc.status == 409:  # changed since read: look again next time
            raise TemporaryError(f"lease {namespace}/{name} changed while renewing") from exc
        raise
    return True


def release(kube: KubeClient, name: str, *, namespace: str | None = None,
            holder: str | None = None) -> None:
    """Give the Lease up if this holder still has it (best effort: it also expires)."""
    namespace = namespace or lease_namespace()
    holder = holder or holder_identity()
    try:
        current = kube.get(resources.LEASES, name, namespace)
        if current is None or (current.get("spec") or {}).get("holderIdentity") != holder:
            return
        spec = {"holderIdentity": "", "leaseDurationSeconds": 1,
                "renewTime": _stamp(datetime.now(UTC))}
        kube.apply(_body(name, namespace, spec, current["metadata"]["resourceVersion"]),
                   FIELD_MANAGER, res=resources.LEASES)
    except (ApiError, TemporaryError) as exc:
        log.warning("lease %s/%s not released (it expires): %s", namespace, name, exc)


class Held:
    """The outcome of :func:`held`: true when acquired; :meth:`valid` while still safe to act."""

    def __init__(self, kube: KubeClient, name: str, namespace: str, holder: str,
                 duration_seconds: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.holder = holder
        self.duration = duration_seconds
        self.acquired = False
        self.renewals = 0
        self._clock = clock
        self._valid_until = float("-inf")
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        return self.acquired

    def valid(self) -> bool:
        return (self.acquired and not self._lost.is_set()
                and self._clock() < self._valid_until)

    def acquire(self) -> bool:
        started = self._clock()
        self.acquired = try_acquire(self.kube, self.name, namespace=self.namespace,
                                    holder=self.holder, duration_seconds=self.duration)
        if self.acquired:
            self._valid_until = started + self.duration * SAFE_FRACTION
            self._thread = threading.Thread(target=self._renew_until_stopped, daemon=True,
                                            name=f"lease-{self.name}")
            self._thread.start()
        return self.acquired

    def _renew_until_stopped(self) -> None:
        interval = max(0.1, self.duration / 3)
        while not self._stop.wait(interval):
            started = self._clock()
            try:
                mine = renew(self.kube, self.name, namespace=self.namespace,
                             holder=self.holder, duration_seconds=self.duration)
            except (ApiError, TemporaryError) as exc:
                log.warning("lease %s/%s not renewed (still valid for %.1fs): %s",
                            self.namespace, self.name, self._valid_until - self._clock(), exc)
                continue
            if not mine:
                log.warning("lease %s/%s was taken over; this holder stops acting",
                            self.namespace, self.name)
                self._lost.set()
                return
            self.renewals += 1
            self._valid_until = started + self.duration * SAFE_FRACTION

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.acquired and not self._lost.is_set():
            release(self.kube, self.name, namespace=self.namespace, holder=self.holder)


@contextmanager
def held(kube: KubeClient, name: str, *, namespace: str | None = None,
         holder: str | None = None, duration_seconds: int = 30) -> Iterator[Held]:
    """``with held(kube, "x") as lease:`` — ``bool(lease)``: acquired; ``lease.valid()``:
    still safe to act (renewed meanwhile). Released on exit."""
    handle = Held(kube, name, namespace or lease_namespace(), holder or holder_identity(),
                  duration_seconds)
    handle.acquire()
    try:
        yield handle
    finally:
        handle.close()
