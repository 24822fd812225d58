"""The queue priority policy (:mod:`functions.api.core.policy`) as the platform admin set it:
the ConfigMap ``odh-training-queue-policy`` in the platform's namespace, read by the API (to
refuse a priority above a namespace's maximum) and by the queue handler (to cap the priority it
orders by). Re-read at most every few seconds, so a change takes effect without a restart.

The namespace is ``TRAINING_QUEUE_POLICY_NAMESPACE``, else the pod's own, else ``opendatahub``.
No ConfigMap (or no such namespace) means the default policy: nobody above priority 0. A
ConfigMap that cannot be read is a :class:`TemporaryError` (503, retried) wherever the policy
decides something (a refusal, an admission); where it only informs (the queue positions an
answer shows) the last policy read, else the default, stands in.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from functions.api.core.policy import CONFIGMAP, PriorityPolicy, policy_from_data
from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.runtime.lease import NAMESPACE_FILE

log = logging.getLogger(__name__)

REREAD_SECONDS = 10.0


def policy_namespace() -> str:
    configured = os.environ.get("TRAINING_QUEUE_POLICY_NAMESPACE")
    if configured:
        return configured
    try:
        return NAMESPACE_FILE.read_text().strip() or "opendatahub"
    except OSError:
        return "opendatahub"


class PolicySource:
    """The current policy, cached for ``ttl`` seconds per namespace."""

    def __init__(self, ttl: float = REREAD_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, PriorityPolicy]] = {}
        self._version: dict[str, str] = {}

    def get(self, kube: KubeClient, *, strict: bool = True) -> PriorityPolicy:
        """The policy; with ``strict=False`` a read failure yields the last one known."""
        try:
            return self._get(kube)
        except TemporaryError as exc:
            if strict:
                raise
            log.warning("%s; showing positions under the last policy known", exc)
            with self._lock:
                found = self._cached.get(policy_namespace())
            return found[1] if found is not None else PriorityPolicy()

    def _get(self, kube: KubeClient) -> PriorityPolicy:
        namespace = policy_namespace()
        now = self._clock()
        with self._lock:
            found = self._cached.get(namespace)
        if found is not None and now - found[0] < self.ttl:
            return found[1]
        try:
            configmap = kube.get(resources.CONFIGMAPS, CONFIGMAP, namespace)
        except ApiError as exc:
            raise TemporaryError(f"the queue policy (ConfigMap {namespace}/{CONFIGMAP}) cannot "
                                 f"be read: {exc.status} {exc.message}", 10.0) from exc
        policy, ignored = policy_from_data((configmap or {}).get("data"))
        version = str(((configmap or {}).get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self._cached[namespace] = (now, policy)
            changed = self._version.get(namespace) != version
            self._version[namespace] = version
        if changed:
            for problem in ignored:
                log.warning("queue policy %s/%s: ignored %s", namespace, CONFIGMAP, problem)
        return policy
