"""Reading and writing job CRs for the API, with the service's own client.

A job is addressed by namespace and name only, so it may be any of the five kinds (the four
``kubeflow.org`` kinds and the Trainer's TrainJob); reads try them in a fixed order. Lists page
through the kinds one after the other behind one opaque continue token. Nothing is cached
except whether Kueue is installed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from functions.api.core import queue
from functions.api.core.policy import PriorityPolicy
from functions.api.core.problems import decode_continue, encode_continue
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource

Obj = dict[str, Any]
KINDS: tuple[Resource, ...] = (resources.PYTORCHJOBS, resources.TFJOBS, resources.MPIJOBS,
                               resources.MXJOBS, resources.XGBOOSTJOBS, resources.PADDLEJOBS,
                               resources.JAXJOBS, resources.TRAINJOBS)
BY_KIND: dict[str, Resource] = {r.kind: r for r in KINDS}
KUEUE_API = "kueue.x-k8s.io/v1beta1"
KUEUE_RECHECK_SECONDS = 30.0
FIELD_MANAGER = "training-api"


def _stamp(obj: Obj, res: Resource) -> Obj:
    obj.setdefault("apiVersion", res.api_version)
    obj.setdefault("kind", res.kind)
    return obj


def find_job(kube: KubeClient, namespace: str, name: str) -> Obj | None:
    """The job CR of that name, whatever its kind (``None`` when there is none)."""
    for res in KINDS:
        found = kube.get(res, name, namespace)
        if found is not None:
            return _stamp(found, res)
    return None


def runtime_exists(kube: KubeClient, name: str) -> bool:
    """Whether a ClusterTrainingRuntime of that name exists (``False`` when the Trainer's CRDs
    are not installed either)."""
    return kube.get(resources.CLUSTER_TRAINING_RUNTIMES, name) is not None


def _list_once(kube: KubeClient, res: Resource, namespace: str, query: dict[str, str]) -> Obj:
    response = kube.call("list", "GET", res.path(namespace), query=query)
    if response.status == 404:  # this kind's CRD is not installed
        return {"items": [], "metadata": {}}
    data: Obj = json.loads(response.body or b"{}")
    if response.status >= 300:
        raise ApiError(response.status, str(data.get("reason") or ""),
                       str(data.get("message") or ""), data)
    return data


def list_page(kube: KubeClient, namespace: str, allowed: set[str], *,
              label_selector: str | None, limit: int,
              continue_token: str | None) -> tuple[list[Obj], str | None]:
    """Up to ``limit`` jobs of the ``allowed`` kinds and the token of the next page.

    Raises ``ValueError`` for a token this API did not issue.
    """
    index, token = decode_continue(continue_token, len(KINDS)) if continue_token else (0, None)
    items: list[Obj] = []
    while index < len(KINDS) and len(items) < limit:
        res = KINDS[index]
        if res.kind not in allowed:
            index, token = index + 1, None
            continue
        query = {"limit": str(limit - len(items))}
        if label_selector:
            query["labelSelector"] = label_selector
        if token:
            query["continue"] = token
        data = _list_once(kube, res, namespace, query)
        items.extend(_stamp(item, res) for item in data.get("items") or [])
        token = (data.get("metadata") or {}).get("continue") or None
        if token is None:
            index += 1
    if index >= len(KINDS):
        return items, None
    return items, encode_continue(index, token)


def queued(kube: KubeClient, namespace: str | None) -> list[Obj]:
    """Every job of this queue that is still waiting (one list per kind)."""
    selector = f"{queue.LABEL_QUEUE_STATE}=Queued"
    out: list[Obj] = []
    for res in KINDS:
        query = {"labelSelector": selector, "limit": "500"}
        while True:
            data = _list_once(kube, res, namespace or "", query)
            out.extend(_stamp(item, res) for item in data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                break
            query["continue"] = token
    return out


def queue_positions(kube: KubeClient, namespace: str,
                    policy: PriorityPolicy) -> dict[tuple[str, str, str], int]:
    """Places in the queue, in the order the queue handler admits (priorities capped)."""
    entries = [e for e in (queue.entry_of(cr) for cr in queued(kube, namespace))
               if e is not None]
    return queue.positions(queue.capped(entries, policy))


class KueueProbe:
    """Whether Kueue's Workload API is served (re-checked every half minute)."""

    def __init__(self) -> None:
        self._known: tuple[bool, float] | None = None

    def served(self, kube: KubeClient) -> bool:
        now = time.monotonic()
        if self._known is not None and now - self._known[1] < KUEUE_RECHECK_SECONDS:
            return self._known[0]
        found = any(r.plural == "workloads" for r in kube.discover(KUEUE_API))
        self._known = (found, now)
        return found
