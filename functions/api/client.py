"""A small HTTP client of the training API, for the CLI and for scripts.

The HTTP is urllib3's, through the project's API transport
(:class:`functions.kube.transport.HttpTransport`): a connection pool, TLS, a deadline per
request and a size limit on answers (:mod:`functions.kube.pools`), and a bearer token. The API
answers problems as ``application/problem+json``; they come back as :class:`ApiClientError`
carrying the document. A request that gets no HTTP answer at all (connection refused, TLS
failure, no whole answer in time) is :class:`ApiUnreachable`.
"""

from __future__ import annotations

import builtins
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from functions.kube.config import ClusterConfig
from functions.kube.transport import HttpTransport, Request, TransportError

Obj = dict[str, Any]
PROBLEM_JSON = "application/problem+json"
FOLLOW_TIMEOUT = 3600.0  # the longest a followed log may stay quiet


class ApiClientError(Exception):
    """The API answered a problem (any status of 300 or more)."""

    def __init__(self, status: int, problem: Obj, is_problem: bool = True) -> None:
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = problem
        # Whether the answer was the API's own problem document (a proxy in front of it, an
        # OpenShift router, answers 502/503 of its own when the service is down).
        self.is_problem = is_problem

    @property
    def detail(self) -> str:
        return str(self.problem.get("detail") or self.problem.get("title") or
                   f"HTTP {self.status}")

    @property
    def fields(self) -> list[str]:
        return [str(e.get("field")) for e in self.problem.get("errors") or []]


class ApiUnreachable(Exception):
    """No HTTP answer from the API (connection refused, TLS failure, deadline passed)."""


class TrainingApi:
    """The jobs of one namespace through the training API at ``url``.

    :param token: the caller's bearer token (the API reviews it with a TokenReview)
    :param insecure: do not verify the API's TLS certificate
    """

    def __init__(self, url: str, token: str | None, namespace: str, timeout: float = 30.0,
                 insecure: bool = False) -> None:
        self.url = url
        self.namespace = namespace
        self.timeout = timeout
        self.transport = HttpTransport(ClusterConfig(server=url, token=token,
                                                     insecure=insecure), pool_size=2)

    def _jobs(self, name: str | None = None, sub: str | None = None) -> str:
        path = f"/v1/namespaces/{urllib.parse.quote(self.namespace)}/jobs"
        if name is not None:
            path += f"/{urllib.parse.quote(name)}"
        if sub:
            path += f"/{sub}"
        return path

    @staticmethod
    def _query(query: Mapping[str, Any] | None) -> dict[str, str]:
        return {k: str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in (query or {}).items() if v is not None}

    def _call(self, method: str, path: str, body: Obj | None = None,
              query: Mapping[str, Any] | None = None) -> Obj:
        payload = None if body is None else json.dumps(body).encode()
        request = Request(method, path, self._query(query), payload,
                          "application/json" if payload is not None else None)
        try:
            response = self.transport.send(request, self.timeout)
        except TransportError as exc:
            raise ApiUnreachable(f"{self.url}: {exc}") from exc
        if response.status >= 300:
            raise _problem(response.status, response.headers, response.body)
        data = json.loads(response.body) if response.body else {}
        return data if isinstance(data, dict) else {}

    def create(self, job: Obj) -> Obj:
        return self._call("POST", self._jobs(), job)

    def list(self, state: str | None = None, label_selector: str | None = None,
             limit: int | None = None, continue_token: str | None = None) -> Obj:
        return self._call("GET", self._jobs(), query={
            "state": state, "labelSelector": label_selector, "limit": limit,
            "continue": continue_token})

    def list_all(self, state: str | None = None,
                 label_selector: str | None = None) -> builtins.list[Obj]:
        items: builtins.list[Obj] = []
        token = None
        while True:
            page = self.list(state, label_selector, 500, token)
            items.extend(page.get("items") or [])
            token = page.get("continue")
            if not token:
                return items

    def get(self, name: str) -> Obj:
        return self._call("GET", self._jobs(name))

    def delete(self, name: str) -> None:
        self._call("DELETE", self._jobs(name))

    def events(self, name: str) -> builtins.list[Obj]:
        return list(self._call("GET", self._jobs(name, "events")).get("items") or [])

    def logs(self, name: str, replica: str | None = None, index: int | None = None,
             follow: bool = False, tail_lines: int | None = None) -> Iterator[bytes]:
        """The log as it comes (``follow``: until the pod's container ends)."""
        request = Request("GET", self._jobs(name, "logs"), self._query({
            "replica": replica, "index": index, "follow": follow or None,
            "tailLines": tail_lines}))
        try:
            status, headers, raw = self.transport.stream(
                request, FOLLOW_TIMEOUT if follow else self.timeout)
        except TransportError as exc:
            raise ApiUnreachable(f"{self.url}: {exc}") from exc
        try:
            if status != 200:
                raise _problem(status, headers, raw.read())
            yield from raw.stream(4096)
        except TransportError as exc:
            raise ApiUnreachable(f"{self.url}: the log was cut: {exc}") from exc
        finally:
            raw.release_conn()

    def close(self) -> None:
        self.transport.close()


def _problem(status: int, headers: Mapping[str, str], body: bytes) -> ApiClientError:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    try:
        problem = json.loads(body)
    except ValueError:
        problem = {"detail": body[:500].decode("utf-8", "replace").strip()}
    return ApiClientError(status, problem if isinstance(problem, dict) else {},
                          is_problem=content_type.split(";")[0].strip() == PROBLEM_JSON)
