"""The Trainer's lifecycle as CloudEvents: Ready, Degraded and Removed, read from its conditions
(:mod:`functions.core.lifecycle` holds the ids and the outbox).

``ready``: the Ready condition turned True; ``degraded``: Degraded turned True (a dependency,
JobSet, is missing or unhealthy); ``removed``: Ready is False because the Trainer was set to
``Removed`` and its operand deleted. The Trainer is cluster-scoped, so its events go to the
platform's Broker only.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from functions.core import lifecycle as generic
from functions.core.lifecycle import SPEC_VERSION, Transition, event_id
from functions.trainer.core.api import API_VERSION, DEGRADED, KIND, READY
from functions.trainer.core.status import REMOVED_REASON

Obj = dict[str, Any]
TransitionName = Literal["ready", "degraded", "removed"]
TYPE_PREFIX: Final = "org.opendatahub.training.trainer."
PLURAL: Final = "trainers"


def _name_of(cond: Obj) -> str | None:
    kind, status = cond.get("type"), cond.get("status")
    if kind == READY and status == "True":
        return "ready"
    if kind == READY and status == "False" and cond.get("reason") == REMOVED_REASON:
        return "removed"
    if kind == DEGRADED and status == "True":
        return "degraded"
    return None


RULES: Final = generic.Rules(_name_of, ("removed", "degraded", "ready"))


class TrainerLifecycleData(BaseModel):
    """The ``data`` of a Trainer lifecycle event (``datacontenttype: application/json``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              serialize_by_alias=True, title="TrainerLifecycleEvent")

    transition: TransitionName
    kind: str = KIND
    api_version: str = API_VERSION
    name: str
    uid: str
    time: str = Field(description="when the transition happened (RFC 3339)")
    reason: str = ""
    message: str = ""
    phase: str = ""
    app_namespace: str = Field("", description="where the Trainer deploys its operand")
    releases: list[dict[str, Any]] = Field(
        default_factory=list, description="the component releases the status lists")


def source_of(name: str) -> str:
    return f"/apis/{API_VERSION}/{PLURAL}/{name}"


def lifecycle_event(trainer: Obj, t: Transition) -> tuple[Obj, TrainerLifecycleData]:
    """The CloudEvent attributes and data of transition ``t`` of ``trainer`` (wire form)."""
    meta = trainer.get("metadata") or {}
    status = trainer.get("status") or {}
    name, uid = str(meta["name"]), str(meta.get("uid"))
    data = TrainerLifecycleData(
        transition=cast(TransitionName, t.name), name=name, uid=uid, time=t.stamp,
        reason=t.reason, message=t.message, phase=str(status.get("phase") or ""),
        app_namespace=str((trainer.get("spec") or {}).get("appNamespace") or ""),
        releases=list(status.get("releases") or []))
    attributes = {
        "specversion": SPEC_VERSION, "id": event_id(uid, t), "type": TYPE_PREFIX + t.name,
        "source": source_of(name), "subject": name, "time": t.stamp,
        "datacontenttype": "application/json",
    }
    return attributes, data
