"""A per-process, time-bounded memo of the conflicts of one scope.

Handlers that run on every event of a burst (the training-job controllers) cannot afford the
reads of :func:`functions.platform.coexistence.observe` (Deployments across namespaces,
DataScienceClusters, CRDs) per event. The memo reads them at most once per ``ttl`` seconds
per process and answers from memory in between, so a steady state costs no API request; an
admin's change (the platform's operator installed or removed) is seen up to ``ttl`` seconds
late.

A read this identity may not make, or of an API the cluster does not serve, already reads as
"nothing there" (the reader's rule). A read that fails otherwise keeps the last answer, if
there is one, and is tried again after ``retry`` seconds; without a last answer the failure is
raised as a :class:`~functions.core.errors.TemporaryError`, so the delivery is retried rather
than acted on without knowing.

One lock serialises the reads: while one thread reads, the others of the process wait for
its answer instead of reading too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from functions.core.errors import TemporaryError
from functions.kube.client import ApiError, KubeClient
from functions.platform.core.coexistence import Conflict, Platform, Scope, blocking

log = logging.getLogger(__name__)


class ConflictMemo:
    """The conflicts of ``scope`` as ``observe`` last read them, for at most ``ttl`` seconds
    (``ttl`` and ``retry`` may be changed at any time; they apply from the next call)."""

    def __init__(self, scope: Scope, observe: Callable[[KubeClient], Platform],
                 ttl: float = 30.0, *, retry: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scope = scope
        self.ttl = ttl
        self.retry = retry
        self._observe = observe
        self._clock = clock
        self._lock = threading.Lock()
        self._found: tuple[Conflict, ...] | None = None
        self._attempted = 0.0  # when the last read was tried
        self._failed = False  # whether it failed (the answer is older)

    def conflicts(self, kube: KubeClient) -> tuple[Conflict, ...]:
        """The conflicts now, from memory while the last read is younger than ``ttl``."""
        with self._lock:
            now = self._clock()
            wait = self.retry if self._failed else self.ttl
            if self._found is not None and now - self._attempted < wait:
                return self._found
            self._attempted = now
            try:
                platform = self._observe(kube)
            except (ApiError, TemporaryError) as exc:
                if self._found is None:
                    raise TemporaryError(f"cannot read the platform's controllers: {exc}",
                                         retry_after=self.retry) from exc
                log.warning("cannot read the platform's controllers, keeping the last "
                            "answer for %.0f s: %s", self.retry, exc)
                self._failed = True
                return self._found
            self._failed = False
            self._found = tuple(blocking(platform, self.scope))
            return self._found

    def forget(self) -> None:
        """Read again on the next call."""
        with self._lock:
            self._found = None
            self._failed = False
