"""A per-process watch cache: the objects of a few resources, kept current by one LIST and a
WATCH each, so a handler reads them without a round trip to the API server.

It is an optimisation that correctness never depends on:

* a read the cache cannot answer goes to the API server: a resource nobody declared, a
  selector it does not index, an informer that has not synced yet (a cold replica simply
  reads), and a ``get`` of an object the cache does not hold;
* an event is never taken as state (it may be stale, duplicated, or replayed from another
  cluster): its object's ``resourceVersion`` only says how far the cache must have got.
  When the watch has not reached it within a moment, that event's pass reads the API
  server instead (:meth:`ObjectCache.caught_up`), so a handler always sees at least the
  state its event announced;
* the answers to this process's own writes are kept when they are newer than what the
  cache holds, so a pass sees what the previous one wrote (and creates nothing twice); a
  deletion it made leaves a tombstone that keeps older versions from coming back;
* every write a handler bases on what it read is guarded by the API server (names that make a
  second create a 409, ``uid``/``resourceVersion`` preconditions on deletes and status
  writes), so a stale read costs a retry, never a duplicate or a lost update.

Versions are compared as the store (:mod:`functions.kube.store`) explains.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from functions.core.errors import TemporaryError
from functions.kube.gaps import (
    SWEEP_SECONDS,
    CatchUp,
    Change,
    Journal,
    Journaled,
    status_only,
)
from functions.kube.store import Key, Obj, Store, key_of, version_of

if TYPE_CHECKING:
    from functions.kube.client import KubeClient
    from functions.kube.resources import Resource

log = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class CacheSpec:
    """One resource to cache, cluster-wide.

    :param selector: label selector of the LIST and WATCH (only those objects are held).
    :param index_label: a ``list`` in one namespace with the selector ``<index_label>=<value>``
        is answered from the cache.
    :param status_changes: tell a change of an object's ``status`` alone from the others
        (:meth:`Informer.status_alone`; set for the controllers' parent kinds, whose status
        is mostly the functions' own output).
    :param keep: what of each object the cache holds, when its readers read a part only
        (:class:`~functions.kube.store.Store`); specs of one resource must agree on it.
    """

    resource: Resource
    selector: str | None = None
    index_label: str | None = None
    status_changes: bool = False
    keep: Callable[[Obj], Obj] | None = None


class Informer:
    """Keeps one :class:`Store` current from a background thread: LIST, then WATCH from the
    list's version; a watch that ends is resumed, one that is too old (410) re-lists, and
    failures back off up to :attr:`max_backoff` seconds.

    Once synced, every change it applies goes to its :class:`~functions.kube.gaps.Journal`,
    and what would make a client-go reflector (the ApiServerSource adapter's) list again is
    reported to ``on_reset`` (:mod:`functions.kube.gaps`): a watch refused (410 or another
    error status) or one that ended within :attr:`short_watch_seconds` with no event (client-go's
    "very short watch"). A watch that ran and ended is resumed by a reflector from its last
    version, as here, and loses nothing.

    With ``spec.status_changes`` it also keeps, per object, the last state the watch (or a
    list) delivered and whether the watch's latest change of it touched its ``status`` alone.
    That is compared with what the watch delivered before, never with the store, which may
    hold this process's own write of the same version.
    """

    max_backoff = 30.0
    watch_seconds = 300
    short_watch_seconds = 1.0

    def __init__(self, kube: KubeClient, spec: CacheSpec,
                 on_reset: Callable[[Informer], None] | None = None) -> None:
        self.kube = kube
        self.spec = spec
        self.name = spec.resource.plural
        self.store = Store(spec.resource.api_version, spec.resource.kind, spec.index_label,
                           spec.keep)
        self.journal = Journal()
        self.on_reset = on_reset
        self.synced = threading.Event()
        # (namespace, name) -> the last state delivered, and whether its change was to the
        # status alone (only with spec.status_changes)
        self._delivered: dict[Key, tuple[Obj, bool]] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"informer-{self.spec.resource.plural}")
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        from functions.kube.client import ApiError

        backoff = 0.5
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                    self.synced.set()
                started = time.monotonic()
                version, events = self._watch(version)
                backoff = 0.5
                if not events and time.monotonic() - started < self.short_watch_seconds:
                    self._reset("a watch ended at once with no event")
            except ApiError as exc:
                self._reset(f"the watch was refused: {exc}")
                if exc.status == 410:
                    version = None
                    continue
                log.warning("cache of %s: %s", self.name, exc)
                version = None
            except TemporaryError as exc:
                log.info("cache of %s: %s", self.name, exc)
            except Exception:
                self._reset("the cache failed")
                log.exception("cache of %s failed; re-listing", self.name)
                version = None
            if self._stopping.wait(backoff):
                return
            backoff = min(self.max_backoff, backoff * 2)

    def _list(self) -> str:
        res = self.spec.resource
        items: list[Obj] = []
        query_version = ""
        for page in self.kube.list_pages(res, label_selector=self.spec.selector):
            items.extend(self.store.held(item) for item in page.get("items") or [])
            query_version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        changed = self.store.replace(items, query_version)
        if self.spec.status_changes:   # what changed between the watches is not known
            kind = {"apiVersion": res.api_version, "kind": res.kind}   # as the watch has them
            self._delivered = {key_of(item): ({**kind, **item}, False) for item in items}
        if self.synced.is_set():   # a re-list: what it changed was not seen as events
            self.journal.record(changed)
        return query_version

    def _reset(self, why: str) -> None:
        if self.on_reset is not None and self.synced.is_set() and not self._stopping.is_set():
            log.info("the %s watch was reset (%s)", self.name, why)
            self.on_reset(self)

    def _watch(self, version: str) -> tuple[str, int]:
        """Follow one watch from ``version``: where it got to, and how many events it had."""
        count = 0
        for event in self.kube.watch(self.spec.resource, resource_version=version,
                                     label_selector=self.spec.selector,
                                     timeout_seconds=self.watch_seconds):
            count += 1
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                from functions.kube.client import ApiError
                raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or ""),
                               str(obj.get("message") or "watch error"))
            alone = self._delivery(str(kind), obj)
            self.store.apply(str(kind), obj)
            if kind != "BOOKMARK":
                self.journal.record(((str(kind), obj),), status_only=alone)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if self._stopping.is_set():
                break
        return version, count

    def _delivery(self, kind: str, obj: Obj) -> bool:
        """Keep what the watch delivered; whether it changed the object's status alone."""
        if not self.spec.status_changes:
            return False
        key = key_of(obj)
        if kind == "DELETED":
            self._delivered.pop(key, None)
            return False
        if kind not in ("ADDED", "MODIFIED"):
            return False
        before = self._delivered.get(key)
        old, new = (version_of(before[0]) if before else None), version_of(obj)
        alone = (kind == "MODIFIED" and before is not None and old is not None
                 and new is not None and old < new and status_only(before[0], obj))
        self._delivered[key] = (obj, alone)
        return alone

    def status_alone(self, obj: Obj) -> bool:
        """Whether the watch's latest change of ``obj`` is ``obj``'s version and touched its
        ``status`` alone (false when not known: another version, or no ``status_changes``)."""
        latest = self._delivered.get(key_of(obj))
        if latest is None or not latest[1]:
            return False
        version = version_of(obj)
        return version is not None and version_of(latest[0]) == version


class ObjectCache:
    """The informers of one process, started on first use; also a
    :class:`~functions.kube.client.WriteObserver` so this process's own writes show at once.

    With ``on_gap``, what changed around a reset of a watch, and each sweep's older changes,
    are handed to it (:mod:`functions.kube.gaps`): the resource and the changes; a sweep
    waits for ``quiet()``, and each hand-over holds back ``lag()`` seconds more."""

    def __init__(self, kube: KubeClient, specs: Sequence[CacheSpec],
                 on_gap: Callable[[Resource, list[Change]], None] | None = None, *,
                 sweep_every: float = SWEEP_SECONDS,
                 quiet: Callable[[], bool] | None = None,
                 lag: Callable[[], float] | None = None) -> None:
        self.kube = kube
        # A client that cannot stream cannot watch: then nothing is cached, all is read.
        self._specs = {_resource_id(s.resource): s for s in specs} if kube.can_watch else {}
        self._informers: dict[tuple[str, str], Informer] = {}
        self._guard = threading.Lock()
        self.on_gap = on_gap
        self.catch_up = (CatchUp(self._deliver, sweep_every=sweep_every, quiet=quiet, lag=lag)
                         if on_gap is not None else None)
        kube.observers.append(self)

    def informer(self, res: Resource, *, start: bool = True) -> Informer | None:
        ident = _resource_id(res)
        spec = self._specs.get(ident)
        if spec is None:
            return None
        with self._guard:
            informer = self._informers.get(ident)
            if informer is None and start:
                informer = self._informers[ident] = Informer(
                    self.kube, spec, self.catch_up.reset if self.catch_up else None)
                informer.start()
                if self.catch_up is not None:
                    self.catch_up.watch(informer)
            return informer

    def ready(self, res: Resource) -> Informer | None:
        """The informer of ``res`` once it has synced (starting it if needed), else ``None``."""
        informer = self.informer(res)
        return informer if informer is not None and informer.synced.is_set() else None

    def wait_synced(self, resources: Iterable[Resource], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for res in resources:
            informer = self.informer(res)
            if informer is not None and not informer.synced.wait(
                    max(0.0, deadline - time.monotonic())):
                return False
        return True

    def stop(self) -> None:
        with self._guard:
            for informer in self._informers.values():
                informer.stop()
        if self.catch_up is not None:
            self.catch_up.stop()

    def _deliver(self, source: Journaled, changed: list[Change]) -> None:
        assert isinstance(source, Informer)
        assert self.on_gap is not None
        log.info("catching up on %d %s changed around a watch reset or with no event seen",
                 len(changed), source.name)
        self.on_gap(source.spec.resource, changed)

    def caught_up(self, res: Resource, obj: Obj, timeout: float) -> bool:
        """Whether reads of ``res`` reflect ``obj`` (from an event) within ``timeout``: true
        when ``res`` is not cached at all (reads go to the API server anyway), false when
        its informer has not synced."""
        informer = self.informer(res, start=False)
        if informer is None:
            return True
        if not informer.synced.is_set():
            return False
        return informer.store.caught_up(obj, timeout)

    def status_alone(self, res: Resource, obj: Obj) -> bool:
        """Whether ``obj`` (from an event) is the latest change the watch of ``res`` applied
        and that change touched its status alone (:meth:`Informer.status_alone`)."""
        informer = self.informer(res, start=False)
        return (informer is not None and informer.synced.is_set()
                and informer.status_alone(obj))

    def reached(self, resources: Iterable[Resource], version: int, timeout: float) -> bool:
        """Whether the watches of ``resources`` (those cached) have all got to ``version``."""
        for res in resources:
            informer = self.informer(res, start=False)
            if informer is None:
                continue
            if not informer.synced.is_set() or not informer.store.reached(version, timeout):
                return False
        return True

    # -- this process's writes --------------------------------------------------------------------

    def written(self, res: Resource, obj: Obj) -> None:
        informer = self.informer(res, start=False)
        if informer is not None:
            informer.store.offer(obj)

    def deleted(self, res: Resource, namespace: str | None, name: str,
                last: Obj | None) -> None:
        informer = self.informer(res, start=False)
        if informer is None or last is None:
            return
        if (last.get("metadata") or {}).get("deletionTimestamp"):
            informer.store.offer(last)
        else:
            informer.store.offer_deleted(last)


def _resource_id(res: Resource) -> tuple[str, str]:
    return res.group, res.plural


class CachedReader:
    """``get`` and ``list`` like :class:`~functions.kube.client.KubeClient`, answered from an
    :class:`ObjectCache` when it can, else by the API server."""

    def __init__(self, kube: KubeClient, cache: ObjectCache) -> None:
        self.kube = kube
        self.cache = cache

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        informer = self.cache.ready(res)
        if informer is not None:
            found = informer.store.get(namespace or "", name)
            if found is not None:
                return found
        obj = self.kube.get(res, name, namespace)
        if obj is not None and informer is not None:
            obj.setdefault("apiVersion", res.api_version)
            obj.setdefault("kind", res.kind)
            informer.store.offer(obj)
        return obj

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None) -> builtins.list[Obj]:
        informer = self.cache.ready(res)
        label = informer.spec.index_label if informer is not None else None
        if informer is not None and label and namespace and label_selector:
            name, sep, value = label_selector.partition("=")
            if sep and name == label and "," not in value and not value.startswith("="):
                return informer.store.by_label(namespace, value)
        return self.kube.list(res, namespace, label_selector=label_selector)
