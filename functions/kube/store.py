"""The versioned object store behind the watch cache (:mod:`functions.kube.cache`): pure
bookkeeping, no I/O.

``resourceVersion`` is compared as an integer: the API server's etcd3 storage issues them from
one increasing revision counter. An object whose version is not an integer is only ever taken
from the watch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)


def version_of(obj: Obj) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _trim(obj: Obj, api_version: str) -> Obj:
    """What the cache keeps: the object without ``managedFields`` (often half its size).

    One thing in them is state, not bookkeeping: through which API version each writer wrote
    the spec, when not every writer used the version the cache reads (one CRD storage serving
    two versions: :mod:`functions.jobs.core.flavour`). Then a summary of the entries stays:
    version, manager, operation, time, and ``f:spec`` alone of the field sets, when owned.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        slim = {k: v for k, v in meta.items() if k != "managedFields"}
        entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
        if any(e.get("apiVersion") not in (None, api_version) for e in entries):
            slim["managedFields"] = [_writer(e) for e in entries]
        obj = {**obj, "metadata": slim}
    return obj


def _writer(entry: Obj) -> Obj:
    out = {k: entry[k] for k in ("apiVersion", "manager", "operation", "time") if k in entry}
    if "f:spec" in (entry.get("fieldsV1") or {}):
        out["fieldsV1"] = {"f:spec": {}}
    return out


class Store:
    """The objects of one resource by key, versioned, with an optional label index.

    ``high_water`` is the newest version the watch has reported (events or bookmarks): an
    object the store does not hold is taken from outside the watch only when it is newer than
    that, since anything older has either been delivered by the watch already or been deleted.
    Deletions learnt outside the watch leave a tombstone until the watch passes them.
    Objects handed out are shared: callers must not modify them. ``keep`` is what of an
    object the store holds (all of it but ``managedFields`` by default): the fields its
    readers read, applied to everything it takes in.
    """

    def __init__(self, api_version: str, kind: str, index_label: str | None = None,
                 keep: Callable[[Obj], Obj] | None = None) -> None:
        self.api_version = api_version
        self.kind = kind
        self.index_label = index_label
        self.keep = keep
        self.high_water = 0
        self.last_change = float("-inf")  # monotonic time the watch last moved high_water
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._objects: dict[Key, Obj] = {}
        self._index: dict[Key, dict[str, Obj]] = {}
        self._gone: dict[Key, int] = {}

    # -- reading --------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def by_label(self, namespace: str, value: str) -> list[Obj]:
        with self._lock:
            return list(self._index.get((namespace, value), {}).values())

    def values(self) -> list[Obj]:
        """Every object held (a snapshot)."""
        with self._lock:
            return list(self._objects.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def reached(self, version: int, timeout: float = 0.0) -> bool:
        """Whether the watch has got to ``version`` (everything up to it is applied), waiting
        up to ``timeout`` while it is moving; a watch idle for a second is not waited for."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.high_water < version:
                now = time.monotonic()
                if now >= deadline or now - self.last_change > 1.0:
                    return False
                self._progress.wait(deadline - now)
            return True

    def caught_up(self, obj: Obj, timeout: float = 0.0) -> bool:
        """Whether the store reflects ``obj``'s version (or a newer state of that object, or a
        watch past it when the store does not hold the object), waiting up to ``timeout``."""
        version = version_of(obj)
        if version is None:
            return True
        key = key_of(obj)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                held = self._version(key)
                if (held if held is not None else self.high_water) >= version:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(remaining)

    # -- the watch ------------------------------------------------------------------------------

    def replace(self, items: Iterable[Obj], version: str) -> list[tuple[str, Obj]]:
        """The result of a LIST at ``version``: everything else is gone. Returns what the
        list changed, as watch events would have: ``ADDED`` and ``MODIFIED`` objects, and the
        last state of those ``DELETED``."""
        with self._lock:
            before = self._objects
            self._objects = {}
            self._index.clear()
            self._gone.clear()
            changed: list[tuple[str, Obj]] = []
            for item in items:
                key = key_of(item)
                obj = self._complete(item)
                self._put(key, obj)
                old = before.pop(key, None)
                if old is None:
                    changed.append(("ADDED", obj))
                elif version_of(old) != version_of(obj):
                    changed.append(("MODIFIED", obj))
            changed.extend(("DELETED", obj) for obj in before.values())
            self.high_water = max(self.high_water, _int(version))
            self.last_change = time.monotonic()
            self._progress.notify_all()
            return changed

    def apply(self, event_type: str, obj: Obj) -> None:
        """One watch event (``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``)."""
        version = version_of(obj)
        with self._lock:
            if version is not None and version > self.high_water:
                self.high_water = version
                self.last_change = time.monotonic()
                if self._gone:
                    for key in [k for k, v in self._gone.items() if v <= self.high_water]:
                        del self._gone[key]
            self._progress.notify_all()
            if event_type == "BOOKMARK":
                return
            key = key_of(obj)
            held = self._version(key)
            if event_type == "DELETED":
                if held is None or version is None or held <= version:
                    self._drop(key)
            elif held is None or version is None or held <= version:
                self._put(key, self._complete(obj))

    # -- outside the watch ----------------------------------------------------------------------

    def offer(self, obj: Obj) -> bool:
        """An object the API server answered this process with; kept only when newer."""
        version = version_of(obj)
        if version is None:
            return False
        key = key_of(obj)
        with self._lock:
            held = self._version(key)
            floor = held if held is not None else max(self.high_water, self._gone.get(key, 0))
            if version <= floor:
                return False
            self._put(key, self._complete(obj))
            return True

    def offer_deleted(self, obj: Obj) -> bool:
        """The last state of a deleted object; the deletion is kept unless the store holds a
        newer object of that name (re-created since)."""
        version = version_of(obj)
        if version is None:
            return False
        key = key_of(obj)
        with self._lock:
            held = self._version(key)
            if held is not None and held > version:
                return False
            self._drop(key)
            if version > self.high_water:
                self._gone[key] = max(version, self._gone.get(key, 0))
            return True

    def held(self, obj: Obj) -> Obj:
        """What the store would hold of ``obj``: a LIST's pages are cut down to it as they
        come, so a fill never holds every whole object at once."""
        return self._complete(obj)

    # -- internals (lock held) ------------------------------------------------------------------

    def _complete(self, obj: Obj) -> Obj:
        obj = _trim(obj, self.api_version)
        if self.keep is not None:
            obj = self.keep(obj)
        if "apiVersion" not in obj or "kind" not in obj:
            obj = {"apiVersion": self.api_version, "kind": self.kind, **obj}
        return obj

    def _version(self, key: Key) -> int | None:
        held = self._objects.get(key)
        return version_of(held) if held is not None else None

    def _label(self, obj: Obj) -> str | None:
        if self.index_label is None:
            return None
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(self.index_label)
        return str(value) if value is not None else None

    def _put(self, key: Key, obj: Obj) -> None:
        self._drop(key)
        self._objects[key] = obj
        label = self._label(obj)
        if label is not None:
            self._index.setdefault((key[0], label), {})[key[1]] = obj

    def _drop(self, key: Key) -> None:
        old = self._objects.pop(key, None)
        if old is None:
            return
        label = self._label(old)
        if label is not None:
            bucket = self._index.get((key[0], label))
            if bucket is not None:
                bucket.pop(key[1], None)
                if not bucket:
                    del self._index[(key[0], label)]


def _int(version: str | None) -> int:
    try:
        return int(version or 0)
    except ValueError:
        return 0
