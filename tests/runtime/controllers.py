"""A tiny controller for runtime tests: its handlers only record which keys they were given.

Also importable by name (``FUNCTIONS_CONTROLLER_MODULES=tests.runtime.controllers``) for tests
that build apps the way ``serve`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from functions.core.keys import ObjectKey, controller_owner, labelled_parent
from functions.kube import resources
from functions.runtime.registry import (
    ChildMapping,
    Context,
    Controller,
    FunctionName,
    Result,
)

JOB_LABEL = "training.kubeflow.org/job-name"

Behaviour = Callable[[Context, ObjectKey], "Result | None"]


@dataclass
class Calls:
    """Keys each function's handler received, in order (thread-safe)."""

    seen: list[tuple[FunctionName, ObjectKey]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, function: FunctionName, key: ObjectKey) -> None:
        with self.lock:
            self.seen.append((function, key))

    def keys(self, function: FunctionName = "reconcile") -> list[ObjectKey]:
        with self.lock:
            return [key for name, key in self.seen if name == function]


def job_parent(obj: dict[str, object]) -> ObjectKey | None:
    return (controller_owner(obj, "kubeflow.org/v1", "PyTorchJob")
            or labelled_parent(obj, JOB_LABEL, "kubeflow.org/v1", "PyTorchJob"))


def recording_controller(calls: Calls, behaviour: Behaviour | None = None,
                         functions: tuple[FunctionName, ...] = ("reconcile", "gc", "status"),
                         parent: resources.Resource = resources.PYTORCHJOBS,
                         children: tuple[ChildMapping, ...] | None = None) -> Controller:
    """A controller over ``parent`` whose handlers record keys, then run ``behaviour``."""

    def handler_for(function: FunctionName) -> Callable[[Context, ObjectKey], Result | None]:
        def handler(ctx: Context, key: ObjectKey) -> Result | None:
            assert ctx.function == function
            calls.add(function, key)
            return behaviour(ctx, key) if behaviour is not None else None
        return handler

    if children is None:
        children = (ChildMapping("v1", "Pod", job_parent),
                    ChildMapping("v1", "Service", job_parent))
    return Controller(name="recording", parent=parent,
                      handlers={name: handler_for(name) for name in functions},
                      children=children)


CALLS = Calls()
CONTROLLERS = [recording_controller(CALLS)]
