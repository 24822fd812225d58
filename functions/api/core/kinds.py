"""What the API and its queue need to know about each job kind, in one table.

The Kubeflow v1 kinds (``kubeflow.org``) and the Trainer v2 ``TrainJob``
(``trainer.kubeflow.org``) keep the same facts in different places: where ``suspend`` lives
and which condition says the job succeeded. Everything else asks a :class:`JobKind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from functions.jobs.core.frameworks import FRAMEWORKS

Obj = dict[str, Any]
TRAINJOB_KIND = "TrainJob"
TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"


@dataclass(frozen=True, slots=True)
class JobKind:
    kind: str
    api_version: str
    suspend_path: tuple[str, ...]  # under ``spec``
    succeeded: str                 # the condition type of a job that succeeded
    failed: str = "Failed"


V1_SHAPE = ("runPolicy", "suspend")
KINDS: tuple[JobKind, ...] = (
    *(JobKind(fw.kind, fw.api_version, V1_SHAPE, "Succeeded") for fw in FRAMEWORKS),
    JobKind(TRAINJOB_KIND, TRAINER_API_VERSION, ("suspend",), "Complete"),
)
BY_KIND: dict[str, JobKind] = {k.kind: k for k in KINDS}
# A kind this table does not know is read as the v1 kinds are.
FALLBACK = JobKind("", "", V1_SHAPE, "Succeeded")


def of(cr: Obj) -> JobKind:
    return BY_KIND.get(str(cr.get("kind")), FALLBACK)


def condition_true(cr: Obj, type_: str) -> bool:
    conditions = (cr.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def succeeded(cr: Obj) -> bool:
    return condition_true(cr, of(cr).succeeded)


def failed(cr: Obj) -> bool:
    return condition_true(cr, of(cr).failed)


def finished(cr: Obj) -> bool:
    return succeeded(cr) or failed(cr)


def suspended(cr: Obj) -> bool:
    value: Any = cr.get("spec") or {}
    for key in of(cr).suspend_path:
        value = value.get(key) if isinstance(value, dict) else None
    return bool(value)


def suspend_patch(kind: str, suspend: bool) -> Obj:
    """The ``spec`` part of a merge patch that sets ``suspend`` on a job of ``kind``."""
    path = BY_KIND.get(kind, FALLBACK).suspend_path
    value: Any = suspend
    for key in reversed(path):
        value = {key: value}
    out: Obj = value
    return out
