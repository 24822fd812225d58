"""TrainJob hygiene: finished Kubeflow Trainer v2 TrainJobs go after a TTL, and past a history
limit per namespace (the newest N finished kept). The upstream API is left as it is: both
are chosen by annotation, on the TrainJob or on its namespace, or for every TrainJob by the
Trainer (``spec.finishedTrainJobs``), the nearest one winning:

* :data:`TTL` (a duration, ``"0s"`` allowed: at once): a finished TrainJob is deleted that long
  after it finished;
* :data:`HISTORY_LIMIT` (a count, ``0`` allowed): a finished TrainJob is deleted once that
  many finished TrainJobs of its namespace finished after it.

A TrainJob has finished when its ``Complete`` or ``Failed`` condition is True, at that
condition's ``lastTransitionTime``. Everything a pass needs is on the objects (the
TrainJobs, the namespace, the Trainer), so any pass, the resync's included, reaches the same
verdict; the gc function also records when the TTL falls due on the TrainJob
(:data:`TTL_DEADLINE`) for whatever schedules passes from the objects themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from functions.jobs.core import conditions as c
from functions.jobs.core.guards import PREFIX, format_duration, parse_duration

Obj = dict[str, Any]

TTL = f"{PREFIX}ttl-after-finished"
HISTORY_LIMIT = f"{PREFIX}finished-history-limit"
# Written by the gc function: when the TTL of a finished TrainJob falls due (RFC 3339).
TTL_DEADLINE = f"{PREFIX}ttl-deadline"
HISTORY_PATTERN = r"^[0-9]{1,5}$"
_HISTORY = re.compile(HISTORY_PATTERN)
# A recorded TTL deadline within this of the one computed is left as it is.
DEADLINE_SLACK_SECONDS = 5.0
FINISHED_CONDITIONS = ("Complete", "Failed")
TTL_REASON = "TTLExpired"
HISTORY_REASON = "HistoryLimitExceeded"


@dataclass(frozen=True, slots=True)
class Defaults:
    """The Trainer's ``spec.finishedTrainJobs`` (``None``: not set)."""

    ttl_seconds: int | None = None
    history_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Setting:
    """A value in effect and where it comes from (what the Event names)."""

    value: float
    source: str


def _meta(obj: Obj | None) -> Obj:
    return dict((obj or {}).get("metadata") or {})


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(_meta(obj).get("annotations") or {})


def finished_at(trainjob: Obj) -> datetime | None:
    """When the TrainJob finished (its Complete or Failed condition became True), else
    ``None``."""
    for cond in (trainjob.get("status") or {}).get("conditions") or []:
        if cond.get("type") in FINISHED_CONDITIONS and cond.get("status") == "True":
            return c.parse_time(cond.get("lastTransitionTime")) or c.parse_time(
                _meta(trainjob).get("creationTimestamp"))
    return None


def _history(text: str | None) -> int | None:
    return int(text) if text is not None and _HISTORY.match(text) else None


def ttl_of(trainjob: Obj, namespace: Obj | None, defaults: Defaults) -> Setting | None:
    """The TTL in effect for ``trainjob``: its own annotation, its namespace's, the
    Trainer's (a malformed annotation reads as absent)."""
    for obj, source in ((trainjob, "the TrainJob's annotation"),
                        (namespace, "the namespace's annotation")):
        value = parse_duration(_annotations(obj).get(TTL), allow_zero=True)
        if value is not None:
            return Setting(value, f"{TTL} {format_duration(value)}, {source}")
    if defaults.ttl_seconds is not None:
        return Setting(float(defaults.ttl_seconds),
                       f"ttlSecondsAfterFinished {defaults.ttl_seconds} of the Trainer")
    return None


def history_limit_of(trainjob: Obj, namespace: Obj | None,
                     defaults: Defaults) -> Setting | None:
    for obj, source in ((trainjob, "the TrainJob's annotation"),
                        (namespace, "the namespace's annotation")):
        value = _history(_annotations(obj).get(HISTORY_LIMIT))
        if value is not None:
            return Setting(float(value), f"{HISTORY_LIMIT} {value}, {source}")
    if defaults.history_limit is not None:
        return Setting(float(defaults.history_limit),
                       f"historyLimit {defaults.history_limit} of the Trainer")
    return None


def history_applies(namespace: Obj | None, defaults: Defaults, trainjobs: list[Obj]) -> bool:
    """Whether a history limit may apply to any TrainJob of the namespace."""
    return (defaults.history_limit is not None or HISTORY_LIMIT in _annotations(namespace)
            or any(HISTORY_LIMIT in _annotations(t) for t in trainjobs))


@dataclass(frozen=True, slots=True)
class Deletion:
    trainjob: Obj
    reason: str
    message: str


@dataclass
class HygienePlan:
    deletions: list[Deletion] = field(default_factory=list)
    annotations: dict[str, str | None] = field(default_factory=dict)  # the TrainJob's
    requeue_after: float | None = None


def _order(trainjob: Obj, at: datetime) -> tuple[datetime, str, str]:
    meta = _meta(trainjob)
    return (at, str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _deleting(trainjob: Obj) -> bool:
    return bool(_meta(trainjob).get("deletionTimestamp"))


def ttl_plan(trainjob: Obj, namespace: Obj | None, defaults: Defaults,
             now: datetime) -> HygienePlan:
    """The TTL's verdict on one TrainJob: delete it, or look again when it falls due (and
    record that moment on it)."""
    plan = HygienePlan()
    ended = finished_at(trainjob)
    ttl = ttl_of(trainjob, namespace, defaults)
    recorded = c.parse_time(_annotations(trainjob).get(TTL_DEADLINE))
    if ended is None or ttl is None or _deleting(trainjob):
        if recorded is not None and not _deleting(trainjob):
            plan.annotations[TTL_DEADLINE] = None
        return plan
    due = ended + timedelta(seconds=ttl.value)
    name = _meta(trainjob).get("name", "")
    if now >= due:
        plan.deletions.append(Deletion(trainjob, TTL_REASON, (
            f"Deleted TrainJob {name}: it finished at {c.rfc3339(ended)}, "
            f"{format_duration((now - ended).total_seconds())} ago ({ttl.source})")))
        return plan
    plan.requeue_after = (due - now).total_seconds()
    if recorded is None or abs((recorded - due).total_seconds()) > DEADLINE_SLACK_SECONDS:
        plan.annotations[TTL_DEADLINE] = c.rfc3339(due)
    return plan


def history_plan(trainjobs: list[Obj], namespace: Obj | None,
                 defaults: Defaults) -> list[Deletion]:
    """The finished TrainJobs of one namespace past their history limit: each goes once at
    least as many finished TrainJobs as its limit finished after it."""
    finished = [(t, at) for t in trainjobs if not _deleting(t)
                for at in [finished_at(t)] if at is not None]
    finished.sort(key=lambda pair: _order(*pair), reverse=True)   # newest first
    out: list[Deletion] = []
    for newer, (trainjob, _) in enumerate(finished):
        limit = history_limit_of(trainjob, namespace, defaults)
        if limit is not None and newer >= limit.value:
            name = _meta(trainjob).get("name", "")
            out.append(Deletion(trainjob, HISTORY_REASON, (
                f"Deleted TrainJob {name}: {newer} finished TrainJobs of its namespace are "
                f"newer, past its history limit ({limit.source})")))
    return out
