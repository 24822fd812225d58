"""How a function process is put together: which controllers it loads, what its watch cache
holds, and the settings read from its environment. Importing it costs nothing (a cold Knative
pod imports the app before it forks); what it needs is imported where used."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from functions.kube.cache import CacheSpec
    from functions.kube.resources import Resource
    from functions.runtime.registry import Controller, FunctionName


def controller_modules() -> tuple[str, ...]:
    """``FUNCTIONS_CONTROLLER_MODULES`` (comma-separated) overrides the registry's list."""
    from functions.runtime.registry import CONTROLLER_MODULES

    override = os.environ.get("FUNCTIONS_CONTROLLER_MODULES")
    if override is None:
        return CONTROLLER_MODULES
    return tuple(name.strip() for name in override.split(",") if name.strip())


def source_settle() -> float:
    """``FUNCTIONS_EVENT_SOURCE_SETTLE_SECONDS`` overrides how long a restarted adapter runs
    before the resync that catches up on its gap (:mod:`functions.core.event_sources`)."""
    from functions.core.event_sources import SETTLE_SECONDS

    return float(os.environ.get("FUNCTIONS_EVENT_SOURCE_SETTLE_SECONDS", SETTLE_SECONDS))


def sweep_seconds() -> float:
    """How often the informers sweep their journals for changes no event brought
    (:mod:`functions.kube.gaps`); ``FUNCTIONS_SWEEP_SECONDS`` overrides it (0: never)."""
    from functions.kube.gaps import SWEEP_SECONDS

    return float(os.environ.get("FUNCTIONS_SWEEP_SECONDS", SWEEP_SECONDS))


def event_hold() -> float:
    """The longest a ``Normal`` Event waits for the function to be idle
    (:mod:`functions.runtime.recorder`); ``FUNCTIONS_EVENT_HOLD_SECONDS`` overrides it."""
    from functions.runtime.recorder import HOLD_SECONDS

    return float(os.environ.get("FUNCTIONS_EVENT_HOLD_SECONDS", HOLD_SECONDS))


def child_caches(controllers: Sequence[Controller], specs: Sequence[CacheSpec],
                 unsent: set[str]) -> dict[tuple[str, str], list[Resource]]:
    """Per parent (group, kind), the cached resources of its children of the ``unsent``
    kinds."""
    found: dict[tuple[str, str], list[Resource]] = {}
    for controller in controllers:
        kinds = {(child.api_version.rpartition("/")[0], child.kind)
                 for child in controller.children if child.kind in unsent}
        cached = [s.resource for s in specs if (s.resource.group, s.resource.kind) in kinds]
        if cached:
            found[(controller.parent.group, controller.parent.kind)] = cached
    return found


def cache_specs(controllers: Sequence[Controller],
                functions: Sequence[FunctionName]) -> list[CacheSpec]:
    """The cached resources of these functions, one spec per resource (the first declared);
    the informers of parent kinds tell changes of the status alone from the others."""
    found: dict[tuple[str, str], CacheSpec] = {}
    for controller in controllers:
        for function in functions:
            for spec in controller.cached.get(function, ()):
                found.setdefault((spec.resource.group, spec.resource.plural), spec)
    parents = {(c.parent.group, c.parent.plural) for c in controllers}
    return [replace(spec, status_changes=True) if ident in parents else spec
            for ident, spec in found.items()]


