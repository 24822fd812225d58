"""Knative Serving's scale from zero, as far as the dev stack needs it: a function scaled to
zero is started when the Broker has accepted an event that its Trigger takes.

In a cluster, Knative's activator holds a request to a Service at zero and has a pod started;
the Broker's delivery waits for it. Here the functions are local processes on the real event
path: :meth:`Activator.scale_to_zero` stops one, and the activator watches what the Broker
accepted (the dev stack's recording Trigger, which has no filter, gets every event as the
functions' Triggers do) and starts the function at the first event its own Trigger's filters
take. The Broker's delivery to it meanwhile fails and is retried with the Trigger's backoff,
as one to a pod still starting would time out and be retried. Each start is kept
(:attr:`Activator.activations`), with the event that caused it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devstack.broker import event_attributes
from devstack.identities import function_identities
from devstack.recording import RecordedRequest
from functions.core.triggers import TriggerFilter, compile_trigger_filter
from functions.runtime.eventing import load_manifests

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Activation:
    function: str
    at: float                    # time.time() of the start
    attributes: dict[str, str]   # the event that caused it


@dataclass
class Activator:
    """:param events: what the Broker accepted so far, in order.
    :param filters: each function's Trigger filter.
    :param start: starts a function's replicas.
    :param stop: stops them."""

    events: Callable[[], list[RecordedRequest]]
    filters: Mapping[str, TriggerFilter]
    start: Callable[[str], None]
    stop: Callable[[str], None]
    activations: list[Activation] = field(default_factory=list)
    _at_zero: dict[str, int] = field(default_factory=dict)  # function -> events seen then
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scale_to_zero(self, function: str) -> None:
        """Stop ``function``; it starts again at the first event its Trigger takes from now."""
        if function not in self.filters:
            raise ValueError(f"no Trigger delivers to {function!r}")
        with self._guard:
            self.stop(function)
            self._at_zero[function] = len(self.events())
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="activator",
                                                daemon=True)
                self._thread.start()

    def wake_up(self, function: str) -> None:
        """Start ``function`` now if it is at zero."""
        with self._guard:
            if self._at_zero.pop(function, None) is not None:
                self.start(function)

    def at_zero(self) -> set[str]:
        with self._guard:
            return set(self._at_zero)

    def close(self) -> None:
        self._stopping.set()

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_SECONDS):
            events = self.events()
            with self._guard:
                for function, seen in list(self._at_zero.items()):
                    taken = next((a for a in (_attributes(e) for e in events[seen:])
                                  if a is not None and self.filters[function].matches(a)), None)
                    if taken is None:
                        self._at_zero[function] = len(events)
                        continue
                    del self._at_zero[function]
                    log.info("activator: starting %s for %s %s", function, taken.get("type"),
                             taken.get("source"))
                    self.start(function)
                    self.activations.append(Activation(function, time.time(), taken))


def _attributes(event: RecordedRequest) -> dict[str, str] | None:
    try:
        return event_attributes(event.headers, event.body)
    except ValueError:
        return None


def trigger_filters(eventing_dir: Path, serving_dir: Path) -> dict[str, TriggerFilter]:
    """Each function's Trigger filter (``eventing/triggers.yaml``), by the function its
    subscriber Service runs (``config/serving``)."""
    by_service = {i.service: i.function for i in function_identities(serving_dir)}
    filters: dict[str, TriggerFilter] = {}
    for trigger in load_manifests(eventing_dir).triggers:
        spec = trigger.get("spec") or {}
        ref = (spec.get("subscriber") or {}).get("ref") or {}
        function = by_service.get(str(ref.get("name", "")))
        if function is not None:
            filters[function] = compile_trigger_filter(spec)
    return filters
