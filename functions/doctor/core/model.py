"""What the doctor reads (a :class:`Snapshot`) and what it reports (a :class:`Finding` per
check).

A snapshot holds plain data the reader gathered; a field left ``None`` was not read (the
identity running the doctor may not, or the API does not exist), and checks say so instead of
guessing.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from functions.platform.core.coexistence import Platform

Obj = dict[str, Any]


class Status(StrEnum):
    PASS = "pass"  # noqa: S105 (a verdict, not a secret)
    WARN = "warn"  # works, with a caveat the admin should know
    FAIL = "fail"  # will not work as installed: the exit code says so
    SKIP = "skip"  # nothing to check yet (e.g. before the install)


class Finding(BaseModel):
    """One check's verdict: what was found, and (unless it passed) what to change."""

    model_config = ConfigDict(frozen=True)

    check: str
    status: Status
    summary: str
    fix: str = ""
    details: tuple[str, ...] = ()


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Workload(_Frozen):
    """A Deployment of a Knative system namespace: its name, labels and readiness."""

    namespace: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    ready: bool = False

    @classmethod
    def from_object(cls, obj: Obj) -> Workload:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        wanted = (obj.get("spec") or {}).get("replicas", 1)
        return cls(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                   ready=int(status.get("readyReplicas") or 0) >= int(wanted or 0))


class Component(_Frozen):
    """A Knative component (Serving or Eventing) as installed."""

    deployments: tuple[Workload, ...] = ()
    # status.version of the operator's KnativeServing/KnativeEventing CR, when there is one.
    operator_version: str | None = None
    # config-features of the component's namespace (None: not readable or absent).
    features: dict[str, str] | None = None


class AccessReview(_Frozen):
    """A SubjectAccessReview's answer for one expectation (see :mod:`.access`)."""

    function: str
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    expected: bool = True
    allowed: bool = False

    def describe(self) -> str:
        target = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'} {target}{named}{where}"


class Snapshot(_Frozen):
    """Everything the checks judge."""

    namespace: str
    # "group/version/plural" of every resource discovery served, for the groups the doctor asked.
    served: frozenset[str] = frozenset()
    serving: Component = Field(default_factory=Component)
    eventing: Component = Field(default_factory=Component)
    # config-br-defaults data (the default Broker class), if readable.
    broker_defaults: dict[str, str] | None = None
    # ConfigMaps that exist, as "namespace/name" (Broker configs).
    configmaps: frozenset[str] = frozenset()
    # Labels of the Knative system namespaces that exist.
    namespaces: dict[str, dict[str, str]] = Field(default_factory=dict)
    network_policies: tuple[Obj, ...] | None = None
    platform: Platform = Field(default_factory=Platform)
    # ServiceAccounts of our namespace (None: not readable).
    service_accounts: frozenset[str] | None = None
    access: tuple[AccessReview, ...] = ()
    # Our installed objects by kind (Broker, Trigger, ApiServerSource, PingSource, Service for
    # Knative Services, Trainer).
    installed: dict[str, tuple[Obj, ...]] = Field(default_factory=dict)

    def serves(self, api_version: str, plural: str) -> bool:
        return f"{api_version}/{plural}" in self.served

    def objects(self, kind: str) -> tuple[Obj, ...]:
        return self.installed.get(kind, ())
