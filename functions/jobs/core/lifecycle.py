"""A training job's lifecycle as CloudEvents: which transitions its status shows, the id of
each, what each event carries, and which are still owed to a destination (the outbox).

Every transition but the TTL's deletion is a condition of the status (:mod:`conditions`):
Created, Running, Restarting, Succeeded and Failed when they turn True, Suspended when it turns
True and Resumed when it turns False. A condition keeps the time of its last transition, so
``(uid, transition, lastTransitionTime)`` names one transition of one object: every replica,
every retried pass and every redelivered event computes the same id for it, and two restarts
(or two suspensions) of one job get two ids. The status is written with its
``resourceVersion`` as a precondition, so each persisted status is read by whoever writes the
next one; a writer that sends what both the status it replaces and the one it writes show
therefore never skips a transition, even one whose own send was lost in a crash.

What was sent is recorded on the job in the :data:`SENT_ANNOTATION` (the time of the last
transition sent, per transition): a transition later than that is owed. Transitions from
before a destination existed are not owed to it (a Broker made today does not receive a
year of history). Sends are at least once: sinks dedupe on ``source`` + ``id``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from functions.jobs.core import conditions as c
from functions.jobs.core.frameworks import LABEL_REPLICA_TYPE, Framework

Obj = dict[str, Any]
TransitionName = Literal["created", "suspended", "resumed", "running", "restarting",
                         "succeeded", "failed", "deleted"]

TYPE_PREFIX: Final = "org.opendatahub.training.job."
SENT_ANNOTATION: Final = "training.opendatahub.io/lifecycle-sent"
SPEC_VERSION: Final = "1.0"

# (condition type, condition status) -> the transition it records, in the order the
# transitions of one moment happen.
CONDITIONS: Final[dict[tuple[str, str], TransitionName]] = {
    (c.CREATED, "True"): "created",
    (c.SUSPENDED, "True"): "suspended",
    (c.SUSPENDED, "False"): "resumed",
    (c.RUNNING, "True"): "running",
    (c.RESTARTING, "True"): "restarting",
    (c.SUCCEEDED, "True"): "succeeded",
    (c.FAILED, "True"): "failed",
}
ORDER: Final[tuple[TransitionName, ...]] = (*CONDITIONS.values(), "deleted")
# The transitions after which a job's pods have exited: their exit codes are part of the data.
EXITED: Final = frozenset({"restarting", "succeeded", "failed"})


@dataclass(frozen=True, slots=True)
class Transition:
    name: TransitionName
    at: datetime
    stamp: str              # ``at`` as the status wrote it (part of the id)
    reason: str = ""
    message: str = ""


def transitions(status: Obj) -> list[Transition]:
    """The transitions a job's status (wire form) records, oldest first."""
    found: list[Transition] = []
    for cond in status.get("conditions") or []:
        name = CONDITIONS.get((str(cond.get("type")), str(cond.get("status"))))
        stamp = str(cond.get("lastTransitionTime") or "")
        at = _parse(stamp)
        if name is None or at is None:
            continue
        found.append(Transition(name, at, stamp, str(cond.get("reason") or ""),
                                str(cond.get("message") or "")))
    return sorted(found, key=lambda t: (t.at, ORDER.index(t.name)))


def _parse(stamp: str | None) -> datetime | None:
    try:
        return c.parse_time(stamp)
    except ValueError:
        return None


def sent_record(annotations: Obj | None) -> dict[str, datetime]:
    """The :data:`SENT_ANNOTATION` read back: the time of the last transition sent, per
    transition; an unreadable record is empty (at worst, a transition is sent again)."""
    raw = (annotations or {}).get(SENT_ANNOTATION)
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    record: dict[str, datetime] = {}
    for name, stamp in parsed.items():
        at = _parse(stamp) if isinstance(stamp, str) else None
        if at is not None and name in ORDER:
            record[name] = at
    return record


def owed(statuses: list[Obj], sent: dict[str, datetime],
         since: datetime | None) -> list[Transition]:
    """The transitions the ``statuses`` show (the one replaced and the one written) that are
    later than the last sent of their kind and not before ``since`` (when the destination
    appeared), oldest first, each once."""
    unique: dict[tuple[str, str], Transition] = {}
    for status in statuses:
        for t in transitions(status):
            last = sent.get(t.name)
            if (last is None or t.at > last) and (since is None or t.at >= since):
                unique.setdefault((t.name, t.stamp), t)
    return sorted(unique.values(), key=lambda t: (t.at, ORDER.index(t.name)))


def sent_patch(sent: dict[str, datetime], delivered: list[Transition]) -> Obj:
    """The merge patch recording ``delivered`` on top of ``sent``."""
    record = {name: c.rfc3339(at) for name, at in sent.items()}
    for t in delivered:
        if t.name not in record or t.at > sent.get(t.name, t.at):
            record[t.name] = t.stamp
    return {"metadata": {"annotations": {SENT_ANNOTATION: json.dumps(record, sort_keys=True,
                                                                      separators=(",", ":"))}}}


# -- the event ----------------------------------------------------------------------------------

class _Wire(BaseModel):
    """Fields may be added in later versions: readers ignore what they do not know."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              serialize_by_alias=True)


class ExitCode(_Wire):
    """The exit code of a job container that has terminated."""

    pod: str
    replica_type: str = Field(description="the pod's replica type, as the job names it")
    container: str
    exit_code: int
    reason: str = ""


class Durations(_Wire):
    """Seconds between the job's moments, where both are known."""

    queued_seconds: float | None = Field(
        default=None, description="creation to the start time (the job's admission: a job created "
                          "suspended by a queue waits until it is resumed)")
    to_running_seconds: float | None = Field(
        default=None, description="creation to this Running (running events only)")
    running_seconds: float | None = Field(
        default=None, description="start time to completion (succeeded and failed events only)")


class LifecycleData(_Wire):
    """The ``data`` of a training-job lifecycle event (``datacontenttype: application/json``)."""

    model_config = ConfigDict(title="TrainingJobLifecycleEvent")

    transition: TransitionName
    kind: str = Field(description="the job's kind, e.g. PyTorchJob")
    api_version: str
    framework: str = Field(description="pytorch, tensorflow, mxnet, mpi, xgboost, paddle, jax")
    namespace: str
    name: str
    uid: str
    time: str = Field(description="when the transition happened (RFC 3339)")
    reason: str = ""
    message: str = ""
    restarts: int = Field(0, description="restarts counted so far (backoffLimit counts them)")
    replica_statuses: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="the status's replicaStatuses at the transition")
    start_time: str | None = None
    completion_time: str | None = None
    exit_codes: list[ExitCode] = Field(
        default_factory=list,
        description="restarting, succeeded and failed events: the default container of each "
                    "pod that has terminated")
    durations: Durations = Field(default_factory=lambda: Durations())


SCHEMA_ID: Final = "https://opendatahub.io/schemas/training/job-lifecycle/v1.json"


def data_schema() -> Obj:
    """The JSON Schema of :class:`LifecycleData` (``docs/lifecycle-event.schema.json``)."""
    schema = LifecycleData.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            **schema}


def event_id(uid: str, t: Transition) -> str:
    return f"{uid}/{t.name}/{t.stamp}"


def source_of(fw: Framework, namespace: str, name: str) -> str:
    """The job's API path: a URI reference unique to the object's name."""
    return f"/apis/{fw.api_version}/namespaces/{namespace}/{fw.plural}/{name}"


def exit_codes(fw: Framework, pods: list[Obj]) -> list[ExitCode]:
    found: list[ExitCode] = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"].get("name"))):
        meta = pod.get("metadata") or {}
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != fw.default_container:
                continue
            terminated = ((status.get("state") or {}).get("terminated")
                          or (status.get("lastState") or {}).get("terminated"))
            if terminated and terminated.get("exitCode") is not None:
                found.append(ExitCode(
                    pod=str(meta.get("name")), container=str(status.get("name")),
                    replica_type=str((meta.get("labels") or {}).get(LABEL_REPLICA_TYPE, "")),
                    exit_code=int(terminated["exitCode"]),
                    reason=str(terminated.get("reason") or "")))
    return found


def _seconds(start: str | None, end: str | None) -> float | None:
    begun, ended = _parse(start), _parse(end)
    if begun is None or ended is None:
        return None
    return max(0.0, (ended - begun).total_seconds())


def lifecycle_event(fw: Framework, job: Obj, t: Transition, restarts: int,
                    pods: list[Obj]) -> tuple[Obj, LifecycleData]:
    """The CloudEvent attributes and data of transition ``t`` of ``job`` (wire form)."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid"))
    created = meta.get("creationTimestamp")
    durations = Durations(
        queued_seconds=_seconds(created, status.get("startTime")),
        to_running_seconds=_seconds(created, t.stamp) if t.name == "running" else None,
        running_seconds=(_seconds(status.get("startTime"),
                                  status.get("completionTime") or t.stamp)
                         if t.name in ("succeeded", "failed") else None))
    data = LifecycleData(
        transition=t.name, kind=fw.kind, api_version=fw.api_version, framework=fw.name,
        namespace=namespace, name=name, uid=uid, time=t.stamp, reason=t.reason,
        message=t.message, restarts=restarts,
        replica_statuses=dict(status.get("replicaStatuses") or {}),
        start_time=status.get("startTime"), completion_time=status.get("completionTime"),
        exit_codes=exit_codes(fw, pods) if t.name in EXITED else [], durations=durations)
    attributes = {
        "specversion": SPEC_VERSION, "id": event_id(uid, t), "type": TYPE_PREFIX + t.name,
        "source": source_of(fw, namespace, name), "subject": name, "time": t.stamp,
        "datacontenttype": "application/json",
        "jobkind": fw.kind, "jobnamespace": namespace, "jobname": name, "framework": fw.name,
    }
    return attributes, data


def deletion(status: Obj, ttl: int) -> Transition | None:
    """The TTL's deletion of a finished job: due ``ttl`` seconds after its completion, which is
    also its time (and part of its id), so every pass that deletes it names it alike."""
    completed = _parse(status.get("completionTime"))
    if completed is None:
        return None
    at = completed + timedelta(seconds=ttl)
    return Transition("deleted", at, c.rfc3339(at), "TTLExpired",
                      f"ttlSecondsAfterFinished ({ttl}s) expired")
