"""Recorded job CRs and hand-built observed pods for the training-job tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from functions.jobs.core.model import Job, parse_job

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
Obj = dict[str, Any]


def load(name: str) -> Obj:
    with (DATA / name).open() as handle:
        data = yaml.safe_load(handle)
    assert isinstance(data, dict)
    return data


def job(name: str, **changes: Any) -> Job:
    return parse_job(with_changes(load(name), **changes))


def with_changes(obj: Obj, *, spec: Obj | None = None, status: Obj | None = None,
                 annotations: dict[str, str] | None = None) -> Obj:
    """A copy of ``obj`` with ``spec`` deep-merged, ``status`` replaced, annotations added."""
    out = copy.deepcopy(obj)
    if spec:
        _merge(out.setdefault("spec", {}), spec)
    if status is not None:
        out["status"] = status
    if annotations:
        out["metadata"].setdefault("annotations", {}).update(annotations)
    return out


def _merge(into: Obj, extra: Obj) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def stamp(delta_seconds: float = 0) -> str:
    return (NOW + timedelta(seconds=delta_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(owner: Job, replica_type: str, index: int, phase: str = "Running", *,
        exit_code: int | None = None, container: str | None = None,
        deleting: bool = False, restart_count: int = 0, role: str | None = None,
        uid: str | None = None) -> Obj:
    """A pod as the API server would return it for one replica of ``owner``."""
    name = f"{owner.name}-{replica_type.lower()}-{index}"
    labels = {"training.kubeflow.org/operator-name": owner.framework.operator_name,
              "training.kubeflow.org/job-name": owner.name,
              "training.kubeflow.org/replica-type": replica_type.lower(),
              "training.kubeflow.org/replica-index": str(index)}
    if role:
        labels["training.kubeflow.org/job-role"] = role
    meta: Obj = {"name": name, "namespace": owner.namespace, "uid": uid or f"uid-{name}",
                 "labels": labels,
                 "ownerReferences": [{"apiVersion": owner.api_version, "kind": owner.kind,
                                      "name": owner.name, "uid": owner.uid,
                                      "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = stamp()
    status: Obj = {"phase": phase}
    cname = container or owner.framework.default_container
    state: Obj = {"running": {}} if phase == "Running" else {}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code}}
    status["containerStatuses"] = [{"name": cname, "restartCount": restart_count,
                                    "state": state}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}


def condition(type_: str, status: str = "True", reason: str = "", message: str = "",
              at: str | None = None) -> Obj:
    when = at or stamp(-60)
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastUpdateTime": when, "lastTransitionTime": when}


def summary(conditions: list[Any]) -> list[tuple[str, str, str]]:
    """(type, status, reason) of each condition, in order."""
    out = []
    for cond in conditions:
        data = cond if isinstance(cond, dict) else cond.model_dump(by_alias=True)
        out.append((data["type"], data["status"], data["reason"]))
    return out
