"""Pods that are stuck for a reason the job's own status does not show.

A pod whose image cannot be pulled, whose container crash-loops or that no node can take stays
Pending or Running, so the job sits in Created or Running and nothing on it says why. These
rules find such pods; the status function turns each *cause* into one Warning Event on the job
(``kubectl describe`` and the training API's ``/events`` show it).

A cause is identified by the pod's uid and what is wrong (an image pull of one container, a
crash loop of one container, scheduling), not by the kubelet's wording: ErrImagePull and
ImagePullBackOff alternate while the kubelet retries, and are one cause.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")
CRASH_LOOP_REASON = "CrashLoopBackOff"
UNSCHEDULABLE_REASON = "Unschedulable"


@dataclass(frozen=True, slots=True)
class PodProblem:
    """One cause of a stuck pod, and the Warning Event that reports it."""

    pod_uid: str
    cause: str        # "image/<container>", "crash/<container>" or "unschedulable"
    reason: str       # the Event reason: the kubelet's or the scheduler's word for it
    message: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.cause)


def _meta(pod: Obj) -> Obj:
    return dict(pod.get("metadata") or {})


def _detail(text: object) -> str:
    text = str(text or "").strip()
    return f": {text}" if text else ""


def _container_problems(pod: Obj, name: str, uid: str) -> Iterable[PodProblem]:
    status = pod.get("status") or {}
    images = {str(c.get("name")): str(c.get("image") or "")
              for c in [*((pod.get("spec") or {}).get("initContainers") or []),
                        *((pod.get("spec") or {}).get("containers") or [])]}
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        container = str(cs.get("name") or "")
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in IMAGE_PULL_REASONS:
            image = cs.get("image") or images.get(container, "")
            yield PodProblem(uid, f"image/{container}", reason,
                             f'Pod {name}: container "{container}" cannot pull image '
                             f'"{image}"{_detail(waiting.get("message"))}')
        elif reason == CRASH_LOOP_REASON:
            last = ((cs.get("lastState") or {}).get("terminated") or {})
            code = last.get("exitCode")
            ended = f" (last exit code {code})" if code is not None else ""
            yield PodProblem(uid, f"crash/{container}", reason,
                             f'Pod {name}: container "{container}" keeps crashing{ended}, '
                             f"restarted {int(cs.get('restartCount') or 0)} times")


def pod_problems(pods: Iterable[Obj]) -> list[PodProblem]:
    """The causes that hold the given pods back (pods that ended or are going away have
    none)."""
    found: list[PodProblem] = []
    for pod in pods:
        meta = _meta(pod)
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        name = str(meta.get("name") or "")
        uid = str(meta.get("uid") or name)
        for cond in status.get("conditions") or []:
            if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                    and cond.get("reason") == UNSCHEDULABLE_REASON):
                found.append(PodProblem(uid, "unschedulable", UNSCHEDULABLE_REASON,
                                        f"Pod {name} cannot be scheduled"
                                        f"{_detail(cond.get('message'))}"))
        found.extend(_container_problems(pod, name, uid))
    return found
