"""In-memory "look again in N seconds" timers: best effort, lost with the process (the wakes
and the periodic resync stand behind them: :mod:`functions.core.wakes`). One pending timer per
route, the earliest request wins.

One thread waits for the earliest due time of a heap, and due routes run on a small pool (both
only while some timer is pending): a cluster of thousands of jobs each with a TTL or a deadline
ahead costs a heap entry each, not a thread each.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from functions.runtime.outcomes import Outcome, Route, RouteId, route_id

log = logging.getLogger(__name__)


class RequeueTimers:
    """Runs ``run(route)`` once each route's due time has come; a pass that fails for a
    transient reason (``cause == "temporary"``) is scheduled again after its ``retry_after``."""

    def __init__(self, run: Callable[[Route], Outcome], *, limit: int = 100_000,
                 workers: int = 4) -> None:
        self.run = run
        self.limit = limit
        self.workers = workers
        self._due: dict[RouteId, tuple[float, Route]] = {}
        self._heap: list[tuple[float, int, RouteId]] = []
        self._order = itertools.count()   # ties in the heap never compare route ids
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def schedule(self, route: Route, delay: float) -> None:
        ident = route_id(route)
        due = time.monotonic() + max(0.0, delay)
        with self._changed:
            current = self._due.get(ident)
            if current is not None and current[0] <= due:
                return
            if current is None and len(self._due) >= self.limit:
                log.warning("too many requeue timers; %s relies on its wake or the next resync",
                            route.key)
                return
            self._due[ident] = (due, route)
            heapq.heappush(self._heap, (due, next(self._order), ident))
            if self._thread is None:
                self._thread = threading.Thread(target=self._wait, name="requeue-timers",
                                                daemon=True)
                self._thread.start()
            self._changed.notify()

    def pending(self) -> int:
        with self._changed:
            return len(self._due)

    def cancel_all(self) -> None:
        with self._changed:
            self._due.clear()
            self._heap.clear()
            self._changed.notify()

    def _wait(self) -> None:
        """The waiting thread: it ends, with its pool once its passes are done, when no timer
        is left, and the next :meth:`schedule` starts another."""
        while True:
            with self._changed:
                if not self._heap:
                    self._thread = None
                    if self._pool is not None:
                        self._pool.shutdown(wait=False)
                        self._pool = None
                    return
                route = self._next_due()
                if route is None:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="requeue")
                self._pool.submit(self._fire, route)

    def _next_due(self) -> Route | None:
        """The route whose time has come (lock held, heap not empty), or ``None`` after
        waiting for the earliest due time or a change, or for an entry a later request
        replaced or a cancel left."""
        due, _, ident = self._heap[0]
        wait = due - time.monotonic()
        if wait > 0:
            self._changed.wait(wait)
            return None
        heapq.heappop(self._heap)
        current = self._due.get(ident)
        if current is None or current[0] != due:
            return None   # cancelled, or replaced by an earlier request (its own entry)
        del self._due[ident]
        return current[1]

    def _fire(self, route: Route) -> None:
        outcome = self.run(route)
        if outcome.cause == "temporary":
            self.schedule(route, outcome.retry_after)
