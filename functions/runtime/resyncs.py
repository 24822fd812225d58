"""A function's passes over every parent of its kinds: the resync tick, the resync after an
ApiServerSource adapter's restart, and a wake (:mod:`functions.core.wakes`).

Each reads the function's watch caches, as a Go operator's informer resync does, once they
have filled (a replica just started for the tick waits up to :data:`CACHE_SYNC_SECONDS`; a
kind whose cache is still filling is read from the API server). The caches stand on their own
watches, not on the events the Broker delivers, so they hold what a lost event would have
brought; a cache whose watch was reset lists again and hands what changed around the reset to
the functions (:mod:`functions.kube.gaps`). Reading every job fresh instead cost four requests
per job, 159 s for reconcile at 5,000 jobs: longer than the Broker waits for an answer.

Only one such pass runs at a time in a process (a second is answered ``busy``); each runs
its routes through the dispatcher, with its coalescing and key locks, on a bounded pool.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from functions.core.errors import TemporaryError
from functions.core.event_sources import SOURCE_NAME_LABEL, source_name
from functions.core.event_sources import after_adapter_event as decide
from functions.core.events import ApiEvent
from functions.core.keys import ObjectKey
from functions.kube import resources
from functions.kube.client import ApiError
from functions.runtime.outcomes import BUG_RETRY_AFTER, BUSY_RETRY_AFTER, Outcome, Route, combine

if TYPE_CHECKING:
    from functions.runtime.dispatch import Dispatcher

log = logging.getLogger(__name__)
# How long a pass over every parent waits for the watch caches to fill (in a replica Knative
# has just started for it); passes over kinds still filling read the API server.
CACHE_SYNC_SECONDS = 30.0


def after_adapter_event(dispatcher: Dispatcher, event: ApiEvent) -> Outcome:
    """An event about an ApiServerSource adapter's pod: once a stopped adapter's successor
    has settled, resync what the gap may have lost (:mod:`functions.core.event_sources`)."""
    assert event.object is not None
    pod = event.object
    name, namespace = source_name(pod), str(pod["metadata"].get("namespace") or "")
    try:
        pods = dispatcher.kube().list(resources.PODS, namespace,
                                      label_selector=f"{SOURCE_NAME_LABEL}={name}")
    except TemporaryError as exc:
        return Outcome("retry", str(exc), exc.retry_after, 0, "temporary")
    decision = decide(event.operation, pod, pods, datetime.now(UTC),
                      settle=dispatcher.source_settle)
    if decision.action == "ignore":
        return Outcome("ignored", decision.reason)
    if decision.action == "wait":
        return Outcome("retry", decision.reason, decision.wait_seconds, 0, "source-restart")
    log.info("%s resync: %s", dispatcher.function, decision.reason)
    return resync(dispatcher)


def resync(dispatcher: Dispatcher) -> Outcome:
    """The safety net: every parent passed over, whatever events were lost."""
    return pass_all(dispatcher, "resync")


def wake(dispatcher: Dispatcher) -> Outcome:
    """A wake of this function: a due time has come that the process which asked for it may
    not have lived to see. Every parent is passed over (each pass finds what is due from the
    object and asks for what is still ahead, which makes the next wake), reading the watch
    caches once they have filled; then the wakes that have fired are deleted. A pass that
    fails leaves them: the Broker retries the delivery."""
    log.info("%s wake: passing over every parent", dispatcher.function)
    outcome = pass_all(dispatcher, "wake")
    if not outcome.retriable and dispatcher.wakes is not None:
        dispatcher.wakes.fired()
    return outcome


def pass_all(dispatcher: Dispatcher, name: str) -> Outcome:
    """List every parent of the function's kinds (all namespaces) and run each, reading the
    caches once they have filled."""
    if not dispatcher.whole_pass.acquire(blocking=False):
        return Outcome("busy", "a resync or wake is already running", BUSY_RETRY_AFTER)
    try:
        if dispatcher.synced is not None and not dispatcher.synced(CACHE_SYNC_SECONDS):
            log.info("%s %s: the watch caches have not filled in %.0f s; passes over the "
                     "kinds still filling read the API server", dispatcher.function, name,
                     CACHE_SYNC_SECONDS)
        outcomes: list[Outcome] = []
        routes: list[Route] = []
        for controller in dispatcher.controllers:
            try:
                items = dispatcher.kube().list(controller.parent)
            except TemporaryError as exc:
                outcomes.append(Outcome("retry", str(exc), exc.retry_after, 0, "temporary"))
                continue
            except ApiError as exc:
                if exc.not_found:
                    log.info("%s is not served; nothing to %s", controller.parent.kind, name)
                    continue
                log.error("cannot list %s: %s", controller.parent.kind, exc)
                outcomes.append(Outcome("retry", str(exc), BUG_RETRY_AFTER, 0, "bug"))
                continue
            routes.extend(Route(controller, ObjectKey.of(item)) for item in items)
        if routes:
            with ThreadPoolExecutor(max_workers=dispatcher.resync_workers,
                                    thread_name_prefix=f"{name}-{dispatcher.function}") as pool:
                outcomes.extend(pool.map(dispatcher.run, routes))
        return combine(outcomes) if outcomes else Outcome("ok")
    finally:
        dispatcher.whole_pass.release()
