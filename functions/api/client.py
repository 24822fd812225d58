"""A small HTTP client of the training API, for the CLI and for scripts.

Standard library only (``urllib``), so the CLI needs nothing the service does not already
ship. Problems come back as :class:`ApiClientError` carrying the problem document.
"""

from __future__ import annotations

import builtins
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


class ApiClientError(Exception):
    def __init__(self, status: int, problem: Obj) -> None:
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = problem

    @property
    def fields(self) -> list[str]:
        return [str(e.get("field")) for e in self.problem.get("errors") or []]


@dataclass
class TrainingApi:
    url: str
    token: str | None
    namespace: str
    timeout: float = 30.0
    insecure: bool = False

    def _url(self, path: str, query: dict[str, Any] | None = None) -> str:
        clean = {k: str(v).lower() if isinstance(v, bool) else str(v)
                 for k, v in (query or {}).items() if v is not None}
        suffix = f"?{urllib.parse.urlencode(clean)}" if clean else ""
        return self.url.rstrip("/") + path + suffix

    def _jobs(self, name: str | None = None, sub: str | None = None) -> str:
        path = f"/v1/namespaces/{urllib.parse.quote(self.namespace)}/jobs"
        if name is not None:
            path += f"/{urllib.parse.quote(name)}"
        if sub:
            path += f"/{sub}"
        return path

    def _open(self, method: str, path: str, body: Obj | None = None,
              query: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self._url(path, query), data=data, method=method,  # noqa: S310
                                     headers=headers)
        context = ssl._create_unverified_context() if self.insecure else None  # noqa: S323
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout,  # noqa: S310
                                          context=context)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = {"detail": raw[:500].decode("utf-8", "replace")}
            raise ApiClientError(exc.code, problem if isinstance(problem, dict) else {}) from exc

    def _call(self, method: str, path: str, body: Obj | None = None,
              query: dict[str, Any] | None = None) -> Obj:
        with self._open(method, path, body, query) as response:
            raw = response.read()
        data = json.loads(raw) if raw else {}
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
        response = self._open("GET", self._jobs(name, "logs"), query={
            "replica": replica, "index": index, "follow": follow or None,
            "tailLines": tail_lines}, timeout=None if not follow else 3600)
        with response:
            while True:
                chunk = response.read1(4096) if hasattr(response, "read1") else response.read()
                if not chunk:
                    return
                yield chunk
