"""A cluster-wide mutex on a ``coordination.k8s.io`` Lease, for the few passes that must not
run in two replicas at once (the training queue's admission: two replicas each admitting up to
the limit would exceed it).

Acquisition is a compare-and-swap through the API server: ``create`` when the Lease does not
exist (409 if another replica won), otherwise an apply guarded by the observed
``resourceVersion`` (409 if it changed). A holder that died is replaced once its lease expires,
so a crash never blocks the queue for longer than the lease duration.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from functions.kube import resources
from functions.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

FIELD_MANAGER = "odh-training-lease"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
HOLDER = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def lease_namespace() -> str:
    """``LEASE_NAMESPACE``, else the pod's own namespace, else ``opendatahub``."""
    configured = os.environ.get("LEASE_NAMESPACE")
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


def try_acquire(kube: KubeClient, name: str, *, namespace: str | None = None,
                holder: str = HOLDER, duration_seconds: int = 30,
                now: datetime | None = None) -> bool:
    """Take the Lease if it is free or expired; ``False`` if another holder has it."""
    namespace = namespace or lease_namespace()
    now = now or datetime.now(UTC)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
            "acquireTime": _stamp(now), "renewTime": _stamp(now)}
    body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    current = kube.get(resources.LEASES, name, namespace)
    try:
        if current is None:
            kube.create(body, res=resources.LEASES, field_manager=FIELD_MANAGER)
            return True
        if not _free(current, holder, now):
            return False
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        kube.apply(body, FIELD_MANAGER, res=resources.LEASES)
    except ApiError as exc:
        if exc.status == 409:
            return False
        if exc.status == 404 and current is None:
            # No such namespace: nothing can coordinate through it, so no other replica
            # competes there either (a local run outside the deployed namespace).
            log.warning("lease %s: namespace %s does not exist; proceeding without it",
                        name, namespace)
            return True
        raise
    return True


def release(kube: KubeClient, name: str, *, namespace: str | None = None,
            holder: str = HOLDER) -> None:
    """Give the Lease up if this holder still has it (best effort: it also expires)."""
    namespace = namespace or lease_namespace()
    current = kube.get(resources.LEASES, name, namespace)
    if current is None or (current.get("spec") or {}).get("holderIdentity") != holder:
        return
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace,
                         "resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                     "renewTime": _stamp(datetime.now(UTC))}}
    try:
        kube.apply(body, FIELD_MANAGER, res=resources.LEASES)
    except ApiError as exc:
        if exc.status != 409:
            raise


@contextmanager
def held(kube: KubeClient, name: str, **kwargs: Any) -> Iterator[bool]:
    """``with held(kube, "x") as mine:`` — ``mine`` says whether this process holds it."""
    mine = try_acquire(kube, name, **kwargs)
    try:
        yield mine
    finally:
        if mine:
            release(kube, name, namespace=kwargs.get("namespace"),
                    holder=kwargs.get("holder", HOLDER))
