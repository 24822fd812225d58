"""Who may deliver an event to a function: the rules, as pure functions.

With Knative Eventing's ``authentication-oidc`` feature on, the eventing controller gives each
Trigger a ServiceAccount of its own (``status.auth.serviceAccountName``), and the Broker's filter
sends each delivery with ``Authorization: Bearer <token>``: a token of that ServiceAccount,
requested by TokenRequest for the audience the Trigger names (``spec.subscriber.audience``; a
Knative Serving Service publishes none). So a function accepts a delivery only when

1. it carries a bearer token that is a JWT (else 401: ``missing`` or ``malformed``),
2. the API server's TokenReview, asked for this function's own audience, finds the token valid
   (else 401: ``expired``, ``wrong_audience`` or ``refused``),
3. and the token's subject is the ServiceAccount of one of this function's own Triggers, or a
   subject the installation names explicitly (else 403: ``forbidden``).

When the API server cannot say, the answer is 503 (``unavailable``) with ``Retry-After``, so the
Broker tries again; a delivery is never accepted unverified. Too many tokens never seen before
at once get 429 (``busy``): each costs the API server a review.

The audience follows Knative's own format for an Addressable, ``<group>/<kind>/<namespace>/
<name>`` in lower case (:func:`audience_for`): it names the namespace, so a token for a
function of one installation is refused by another's. Nothing here trusts a token's claims: the
only claim read is ``exp``, after the API server accepted the token, to know how long its
answer may be reused (:func:`expiry`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jwt

FUNCTION_LABEL = "functions.opendatahub.io/function"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
AUDIENCE_GROUP_KIND = "serving.knative.dev/service"
# What the functions' Knative Services are called (config/serving, and func.yaml's for `all`):
# the audience's name when Knative Serving has not said (K_SERVICE).
SERVICE_NAMES = {"reconcile": "odh-training-reconcile", "gc": "odh-training-gc",
                 "status": "odh-training-status", "all": "odh-training-functions",
                 "dead-letters": "odh-training-dead-letters"}
# A Trigger of `serve all` may name any function (or `all`, config/func's).
ALL_FUNCTIONS = ("reconcile", "gc", "status", "all")
# A ServiceAccount token is a few hundred bytes to 2 KiB; a header far beyond is not one.
MAX_TOKEN_BYTES = 16 * 1024


class Reason(StrEnum):
    """Why a delivery was accepted or refused (the metric's ``reason`` label)."""

    ACCEPTED = "accepted"
    MISSING = "missing"
    MALFORMED = "malformed"
    REFUSED = "refused"
    EXPIRED = "expired"
    WRONG_AUDIENCE = "wrong_audience"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    BUSY = "busy"


STATUS: Mapping[Reason, int] = {
    Reason.ACCEPTED: 200, Reason.MISSING: 401, Reason.MALFORMED: 401, Reason.REFUSED: 401,
    Reason.EXPIRED: 401, Reason.WRONG_AUDIENCE: 401, Reason.FORBIDDEN: 403,
    Reason.UNAVAILABLE: 503, Reason.BUSY: 429,
}


@dataclass(frozen=True)
class Verdict:
    """The decision on one delivery; ``detail`` is safe to show the caller (it never holds the
    token)."""

    reason: Reason
    detail: str = ""
    subject: str = ""
    retry_after: float | None = None

    @property
    def accepted(self) -> bool:
        return self.reason is Reason.ACCEPTED

    @property
    def status(self) -> int:
        return STATUS[self.reason]


def audience_for(namespace: str, service: str) -> str:
    """The audience of a Knative Service, as Knative writes an Addressable's."""
    return f"{AUDIENCE_GROUP_KIND}/{namespace}/{service}".lower()


def subject_of(namespace: str, service_account: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{service_account}"


def bearer_token(header: str | None) -> str | Verdict:
    """The token of an ``Authorization: Bearer`` header, or why there is none."""
    if header is None or not header.strip():
        return Verdict(Reason.MISSING, "a bearer token is required: the Broker sends one for "
                                       "the Trigger's audience when authentication-oidc is on")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return Verdict(Reason.MALFORMED, "the Authorization header is not 'Bearer <token>'")
    if len(token) > MAX_TOKEN_BYTES:
        return Verdict(Reason.MALFORMED, f"the bearer token exceeds {MAX_TOKEN_BYTES} bytes")
    return token


def not_a_jwt(token: str) -> Verdict | None:
    """Why a token new to the receiver is refused before it costs the API server a review
    (it is not a JWT at all), or ``None``. (Some 50 us: asked only of a token not yet
    reviewed.)"""
    try:
        jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return Verdict(Reason.MALFORMED, "the bearer token is not a JWT")
    return None


def digest(token: str) -> str:
    """What a token is remembered by: never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


def reviewed(status: Mapping[str, Any], audience: str) -> Verdict:
    """A TokenReview's ``status`` (asked with ``spec.audiences=[audience]``) as a verdict:
    accepted with the token's subject, or refused with the reason the API server gave."""
    if status.get("authenticated") is True:
        audiences = status.get("audiences")
        if audiences is not None and audience not in audiences:
            return Verdict(Reason.WRONG_AUDIENCE, f"the token is not for {audience}")
        username = str((status.get("user") or {}).get("username") or "")
        if not username:
            return Verdict(Reason.REFUSED, "the token names no user")
        return Verdict(Reason.ACCEPTED, subject=username)
    error = str(status.get("error") or "")
    lowered = error.lower()
    if "audience" in lowered:
        return Verdict(Reason.WRONG_AUDIENCE, f"the token is not for {audience}")
    if "expired" in lowered:
        return Verdict(Reason.EXPIRED, "the token has expired")
    return Verdict(Reason.REFUSED, "the API server refused the token"
                   + (f": {error[:200]}" if error else ""))


def expiry(token: str) -> float | None:
    """The ``exp`` claim (seconds since the epoch) of a token the API server has accepted, or
    ``None`` when it has none. Its signature is not checked here: the TokenReview did that."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    value = claims.get("exp")
    return float(value) if isinstance(value, int | float) else None


# -- who may deliver ---------------------------------------------------------------------------


def trigger_subjects(triggers: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The OIDC ServiceAccounts Knative made for these Triggers, as token subjects."""
    found: set[str] = set()
    for trigger in triggers:
        namespace = str((trigger.get("metadata") or {}).get("namespace") or "")
        auth = (trigger.get("status") or {}).get("auth") or {}
        names = [auth.get("serviceAccountName"), *(auth.get("serviceAccountNames") or [])]
        found.update(subject_of(namespace, str(name)) for name in names if name and namespace)
    return frozenset(found)


@dataclass(frozen=True)
class SenderRule:
    """Which Triggers' ServiceAccounts may deliver to a receiver.

    A function: the Triggers labelled ``functions.opendatahub.io/function`` with its name (any
    function's for ``all``). The dead-letter sink: the Triggers whose dead letters go to it,
    which the Broker's filter forwards with the Trigger's own ServiceAccount, for the audience
    the Trigger's status records (``status.deadLetterSinkAudience``, its own or its Broker's).
    """

    functions: tuple[str, ...] = ()
    dead_letter_audience: str | None = None

    @property
    def label_selector(self) -> str | None:
        if not self.functions:
            return None
        if len(self.functions) == 1:
            return f"{FUNCTION_LABEL}={self.functions[0]}"
        return f"{FUNCTION_LABEL} in ({','.join(self.functions)})"

    def subjects(self, triggers: Iterable[Mapping[str, Any]]) -> frozenset[str]:
        if self.dead_letter_audience is None:
            return trigger_subjects(triggers)
        return trigger_subjects(
            t for t in triggers
            if (t.get("status") or {}).get("deadLetterSinkAudience") == self.dead_letter_audience)


def function_rule(function: str) -> SenderRule:
    return SenderRule(functions=ALL_FUNCTIONS if function == "all" else (function,))


def dead_letter_rule(audience: str) -> SenderRule:
    return SenderRule(dead_letter_audience=audience)


# -- remembering answers -----------------------------------------------------------------------


@dataclass
class ReviewCache:
    """The API server's answers by token digest, at most ``limit`` (the least recently used go
    first). An accepted token is remembered until its ``exp``; a refused one for
    ``refused_seconds``, so a client repeating a bad token costs one review per interval."""

    limit: int = 10_000
    refused_seconds: float = 10.0
    _entries: OrderedDict[str, tuple[float, Verdict]] = field(default_factory=OrderedDict)

    def get(self, key: str, now: float) -> Verdict | None:
        """The remembered verdict, ``expired`` for an accepted token past its ``exp``, or
        ``None`` when there is nothing to go by."""
        found = self._entries.get(key)
        if found is None:
            return None
        until, verdict = found
        if now >= until:
            del self._entries[key]
            if verdict.accepted:
                return Verdict(Reason.EXPIRED, "the token has expired")
            return None
        self._entries.move_to_end(key)
        return verdict

    def put(self, key: str, verdict: Verdict, now: float, expires: float | None,
            accepted_seconds: float) -> None:
        """Remember ``verdict`` (``expires``: the accepted token's ``exp``; without one it is
        kept ``accepted_seconds``)."""
        if verdict.reason in (Reason.UNAVAILABLE, Reason.BUSY):
            return
        if verdict.accepted:
            until = expires if expires is not None else now + accepted_seconds
        else:
            until = now + self.refused_seconds
        self._entries[key] = (until, verdict)
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class RateLimit:
    """A token bucket: ``rate`` a second, up to ``burst`` at once."""

    rate: float
    burst: float
    _level: float = -1.0
    _at: float = 0.0

    def take(self, now: float) -> float:
        """0 when one is taken, else the seconds until one will be."""
        if self._level < 0:
            self._level, self._at = self.burst, now
        self._level = min(self.burst, self._level + (now - self._at) * self.rate)
        self._at = now
        if self._level >= 1:
            self._level -= 1
            return 0.0
        return (1 - self._level) / self.rate


# -- configuration -----------------------------------------------------------------------------

MODE = "FUNCTIONS_DELIVERY_AUTH"
AUDIENCE = "FUNCTIONS_DELIVERY_AUDIENCE"
SUBJECTS = "FUNCTIONS_DELIVERY_SUBJECTS"
NAMESPACE = "FUNCTIONS_NAMESPACE"
MODES = ("oidc", "none")


class ConfigError(ValueError):
    """Delivery authentication is on but cannot work as configured; the message says what to
    set."""


@dataclass(frozen=True)
class Settings:
    """How a receiver checks its deliveries.

    ``mode``: ``oidc`` (the default) or ``none`` (an explicit opt-out, for a cluster whose
    Eventing runs without ``authentication-oidc``; ``doctor`` reports it). ``subjects``: token
    subjects accepted besides the Triggers' ServiceAccounts (the local stack's emulated Broker
    names its own).
    """

    mode: str = "oidc"
    audience: str = ""
    namespace: str = ""
    subjects: frozenset[str] = frozenset()
    refresh_seconds: float = 60.0
    min_refresh_seconds: float = 2.0

    @property
    def enabled(self) -> bool:
        return self.mode == "oidc"


DISABLED = Settings(mode="none")


def settings_from(env: Mapping[str, str], receiver: str,
                  namespace_file: str | None = None) -> Settings:
    """The settings of ``receiver`` (a function, ``all`` or ``dead-letters``) from its
    environment: ``FUNCTIONS_DELIVERY_AUTH``, ``FUNCTIONS_DELIVERY_AUDIENCE`` (default: the
    audience of Knative Service ``K_SERVICE``, or of the receiver's Service as config/serving
    names it, in its namespace), ``FUNCTIONS_DELIVERY_SUBJECTS`` (comma-separated) and the
    namespace (``FUNCTIONS_NAMESPACE``, else ``namespace_file``: the pod's ServiceAccount
    namespace)."""
    mode = (env.get(MODE) or "oidc").strip().lower()
    if mode not in MODES:
        raise ConfigError(f"{MODE}={env.get(MODE)!r}: choose one of {', '.join(MODES)}")
    if mode == "none":
        return DISABLED
    namespace = (env.get(NAMESPACE) or namespace_file or "").strip()
    audience = (env.get(AUDIENCE) or "").strip()
    if not namespace:
        raise ConfigError(f"the namespace is unknown: set {NAMESPACE} (a pod reads its "
                          f"ServiceAccount's), or {MODE}=none to accept unauthenticated "
                          "deliveries")
    if not audience:
        service = (env.get("K_SERVICE") or SERVICE_NAMES.get(receiver, "")).strip()
        if not service:
            raise ConfigError(f"no audience for {receiver}: set {AUDIENCE} or K_SERVICE")
        audience = audience_for(namespace, service)
    subjects = frozenset(s.strip() for s in (env.get(SUBJECTS) or "").split(",") if s.strip())
    return Settings(mode=mode, audience=audience, namespace=namespace, subjects=subjects)
