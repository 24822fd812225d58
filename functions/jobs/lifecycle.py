"""A training job's lifecycle, sent by the functions that change it: the status function after
each pass (what the status it replaced and the one it wrote show, recorded on the job), gc
before the TTL's deletion (what is still owed, then the deletion itself; nothing recorded on
a job about to go). The sending is :mod:`functions.runtime.lifecycle`'s; the events are
:mod:`functions.jobs.core.lifecycle`'s.
"""

from __future__ import annotations

from typing import Any

from functions.core.lifecycle import Transition
from functions.jobs.core import lifecycle as core
from functions.jobs.core.frameworks import Framework
from functions.jobs.core.restarts import RESTARTS_ANNOTATION
from functions.jobs.reads import RESOURCES
from functions.kube.client import KubeClient
from functions.runtime.lifecycle import Build, Refused, publisher

Obj = dict[str, Any]


def _restarts(job: Obj) -> int:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(RESTARTS_ANNOTATION) or 0)
    except ValueError:
        return 0


def events_of(fw: Framework, pods: list[Obj]) -> Build:
    """How a job of ``fw`` is described, given the pods the pass observed."""
    def build(job: Obj, t: Transition) -> tuple[Obj, core.LifecycleData]:
        return core.lifecycle_event(fw, job, t, _restarts(job), pods)
    return build


def publish(kube: KubeClient, fw: Framework, job: Obj, statuses: list[Obj], pods: list[Obj],
            field_manager: str | None) -> int:
    """Send what ``statuses`` show that ``job`` still owes; see
    :meth:`functions.runtime.lifecycle.Publisher.publish`."""
    return publisher(kube).publish(RESOURCES[fw.kind], job, core.RULES, statuses,
                                   events_of(fw, pods), field_manager)


def publish_deletion(kube: KubeClient, fw: Framework, job: Obj) -> bool:
    """Before the TTL deletes ``job``: what it still owes, then its deletion (a crash before
    the delete sends them again, with the same ids). A refusal does not hold the deletion."""
    publish(kube, fw, job, [job.get("status") or {}], [], None)
    ttl = ((job.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    transition = core.deletion(job.get("status") or {}, int(ttl or 0))
    sender = publisher(kube)
    destinations = sender.destinations.of(str((job.get("metadata") or {}).get("namespace")))
    if transition is None or not destinations:
        return False
    try:
        sender.send(job, transition, events_of(fw, []), destinations)
    except Refused:
        return False
    return True
