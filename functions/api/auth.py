"""Who is calling and may they: TokenReview and SubjectAccessReview, answered by the API server.

The service never trusts a token itself: the API server says whose it is (TokenReview) and
whether that user may do the action in the namespace (SubjectAccessReview). Only then does
the service act, with its own ServiceAccount. Answers are cached for a few seconds per token
and per question, the way the API server caches webhook answers, so a burst of calls from one
client costs one review.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.kube.reviews import SUBJECTACCESSREVIEWS, review_token

CACHE_LIMIT = 10_000


class AuthError(Exception):
    """401 (who are you) or 403 (not allowed); the message is safe to show the caller."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def subject(self) -> dict[str, Any]:
        out: dict[str, Any] = {"user": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


@dataclass(frozen=True)
class Action:
    """One question for a SubjectAccessReview."""

    verb: str
    namespace: str
    resource: Resource
    subresource: str = ""
    name: str = ""

    def attributes(self) -> dict[str, str]:
        out = {"namespace": self.namespace, "verb": self.verb, "group": self.resource.group,
               "version": self.resource.version, "resource": self.resource.plural}
        if self.subresource:
            out["subresource"] = self.subresource
        if self.name:
            out["name"] = self.name
        return out


@dataclass
class _Cache:
    ttl: float
    clock: Callable[[], float]
    entries: dict[Any, tuple[float, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: Any) -> tuple[bool, Any]:
        with self.lock:
            found = self.entries.get(key)
        if found is None or found[0] < self.clock():
            return False, None
        return True, found[1]

    def put(self, key: Any, value: Any, ttl: float | None = None) -> None:
        with self.lock:
            if len(self.entries) >= CACHE_LIMIT:
                self.entries.clear()
            self.entries[key] = (self.clock() + (self.ttl if ttl is None else ttl), value)


class Authorizer:
    """Reviews through ``kube`` (the service's own client, allowed to create reviews)."""

    def __init__(self, kube: Callable[[], KubeClient], ttl: float = 10.0,
                 denied_ttl: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self.denied_ttl = denied_ttl
        self._tokens = _Cache(ttl, clock)
        self._decisions = _Cache(ttl, clock)

    def authenticate(self, authorization: str | None) -> User:
        """The user behind an ``Authorization: Bearer`` header; 401 when there is none."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError(401, "a bearer token is required")
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, user = self._tokens.get(key)
        if not hit:
            user = self._review_token(token)
            self._tokens.put(key, user, None if user is not None else self.denied_ttl)
        if user is None:
            raise AuthError(401, "the bearer token is not valid")
        assert isinstance(user, User)
        return user

    def _review_token(self, token: str) -> User | None:
        try:
            status = review_token(self._kube(), token)
        except ApiError as exc:
            raise AuthError(503 if exc.status in (401, 403) else 401,
                            f"the token could not be reviewed: {exc.message}") from exc
        if not status.get("authenticated"):
            return None
        info = status.get("user") or {}
        extra = tuple(sorted((str(k), tuple(str(x) for x in v))
                             for k, v in (info.get("extra") or {}).items()))
        return User(name=str(info.get("username") or ""), uid=str(info.get("uid") or ""),
                    groups=tuple(str(g) for g in info.get("groups") or ()), extra=extra)

    def allowed(self, user: User, action: Action) -> bool:
        key = (user, action)
        hit, decision = self._decisions.get(key)
        if hit:
            return bool(decision)
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "metadata": {},
                  "spec": {**user.subject(), "resourceAttributes": action.attributes()}}
        try:
            answer = self._kube().create(review, res=SUBJECTACCESSREVIEWS)
        except ApiError as exc:
            raise AuthError(503, f"access could not be reviewed: {exc.message}") from exc
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, None if allowed else self.denied_ttl)
        return allowed

    def require(self, user: User, action: Action) -> None:
        if not self.allowed(user, action):
            raise AuthError(403, _denied(user, action))


def _denied(user: User, action: Action) -> str:
    what = action.resource.plural + (f"/{action.subresource}" if action.subresource else "")
    return (f"{user.name or 'the caller'} may not {action.verb} {what} "
            f"in namespace {action.namespace}")
