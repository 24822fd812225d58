"""A small raw-JSON Kubernetes client: get, list, Server-Side Apply, patch, create, delete.

Objects are plain dicts, never generated models (deserialising models costs ten times the
request on large lists). Every request is counted by verb and status code so tests and
benchmarks can assert how much work a reconcile did. Transient failures (429, 5xx, connection
errors) are retried a few times, honouring ``Retry-After``; when the budget is spent a
:class:`~functions.core.errors.TemporaryError` tells the HTTP layer to let the Broker retry.
"""

from __future__ import annotations

import builtins
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import orjson

from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.config import ClusterConfig
from functions.kube.config import load as load_config
from functions.kube.resources import Resource
from functions.kube.transport import HttpTransport, Request, Response, Transport, TransportError

Obj = dict[str, Any]

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
RETRIABLE = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    """A non-success answer from the API server that retrying will not change."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


RequestHook = Callable[[str, int, float], None]


class WriteObserver(Protocol):
    """Told the API server's answer to every successful write (a watch cache keeps what its
    own process wrote without waiting for the watch to bring it back)."""

    def written(self, res: Resource, obj: Obj) -> None: ...

    def deleted(self, res: Resource, namespace: str | None, name: str,
                last: Obj | None) -> None: ...


class KubeClient:
    """Thread-safe; create one per process (after a fork) and share it."""

    def __init__(self, transport: Transport, *, timeout: float = 15.0, retries: int = 3,
                 max_backoff: float = 4.0, on_request: RequestHook | None = None) -> None:
        self.transport = transport
        self.timeout = timeout
        self.retries = retries
        self.max_backoff = max_backoff
        self.on_request = on_request
        self.requests: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        self._discovered: dict[tuple[str, str], Resource] = {}
        self.observers: builtins.list[WriteObserver] = []

    @classmethod
    def from_config(cls, config: ClusterConfig | None = None, **kwargs: Any) -> KubeClient:
        return cls(HttpTransport(config or load_config()), **kwargs)

    # -- accounting ---------------------------------------------------------------------------

    def request_count(self, *verbs: str) -> int:
        """Requests sent so far, optionally only those of the given verbs (``get``, ``apply``…)."""
        with self._lock:
            return sum(n for (verb, _), n in self.requests.items() if not verbs or verb in verbs)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()

    def _record(self, verb: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(verb, status)] += 1
        if self.on_request is not None:
            self.on_request(verb, status, seconds)

    # -- the one request path -----------------------------------------------------------------

    def call(self, verb: str, method: str, path: str, *, query: Mapping[str, str] | None = None,
             body: Any = None, content_type: str | None = None) -> Response:
        """Send a request with retries; return the final response (any status)."""
        payload = None if body is None else orjson.dumps(body)
        request = Request(method, path, dict(query or {}), payload,
                          content_type or ("application/json" if payload else None))
        refreshed = False
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                response = self.transport.send(request, self.timeout)
            except TransportError as exc:
                self._record(verb, 0, time.monotonic() - started)
                if attempt >= self.retries:
                    raise TemporaryError(f"API server unreachable: {exc}", retry_after=2) from exc
                self._sleep(attempt, None)
                attempt += 1
                continue
            self._record(verb, response.status, time.monotonic() - started)
            if response.status == 401 and not refreshed:
                refreshed = True
                self.transport.refresh_credentials()
                continue
            if response.status in RETRIABLE:
                retry_after = _retry_after(response)
                if attempt >= self.retries:
                    raise TemporaryError(
                        f"{method} {path}: API server answered {response.status}",
                        retry_after=retry_after or 1.0)
                self._sleep(attempt, retry_after)
                attempt += 1
                continue
            return response

    def _sleep(self, attempt: int, retry_after: float | None) -> None:
        delay = retry_after if retry_after is not None else 0.05 * (2 ** attempt)
        time.sleep(min(self.max_backoff, delay) * (1 + random.random() * 0.1))  # noqa: S311

    def _json(self, verb: str, method: str, path: str, **kwargs: Any) -> Obj:
        response = self.call(verb, method, path, **kwargs)
        data = _decode(response)
        if response.status >= 300:
            raise _error(response.status, data)
        return data

    # -- verbs ----------------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None,
            subresource: str | None = None) -> Obj | None:
        """The object, or ``None`` when it does not exist."""
        response = self.call("get", "GET", res.path(namespace, name, subresource))
        data = _decode(response)
        if response.status == 404:
            return None
        if response.status >= 300:
            raise _error(response.status, data)
        return data

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None,
             page_size: int = 500) -> builtins.list[Obj]:
        """Every object of a collection (all pages), with ``apiVersion``/``kind`` filled in."""
        return list(self.iter_list(res, namespace, label_selector=label_selector,
                                   field_selector=field_selector, page_size=page_size))

    def iter_list(self, res: Resource, namespace: str | None = None, *,
                  label_selector: str | None = None, field_selector: str | None = None,
                  page_size: int = 500) -> Iterator[Obj]:
        for data in self.list_pages(res, namespace, label_selector=label_selector,
                                    field_selector=field_selector, page_size=page_size):
            for item in data.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                yield item

    def list_pages(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None, field_selector: str | None = None,
                   page_size: int = 500) -> Iterator[Obj]:
        """The raw pages of a LIST (each with ``items`` and ``metadata.resourceVersion``)."""
        query: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        while True:
            data = self._json("list", "GET", res.path(namespace), query=query)
            yield data
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return
            query["continue"] = token

    def apply(self, obj: Obj, field_manager: str, *, force: bool = True,
              subresource: str | None = None, res: Resource | None = None,
              dry_run: bool = False) -> Obj:
        """Server-Side Apply of ``obj`` (which names itself by apiVersion/kind/metadata)."""
        res = res or self.resource_for(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        query = {"fieldManager": field_manager}
        if force:
            query["force"] = "true"
        if dry_run:
            query["dryRun"] = "All"
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        result = self._json("apply", "PATCH", path, query=query, body=obj, content_type=APPLY)
        if not dry_run:
            self._written(res, result)
        return result

    def apply_status(self, obj: Obj, field_manager: str, *, res: Resource | None = None) -> Obj:
        return self.apply(obj, field_manager, subresource="status", res=res)

    def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
              content_type: str = MERGE, subresource: str | None = None,
              field_manager: str | None = None) -> Obj:
        query = {"fieldManager": field_manager} if field_manager else None
        result = self._json("patch", "PATCH", res.path(namespace, name, subresource),
                            query=query, body=patch, content_type=content_type)
        self._written(res, result)
        return result

    def create(self, obj: Obj, *, res: Resource | None = None,
               field_manager: str | None = None) -> Obj:
        res = res or self.resource_for(obj["apiVersion"], obj["kind"])
        query = {"fieldManager": field_manager} if field_manager else None
        result = self._json("create", "POST", res.path(obj["metadata"].get("namespace")),
                            query=query, body=obj)
        self._written(res, result)
        return result

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
               propagation: str | None = "Background", uid: str | None = None,
               resource_version: str | None = None,
               grace_period_seconds: int | None = None) -> bool:
        """Delete; ``False`` when it was already gone, or when a precondition (``uid``, or
        ``resource_version``: the object must be exactly as last seen) no longer holds."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v}
        if preconditions:
            body["preconditions"] = preconditions
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        response = self.call("delete", "DELETE", res.path(namespace, name), body=body)
        if response.status == 404 or (preconditions and response.status == 409):
            return False
        data = _decode(response)
        if response.status >= 300:
            raise _error(response.status, data)
        last = data if data.get("kind") not in (None, "Status") else None
        for observer in self.observers:
            observer.deleted(res, namespace, name, last)
        return True

    @property
    def can_watch(self) -> bool:
        """Whether the transport streams (a watch needs it)."""
        return callable(getattr(self.transport, "stream", None))

    def _written(self, res: Resource, obj: Obj) -> None:
        for observer in self.observers:
            observer.written(res, obj)

    # -- watch ----------------------------------------------------------------------------------

    def watch(self, res: Resource, namespace: str | None = None, *, resource_version: str,
              label_selector: str | None = None, timeout_seconds: int = 300) -> Iterator[Obj]:
        """The watch events (``{"type": ..., "object": ...}``) after ``resource_version``, until
        the server ends the watch. Bookmarks are asked for. Raises :class:`ApiError` (410 when
        the version is too old) or :class:`TemporaryError` (no connection)."""
        stream = getattr(self.transport, "stream", None)
        if stream is None:
            raise ApiError(501, "NotImplemented", "this transport cannot stream a watch")
        query = {"watch": "true", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            query["labelSelector"] = label_selector
        started = time.monotonic()
        try:
            status, _, raw = stream(Request("GET", res.path(namespace), query),
                                    timeout_seconds + 30.0)
        except TransportError as exc:
            self._record("watch", 0, time.monotonic() - started)
            raise TemporaryError(f"watch of {res.plural}: {exc}", retry_after=1) from exc
        self._record("watch", status, time.monotonic() - started)
        try:
            if status != 200:
                raise _error(status, _decode(Response(status, {}, raw.read())))
            pending = b""
            for chunk in raw.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
        except (TransportError, OSError) as exc:
            raise TemporaryError(f"watch of {res.plural} ended: {exc}", retry_after=1) from exc
        finally:
            raw.release_conn()

    # -- discovery ------------------------------------------------------------------------------

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The resource of a kind: the static table first, then discovery (cached)."""
        found = resources.known(api_version, kind)
        if found is not None:
            return found
        key = (api_version, kind)
        with self._lock:
            cached = self._discovered.get(key)
        if cached is not None:
            return cached
        for res in self.discover(api_version):
            with self._lock:
                self._discovered[(api_version, res.kind)] = res
        with self._lock:
            cached = self._discovered.get(key)
        if cached is None:
            raise ApiError(404, "NotFound",
                           f"the server has no resource for {kind} in {api_version}")
        return cached

    def discover(self, api_version: str) -> builtins.list[Resource]:
        """The top-level resources of one group version (``[]`` if it is not served)."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        response = self.call("discovery", "GET", path)
        if response.status == 404:
            return []
        data = _decode(response)
        if response.status >= 300:
            raise _error(response.status, data)
        return [
            Resource(group, version, r["name"], r["kind"], bool(r.get("namespaced")))
            for r in data.get("resources") or []
            if "/" not in r["name"]
        ]

    def served_group_versions(self) -> builtins.list[str]:
        """Every served ``group/version`` (core ``v1`` included), preferred or not."""
        found = ["v1"]
        data = self._json("discovery", "GET", "/apis")
        for group in data.get("groups") or []:
            found.extend(v["groupVersion"] for v in group.get("versions") or [])
        return found


def _decode(response: Response) -> Obj:
    if not response.body:
        return {}
    try:
        data = orjson.loads(response.body)
    except ValueError:
        return {"message": response.body[:500].decode("utf-8", "replace")}
    return data if isinstance(data, dict) else {"items": data}


def _error(status: int, data: Obj) -> ApiError:
    return ApiError(status, str(data.get("reason") or ""), str(data.get("message") or ""), data)


def _retry_after(response: Response) -> float | None:
    for key, value in response.headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None
