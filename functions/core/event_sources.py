"""What an ApiServerSource adapter's restart means for the functions, and when to catch up.

A receive adapter that starts lists every object it watches and sends nothing for them
(knative.dev/eventing v0.49: the reflector's ``Replace`` is a no-op), then sends the changes
its watches see. A change made between the old adapter's stop and the new one's watches is
therefore never sent. The adapter restarts whenever its Deployment changes, and with
``namespaceSelector: {}`` the ApiServerSource controller changes it on every namespace create
or delete; a pod deleted or a crashed container does the same. So the adapters' own pods are
watched (by a source without a namespaceSelector, which namespace churn never rewrites), and
the stop of one (its pod deleted, or its container restarted) makes each function resync once
the source's new adapter has been up for :data:`SETTLE_SECONDS`: long enough for its initial
lists, after which every change since the gap opened is either in what the resync reads or in
an event the new adapter sends.

The wait is the Broker's: until the new adapter has settled, the event is answered with a
retry, and the Broker's exponential backoff (``eventing/broker.yaml``) brings it back.

A running adapter loses changes the same way when the API server ends its watches and it
lists again; that gap is caught up from the functions' own informers
(:mod:`functions.kube.gaps`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from functions.core.times import parse_time

ADAPTER_LABEL = "eventing.knative.dev/source"
ADAPTER_VALUE = "apiserver-source-controller"  # the ApiServerSource controller's agent name
SOURCE_NAME_LABEL = "eventing.knative.dev/sourceName"
# The new adapter's start to its watches: its initial lists (about a second on a quiet local
# cluster; a cluster-wide list of a large cluster's pods takes longer), with a wide margin.
SETTLE_SECONDS = 10.0
# A container restart older than this is no gap to catch up on (its resync has run).
RECENT_RESTART_SECONDS = 300.0

Obj = Mapping[str, Any]
Action = Literal["ignore", "wait", "resync"]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    wait_seconds: float = 0.0


def is_adapter_pod(obj: Obj) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(ADAPTER_LABEL) == ADAPTER_VALUE and labels.get(SOURCE_NAME_LABEL))


def source_name(pod: Obj) -> str:
    return str(pod["metadata"]["labels"][SOURCE_NAME_LABEL])


def after_adapter_event(operation: str, pod: Obj, pods_now: Sequence[Obj], now: datetime, *,
                        settle: float = SETTLE_SECONDS) -> Decision:
    """What an event about adapter ``pod`` asks of a function, given the pods of its source
    as they are ``now``."""
    name = source_name(pod)
    if operation == "delete":
        gap = f"an adapter pod of {name} was deleted"
    elif restarted_recently(pod, now):
        gap = f"the adapter of {name} restarted in its pod"
    else:
        return Decision("ignore", f"no adapter of {name} stopped")
    live = [p for p in pods_now if not p["metadata"].get("deletionTimestamp")]
    if not live:
        if pods_now:
            return Decision("wait", f"{gap}; its successor is not created yet", settle)
        return Decision("ignore", f"{gap}; the source has no adapter (deleted or scaled down)")
    started = [since for since in map(_running_since, filter(_ready, live)) if since]
    if not started:
        return Decision("wait", f"{gap}; its successor is not ready yet", settle)
    up = (now - max(started)).total_seconds()
    if up < settle:
        return Decision("wait", f"{gap}; its successor is up for {up:.1f}s only",
                        settle - max(up, 0.0))
    return Decision("resync", f"{gap}; what it missed is read again")


def restarted_recently(pod: Obj, now: datetime) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        finished = parse_time(((status.get("lastState") or {}).get("terminated") or {})
                          .get("finishedAt"))
        if finished is not None and (now - finished).total_seconds() < RECENT_RESTART_SECONDS:
            return True
    return False


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _running_since(pod: Obj) -> datetime | None:
    """When the pod's newest running container started (``None`` if none runs)."""
    stamps = [parse_time(((s.get("state") or {}).get("running") or {}).get("startedAt"))
              for s in (pod.get("status") or {}).get("containerStatuses") or []]
    found = [s for s in stamps if s is not None]
    return max(found) if found else None
