"""A training job's lifecycle as CloudEvents: which of its conditions are transitions, what
each event carries (:mod:`functions.core.lifecycle` holds the ids and the outbox).

Every transition but the TTL's deletion is a condition of the status (:mod:`conditions`):
Created, Running, Restarting, Succeeded and Failed when they turn True, Suspended when it turns
True and Resumed when it turns False. The status is written with its ``resourceVersion`` as a
precondition, so each persisted status is read by whoever writes the next one; a writer that
sends what both the status it replaces and the one it writes show therefore never skips a
transition, even one whose own send was lost in a crash. Sends are at least once: sinks dedupe
on ``source`` + ``id``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from functions.core import lifecycle as generic
from functions.core.lifecycle import SENT_ANNOTATION, SPEC_VERSION, Transition, event_id
from functions.core.times import parse_time, rfc3339, seconds_between
from functions.jobs.core import conditions as c
from functions.jobs.core.frameworks import LABEL_REPLICA_TYPE, Framework

__all__ = ["RULES", "SENT_ANNOTATION", "TYPE_PREFIX", "LifecycleData", "Transition",
           "data_schema", "deletion", "event_id", "lifecycle_event", "owed", "sent_patch",
           "sent_record", "transitions"]

Obj = dict[str, Any]
TransitionName = Literal["created", "suspended", "resumed", "running", "restarting",
                         "succeeded", "failed", "deleted"]

TYPE_PREFIX: Final = "org.opendatahub.training.job."

# (condition type, condition status) -> the transition it records, in the order the
# transitions of one moment happen.
CONDITIONS: Final[dict[tuple[str, str], str]] = {
    (c.CREATED, "True"): "created",
    (c.SUSPENDED, "True"): "suspended",
    (c.SUSPENDED, "False"): "resumed",
    (c.RUNNING, "True"): "running",
    (c.RESTARTING, "True"): "restarting",
    (c.SUCCEEDED, "True"): "succeeded",
    (c.FAILED, "True"): "failed",
}
ORDER: Final[tuple[str, ...]] = (*CONDITIONS.values(), "deleted")
# The transitions after which a job's pods have exited: their exit codes are part of the data.
EXITED: Final = frozenset({"restarting", "succeeded", "failed"})
RULES: Final = generic.Rules(
    lambda cond: CONDITIONS.get((str(cond.get("type")), str(cond.get("status")))), ORDER)


def transitions(status: Obj) -> list[Transition]:
    """The transitions a job's status (wire form) records, oldest first."""
    return RULES.transitions(status)


def sent_record(annotations: Obj | None) -> dict[str, datetime]:
    return RULES.sent_record(annotations)


def owed(statuses: list[Obj], sent: dict[str, datetime],
         since: datetime | None) -> list[Transition]:
    return RULES.owed(statuses, sent, since)


sent_patch = generic.sent_patch


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


def lifecycle_event(fw: Framework, job: Obj, t: Transition, restarts: int,
                    pods: list[Obj]) -> tuple[Obj, LifecycleData]:
    """The CloudEvent attributes and data of transition ``t`` of ``job`` (wire form)."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid"))
    created = meta.get("creationTimestamp")
    durations = Durations(
        queued_seconds=seconds_between(created, status.get("startTime")),
        to_running_seconds=seconds_between(created, t.stamp) if t.name == "running" else None,
        running_seconds=(seconds_between(status.get("startTime"),
                                  status.get("completionTime") or t.stamp)
                         if t.name in ("succeeded", "failed") else None))
    data = LifecycleData(
        transition=cast(TransitionName, t.name), kind=fw.kind, api_version=fw.api_version,
        framework=fw.name,
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
    completed = parse_time(status.get("completionTime"))
    if completed is None:
        return None
    at = completed + timedelta(seconds=ttl)
    return Transition("deleted", at, rfc3339(at), "TTLExpired",
                      f"ttlSecondsAfterFinished ({ttl}s) expired")
