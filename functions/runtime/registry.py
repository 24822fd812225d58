"""How a controller plugs into the runtime: one declaration, one handler signature.

A controller names the kind it owns (its *parent*), the child kinds whose events concern it and
how a child maps to its parent's key, and one handler per function (``reconcile``, ``gc``,
``status``). Every handler has the same signature, ``handler(ctx, key) -> Result | None``: it is
told *which* object may need work, never *what* changed, and reads current state itself.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from functions.core.keys import ObjectKey

if TYPE_CHECKING:
    from functions.kube.cache import CacheSpec
    from functions.kube.client import KubeClient
    from functions.kube.resources import Resource
    from functions.runtime.recorder import EventRecorder

FunctionName = Literal["reconcile", "gc", "status"]
FUNCTIONS: tuple[FunctionName, ...] = ("reconcile", "gc", "status")

Obj = dict[str, Any]


class Reader(Protocol):
    """Where handlers read state: the API server itself, or a watch cache in front of it
    (:class:`functions.kube.cache.CachedReader`) that may lag it a little. Objects it returns
    may be shared: never modify them. Writes always go to ``Context.kube``."""

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None: ...

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None) -> list[Obj]: ...


@dataclass(frozen=True, slots=True)
class Result:
    """What a handler may ask of the runtime: look again after ``requeue_after`` seconds.

    The runtime keeps such timers in memory only; the periodic resync is the guarantee.

    ``wrote``: the resourceVersion the pass's own write left the route's parent at, when that
    write was conditional on the version the pass read (a ``resourceVersion`` precondition).
    The event of that version then says nothing the pass did not know, so the runtime answers
    it without a pass (:class:`~functions.runtime.dispatch.OwnWrites`).
    """

    requeue_after: float | None = None
    wrote: int | None = None


@dataclass
class Context:
    """What a handler gets besides the key: the API client (writes and fresh reads), a reader
    (possibly cached: see :class:`Reader`), an event recorder, a clock."""

    kube: KubeClient
    recorder: EventRecorder
    function: FunctionName
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("functions"))
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    reader: Reader | None = None

    @property
    def read(self) -> Reader:
        return self.reader if self.reader is not None else self.kube

    def now(self) -> datetime:
        return self.clock()


Handler = Callable[[Context, ObjectKey], "Result | None"]


@dataclass(frozen=True, slots=True)
class ChildMapping:
    """Events about ``api_version``/``kind`` objects concern the parent ``to_parent`` returns.

    ``to_parent`` is pure: it sees the child object (as sent in a Resource-mode event, or read
    by the runtime in Reference mode) and returns the parent's key or ``None``. It reads the
    child's metadata only (name, namespace, labels, ownerReferences): after a watch gap it is
    given the :func:`~functions.kube.gaps.reference` an informer journaled.
    """

    api_version: str
    kind: str
    to_parent: Callable[[Obj], ObjectKey | None]


@dataclass(frozen=True)
class Controller:
    name: str
    parent: Resource
    handlers: Mapping[FunctionName, Handler]
    children: tuple[ChildMapping, ...] = ()
    # Per function, what its handlers read often enough to be worth a per-process watch
    # cache (functions.kube.cache); everything else is read from the API server.
    cached: Mapping[FunctionName, tuple[CacheSpec, ...]] = field(default_factory=dict)
    # Per function, whether a change of the parent's status alone (given the journal's
    # reference of the parent, functions.kube.gaps.reference) is an input to its handler, for
    # a sweep's catch-up; a function not named here takes every such change.
    status_inputs: Mapping[FunctionName, Callable[[Obj], bool]] = field(default_factory=dict)

    def owns(self, api_version: str, kind: str) -> bool:
        return kind == self.parent.kind and _group(api_version) == self.parent.group

    def parents_of(self, api_version: str, kind: str, obj: Obj) -> list[ObjectKey]:
        """Keys of parents that an event about ``obj`` concerns (empty if none)."""
        keys: list[ObjectKey] = []
        for child in self.children:
            if child.kind == kind and _group(child.api_version) == _group(api_version):
                key = child.to_parent(obj)
                if key is not None:
                    keys.append(key)
        return keys


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# Modules that define a module-level ``CONTROLLERS: list[Controller]``.
CONTROLLER_MODULES: tuple[str, ...] = (
    "functions.trainer.controller",
    "functions.jobs.controller",
    "functions.jobs.trainjobs",
    "functions.api.queue_controller",
)


def load_controllers(modules: tuple[str, ...] = CONTROLLER_MODULES) -> list[Controller]:
    controllers: list[Controller] = []
    for name in modules:
        module = importlib.import_module(name)
        controllers.extend(module.CONTROLLERS)
    return controllers
