"""The process's side of the wakes (:mod:`functions.core.wakes`): makes a function's wake
PingSources when its passes ask for due times further off than the process may live, and
deletes those that have fired.

A wake is a safety net under the process's own timer, never instead of it: making one that
fails (an API error, Knative's sources not served, no right to make them) is logged and the
pass succeeds all the same; the timer and the periodic resync still stand. Where the cluster
does not serve PingSources (or refuses this identity them) the process stops trying.

Which wakes exist is listed once (on the first due time that needs one) and then kept in
memory: this process adds what it makes, and treats a wake whose minute has passed as gone.
Another replica's wakes made since are unknown here, which costs at most a second wake for a
minute that one already covers; a wake's pass over every parent asks again for every due time
still ahead, so none is lost to that.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client import Counter

from functions.core import wakes
from functions.core.errors import TemporaryError
from functions.kube.client import ApiError
from functions.kube.resources import PINGSOURCES
from functions.runtime.lease import pod_namespace
from functions.runtime.metrics import register_process_collector

if TYPE_CHECKING:
    from functions.kube.client import KubeClient

log = logging.getLogger(__name__)

FIELD_MANAGER = "odh-training-wakes"
BROKER_ENV = "WAKE_BROKER"
NAMESPACE_ENV = "WAKE_NAMESPACE"
SWITCH_ENV = "WAKES"
DEFAULT_BROKER = "odh-training"

WAKES = Counter("odh_training_wakes", "Wake PingSources by what became of them",
                ("function", "result"), registry=None)
register_process_collector(WAKES)

Clock = Callable[[], datetime]


def enabled() -> bool:
    """``WAKES=off`` leaves every due time to the process (a cluster without Knative's
    sources, or functions that never scale to zero)."""
    return os.environ.get(SWITCH_ENV, "on").lower() != "off"


class Wakes:
    """The wakes of one function (``reconcile``, ``gc`` or ``status``)."""

    def __init__(self, function: str, kube: Callable[[], KubeClient], *,
                 namespace: str | None = None, broker: str | None = None,
                 clock: Clock | None = None) -> None:
        self.function = function
        self.kube = kube
        self.namespace = namespace or pod_namespace(NAMESPACE_ENV)
        self.broker = broker or os.environ.get(BROKER_ENV) or DEFAULT_BROKER
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self.off: str | None = None           # why this process stopped making wakes
        self._pending: set[datetime] | None = None
        self._guard = threading.Lock()

    def ask(self, delay: float) -> None:
        """A pass asks to run again in ``delay`` seconds: make sure a wake fires by then."""
        if delay < wakes.IN_PROCESS_SECONDS or self.off is not None:
            return
        now = self.clock()
        minute = wakes.wake_minute(now + timedelta(seconds=delay))
        with self._guard:
            try:
                pending = self._known(now)
                if wakes.covered(pending, minute, now):
                    return
                self._make(minute)
                pending.add(minute)
            except (ApiError, TemporaryError) as exc:
                self._failed(exc)

    def fired(self) -> int:
        """Delete this function's wakes whose minute has come; how many went. Called once a
        wake's pass over every parent has succeeded (they have done their work)."""
        if self.off is not None:
            return 0
        now = self.clock()
        deleted = 0
        with self._guard:
            try:
                found = self._list()
                for minute in wakes.fired(found, now):
                    name = found[minute]
                    if self.kube().delete(PINGSOURCES, name, self.namespace, propagation=None):
                        deleted += 1
                        WAKES.labels(self.function, "deleted").inc()
                self._pending = {m for m in found if m > now}
            except (ApiError, TemporaryError) as exc:
                self._failed(exc)
        return deleted

    def _known(self, now: datetime) -> set[datetime]:
        if self._pending is None:
            self._pending = set(self._list())
        self._pending = {m for m in self._pending if m > now}
        return self._pending

    def _list(self) -> dict[datetime, str]:
        """This function's wakes by minute."""
        found: dict[datetime, str] = {}
        for item in self.kube().list(PINGSOURCES, self.namespace,
                                     label_selector=f"{wakes.FUNCTION_LABEL}={self.function}"):
            minute = wakes.minute_of(item)
            if minute is not None:
                found[minute] = str(item["metadata"]["name"])
        return found

    def _make(self, minute: datetime) -> None:
        source = wakes.wake_source(self.function, minute, self.namespace, self.broker)
        try:
            self.kube().create(source, res=PINGSOURCES, field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if exc.status != 409:   # 409: another replica made it first
                raise
        WAKES.labels(self.function, "created").inc()
        log.info("%s: a wake at %s (%s)", self.function, minute.isoformat(),
                 source["metadata"]["name"])

    def _failed(self, exc: ApiError | TemporaryError) -> None:
        WAKES.labels(self.function, "failed").inc()
        if isinstance(exc, ApiError) and exc.status in (403, 404):
            self.off = (f"PingSources in {self.namespace} are "
                        f"{'forbidden to' if exc.status == 403 else 'not served for'} this "
                        f"identity: due times rely on this process and the resync alone")
            log.warning("%s: %s (%s)", self.function, self.off, exc)
        else:
            log.warning("%s: no wake made or cleared this time (%s); the process's timer and "
                        "the resync stand", self.function, exc)
