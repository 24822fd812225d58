"""What one handler pass ends in, and which work a pass is: the vocabulary shared by the
dispatcher (:mod:`functions.runtime.dispatch`), the way passes are run
(:mod:`functions.runtime.passes`) and the HTTP answer (:mod:`functions.runtime.endpoint`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from functions.core.keys import ObjectKey
from functions.runtime.registry import Controller

OutcomeKind = Literal["ok", "ignored", "invalid", "retry", "busy"]
BUG_RETRY_AFTER = 30.0
BUSY_RETRY_AFTER = 5.0
CONFLICT_RETRY_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class Route:
    """One unit of work: run ``controller``'s handler for ``key``."""

    controller: Controller
    key: ObjectKey


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    detail: str = ""
    retry_after: float = 0.0
    runs: int = 0
    cause: str = ""  # for retries: "temporary", "conflict" or "bug" (metrics, requeue policy)

    @property
    def retriable(self) -> bool:
        return self.kind in ("retry", "busy")


def combine(outcomes: Sequence[Outcome]) -> Outcome:
    """One verdict for several runs: any retry wins (the Broker must come back), then any
    invalid input, else success."""
    runs = sum(o.runs for o in outcomes)
    waiting = [o for o in outcomes if o.retriable]
    if waiting:
        kind: OutcomeKind = "busy" if all(o.kind == "busy" for o in waiting) else "retry"
        causes = sorted({o.cause for o in waiting if o.cause})
        return Outcome(kind, "; ".join(o.detail for o in waiting if o.detail),
                       max(o.retry_after for o in waiting), runs, ",".join(causes))
    invalid = [o for o in outcomes if o.kind == "invalid"]
    if invalid:
        return Outcome("invalid", "; ".join(o.detail for o in invalid), 0.0, runs)
    if any(o.kind == "ok" for o in outcomes):
        return Outcome("ok", "", 0.0, runs)
    return Outcome("ignored", "no controller handles this object", 0.0, runs)


def _lock_id(key: ObjectKey) -> tuple[str, str, str, str]:
    """Versions of one kind name the same object, so a route ignores the version."""
    return (key.api_version.rpartition("/")[0], key.kind, key.namespace, key.name)


RouteId = tuple[str, tuple[str, str, str, str]]


def route_id(route: Route) -> RouteId:
    return (route.controller.name, _lock_id(route.key))
