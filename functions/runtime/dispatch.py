"""From one parsed event to handler calls: which keys need work, run them safely, one verdict.

An event is only a hint that a key may need work. A parent's event names its own key; a
child's event (a Pod, a Service, a Deployment) names its parent's key through the controller's
:class:`~functions.runtime.registry.ChildMapping` (in Reference mode the child is read first,
since the event carries no object). A resync tick lists every parent of the function's kinds
and runs each with bounded concurrency.

Runs of one route (a controller's handler for one key) are serialised and coalesced within the
process: a delivery that arrives while a pass for its route is running waits for the next pass,
which starts after it arrived and therefore covers it, and answers with that pass's outcome.
A burst of events about one job (its pods starting one by one) thus costs a pass or two, not
one per event, and no delivery is answered before a pass that saw its change has finished.
Across processes (replicas) nothing is serialised: handlers are written to be safe when they
run concurrently on one key (preconditions, names that make a second create a 409). Every run
ends in an
:class:`Outcome` the HTTP layer maps to a status: ``ok``/``ignored`` (2xx), ``invalid`` (4xx,
never retried), ``retry``/``busy`` (503/429 with ``Retry-After``, so the Broker retries).
A handler bug (an unexpected exception) is logged with its traceback and answered as
``retry`` with a long ``Retry-After``: the Broker retries a bounded number of times and then
dead-letters the event, which keeps the evidence, where a 500 would simply be dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from functions.core.errors import PermanentError, TemporaryError
from functions.core.events import ApiEvent
from functions.core.keys import ObjectKey
from functions.kube.client import ApiError
from functions.runtime.registry import Context, Controller, FunctionName, Obj, Reader, Result

if TYPE_CHECKING:
    from functions.kube.client import KubeClient
    from functions.runtime.recorder import EventRecorder

log = logging.getLogger(__name__)

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


class Observer(Protocol):
    """Receives one call per handler run (for metrics)."""

    def handler_finished(self, function: str, controller: str, seconds: float,
                         outcome: str) -> None: ...


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


class KeyLocks:
    """One lock per key, created on demand and dropped when nobody holds or awaits it. Shared
    by the dispatchers of one process that serves several functions (``serve all``), so their
    handlers take turns on a key there as they would on a quiet cluster; separate processes
    run them concurrently, which the handlers are written for."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str, str, str], tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: ObjectKey, timeout: float) -> Iterator[bool]:
        ident = _lock_id(key)
        with self._guard:
            lock, users = self._locks.get(ident, (threading.Lock(), 0))
            self._locks[ident] = (lock, users + 1)
        acquired = lock.acquire(timeout=timeout)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()
            with self._guard:
                lock, users = self._locks[ident]
                if users <= 1:
                    del self._locks[ident]
                else:
                    self._locks[ident] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


RouteId = tuple[str, tuple[str, str, str, str]]


def route_id(route: Route) -> RouteId:
    return (route.controller.name, _lock_id(route.key))


@dataclass
class _Runs:
    """Bookkeeping of one route: requests are numbered; a pass covers every request numbered
    up to the count when it started."""

    wake: threading.Condition
    requested: int = 0
    completed: int = 0
    running: bool = False
    users: int = 0
    fresh: bool = False   # a waiting request wants the next pass to read fresh state
    outcome: Outcome | None = None


class Coalescer:
    """At most one pass per route at a time; requests that arrive meanwhile share the next."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._routes: dict[RouteId, _Runs] = {}

    def run(self, ident: RouteId, attempt: Callable[[bool], Outcome], timeout: float, *,
            fresh: bool = False) -> Outcome:
        """``attempt(fresh)`` (which must not raise) once for this request and any that arrive
        while it runs, or the outcome of a pass that started after this request arrived. A
        pass reads fresh state when any request it covers asked for that."""
        with self._guard:
            runs = self._routes.get(ident)
            if runs is None:
                runs = self._routes[ident] = _Runs(threading.Condition(self._guard))
            runs.requested += 1
            runs.users += 1
            runs.fresh = runs.fresh or fresh
            ticket = runs.requested
            deadline = time.monotonic() + timeout
            while runs.running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._leave(ident, runs)
                    return Outcome("busy", f"{ident[1][3]} is busy", BUSY_RETRY_AFTER)
                runs.wake.wait(remaining)
                if runs.completed >= ticket and runs.outcome is not None:
                    self._leave(ident, runs)
                    return runs.outcome
            runs.running = True
            covers = runs.requested
            fresh, runs.fresh = runs.fresh, False
        outcome = Outcome("retry", "the pass was interrupted", BUG_RETRY_AFTER, 0, "bug")
        try:
            outcome = attempt(fresh)
        finally:
            with self._guard:
                runs.running = False
                runs.completed = covers
                runs.outcome = outcome
                runs.wake.notify_all()
                self._leave(ident, runs)
        return outcome

    def _leave(self, ident: RouteId, runs: _Runs) -> None:
        runs.users -= 1
        if runs.users == 0 and not runs.running:
            del self._routes[ident]

    def __len__(self) -> int:
        with self._guard:
            return len(self._routes)


@dataclass
class RequeueTimers:
    """In-memory "look again in N seconds" timers: best effort, lost on restart (the periodic
    resync is the guarantee). One pending timer per route; the earliest request wins."""

    run: Callable[[Route], Outcome]
    limit: int = 10_000
    _timers: dict[RouteId, tuple[float, threading.Timer]] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def schedule(self, route: Route, delay: float) -> None:
        ident = route_id(route)
        due = time.monotonic() + delay
        with self._guard:
            current = self._timers.get(ident)
            if current is not None:
                if current[0] <= due:
                    return
                current[1].cancel()
            elif len(self._timers) >= self.limit:
                log.warning("too many requeue timers; %s relies on the next resync", route.key)
                return
            timer = threading.Timer(max(0.0, delay), self._fire, args=(ident, route))
            timer.daemon = True
            self._timers[ident] = (due, timer)
            timer.start()

    def _fire(self, ident: RouteId, route: Route) -> None:
        with self._guard:
            self._timers.pop(ident, None)
        outcome = self.run(route)
        if outcome.cause == "temporary":
            self.schedule(route, outcome.retry_after)

    def pending(self) -> int:
        with self._guard:
            return len(self._timers)

    def cancel_all(self) -> None:
        with self._guard:
            for _, timer in self._timers.values():
                timer.cancel()
            self._timers.clear()


class Dispatcher:
    """Routes events of one function (``reconcile``, ``gc`` or ``status``) to handlers."""

    def __init__(self, function: FunctionName, controllers: Sequence[Controller],
                 kube: Callable[[], KubeClient], recorder: Callable[[], EventRecorder], *,
                 reader: Callable[[], Reader] | None = None, locks: KeyLocks | None = None,
                 observer: Observer | None = None, resync_workers: int = 4,
                 lock_timeout: float = 60.0) -> None:
        self.function: FunctionName = function
        self.controllers = [c for c in controllers if function in c.handlers]
        self.kube = kube
        self.reader = reader
        self.recorder = recorder
        self.runs = Coalescer()
        self.locks = locks
        self.observer = observer
        self.resync_workers = resync_workers
        self.lock_timeout = lock_timeout
        self.timers = RequeueTimers(self.run)
        self._resync_guard = threading.Lock()

    # -- routing ----------------------------------------------------------------------------

    def routes(self, event: ApiEvent) -> list[Route]:
        """The (controller, key) pairs an object event concerns (empty for a resync)."""
        ref = event.ref
        if ref is None:
            return []
        found: list[Route] = []
        child: Obj | None = event.object
        fetched = False
        for controller in self.controllers:
            if controller.owns(ref.api_version, ref.kind):
                found.append(Route(controller, ref.key()))
                continue
            if not _has_child_kind(controller, ref.api_version, ref.kind):
                continue
            if child is None and not fetched:
                fetched = True
                child = self._read_child(event)
            if child is not None:
                found.extend(Route(controller, key)
                             for key in controller.parents_of(ref.api_version, ref.kind, child))
        unique: dict[RouteId, Route] = {}
        for route in found:
            unique.setdefault(route_id(route), route)
        return list(unique.values())

    def _read_child(self, event: ApiEvent) -> Obj | None:
        """Reference mode: the event names the child only, so read it (``None`` if gone)."""
        assert event.ref is not None
        ref = event.ref
        kube = self.kube()
        try:
            resource = kube.resource_for(ref.api_version, ref.kind)
        except ApiError as exc:
            log.info("cannot resolve %s %s: %s", ref.api_version, ref.kind, exc)
            return None
        obj = kube.get(resource, ref.name, ref.namespace or None)
        if obj is None:
            log.info("%s is gone; its parent is left to the next resync", ref.key())
        return obj

    # -- running ------------------------------------------------------------------------------

    def handle(self, event: ApiEvent, *, fresh: bool = False) -> Outcome:
        """Run what ``event`` concerns; ``fresh``: read from the API server, not the reader
        (the reader has not caught up with this event)."""
        if event.operation == "resync":
            return self.resync()
        try:
            routes = self.routes(event)
        except TemporaryError as exc:
            return Outcome("retry", str(exc), exc.retry_after, 0, "temporary")
        if not routes:
            return Outcome("ignored", "no controller handles this object")
        return combine([self.run(route, fresh=fresh) for route in routes])

    def run(self, route: Route, *, fresh: bool = False) -> Outcome:
        """Run one handler pass for ``route`` (or share one, see :class:`Coalescer`); never
        raises."""
        def attempt(fresh: bool) -> Outcome:
            if self.locks is None:
                return self._attempt_twice(route, fresh)
            with self.locks.hold(route.key, self.lock_timeout) as acquired:
                if not acquired:
                    return Outcome("busy", f"{route.key} is busy", BUSY_RETRY_AFTER)
                return self._attempt_twice(route, fresh)

        return self.runs.run(route_id(route), attempt, self.lock_timeout, fresh=fresh)

    def run_fresh(self, route: Route) -> Outcome:
        return self.run(route, fresh=True)

    def _attempt_twice(self, route: Route, fresh: bool) -> Outcome:
        """A conflict is retried at once, reading fresh state: the second attempt sees what
        won."""
        outcome = self._attempt(route, fresh)
        if outcome.cause == "conflict":
            outcome = self._attempt(route, True)
        return outcome

    def _attempt(self, route: Route, fresh: bool) -> Outcome:
        controller, key = route.controller, route.key
        handler = controller.handlers[self.function]
        started = time.perf_counter()
        outcome: Outcome
        try:
            kube = self.kube()
            ctx = Context(kube=kube, recorder=self.recorder(), function=self.function,
                          log=logging.getLogger(f"functions.{controller.name}"),
                          reader=kube if fresh or self.reader is None else self.reader())
            result = handler(ctx, key)
        except TemporaryError as exc:
            outcome = Outcome("retry", f"{key}: {exc}", exc.retry_after, 1, "temporary")
        except PermanentError as exc:
            outcome = Outcome("invalid", f"{key}: {exc}", 0.0, 1)
        except ApiError as exc:
            if exc.conflict:
                outcome = Outcome("retry", f"{key}: conflict survived a retry: {exc}",
                                  CONFLICT_RETRY_AFTER, 1, "conflict")
            else:
                log.exception("%s %s handler failed on %s", controller.name, self.function, key)
                outcome = Outcome("retry", f"{key}: handler failed: {exc}", BUG_RETRY_AFTER, 1,
                                  "bug")
        except Exception as exc:
            log.exception("%s %s handler failed on %s", controller.name, self.function, key)
            outcome = Outcome("retry", f"{key}: handler failed: {type(exc).__name__}: {exc}",
                              BUG_RETRY_AFTER, 1, "bug")
        else:
            outcome = Outcome("ok", "", 0.0, 1)
            if isinstance(result, Result) and result.requeue_after is not None:
                self.timers.schedule(route, result.requeue_after)
        if self.observer is not None:
            self.observer.handler_finished(self.function, controller.name,
                                           time.perf_counter() - started, _label(outcome))
        return outcome

    # -- resync -------------------------------------------------------------------------------

    def resync(self) -> Outcome:
        """List every parent of this function's kinds (all namespaces) and run each."""
        if not self._resync_guard.acquire(blocking=False):
            return Outcome("busy", "a resync is already running", BUSY_RETRY_AFTER)
        try:
            outcomes: list[Outcome] = []
            routes: list[Route] = []
            for controller in self.controllers:
                try:
                    items = self.kube().list(controller.parent)
                except TemporaryError as exc:
                    outcomes.append(Outcome("retry", str(exc), exc.retry_after, 0, "temporary"))
                    continue
                except ApiError as exc:
                    if exc.not_found:
                        log.info("%s is not served; nothing to resync", controller.parent.kind)
                        continue
                    log.error("cannot list %s: %s", controller.parent.kind, exc)
                    outcomes.append(Outcome("retry", str(exc), BUG_RETRY_AFTER, 0, "bug"))
                    continue
                routes.extend(Route(controller, ObjectKey.of(item)) for item in items)
            if routes:
                with ThreadPoolExecutor(max_workers=self.resync_workers,
                                        thread_name_prefix=f"resync-{self.function}") as pool:
                    # The safety net reads fresh state: it must not depend on the cache.
                    outcomes.extend(pool.map(self.run_fresh, routes))
            return combine(outcomes) if outcomes else Outcome("ok")
        finally:
            self._resync_guard.release()


def _label(outcome: Outcome) -> str:
    return outcome.cause or outcome.kind


def _has_child_kind(controller: Controller, api_version: str, kind: str) -> bool:
    group = api_version.rpartition("/")[0]
    return any(child.kind == kind and child.api_version.rpartition("/")[0] == group
               for child in controller.children)
