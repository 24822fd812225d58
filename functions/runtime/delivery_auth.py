"""Only the Broker's deliveries are accepted: each ``POST /`` of a function (and of the
dead-letter sink) is checked here before its body is read.

The rules are :mod:`functions.core.delivery_auth`'s; this module asks the API server what they
need, through the process's own client: a TokenReview of each token new to the process, for
its own audience (:func:`functions.kube.reviews.review_token`), and the list of its Triggers,
whose ``status.auth`` names the ServiceAccounts the Broker sends with. Both are kept, so a
delivery costs no API request in the steady state: a token's review until the token's ``exp``
(at most :data:`CACHE_LIMIT` tokens), the Triggers for ``refresh_seconds`` (60). A valid token
of an identity not among them (a Trigger just made) has them listed again at once, at most
every ``min_refresh_seconds`` (2; a delivery waits for that rather than be refused before a
listing begun after its identity was first seen); that identity is then refused (403)
without another listing. Thread-safe; one per process.

Refusals are problem documents (401 with ``WWW-Authenticate: Bearer``, 403, 429 and 503 with
``Retry-After``), each counted (``odh_training_delivery_auth_total`` by function and reason) and
logged with its reason and subject; the token itself is never logged, kept or forwarded.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from functions.core.delivery_auth import (
    MODE,
    ConfigError,
    RateLimit,
    Reason,
    ReviewCache,
    SenderRule,
    Settings,
    Verdict,
    bearer_token,
    dead_letter_rule,
    digest,
    expiry,
    function_rule,
    not_a_jwt,
    reviewed,
    settings_from,
)
from functions.core.errors import TemporaryError
from functions.kube.client import ApiError, KubeClient
from functions.kube.config import SERVICE_ACCOUNT_DIR
from functions.kube.resources import Resource
from functions.kube.reviews import review_token
from functions.runtime.endpoint import Answer, problem_answer

log = logging.getLogger(__name__)

TRIGGERS = Resource("eventing.knative.dev", "v1", "triggers", "Trigger")
CACHE_LIMIT = 10_000
# An accepted token without ``exp`` (no ServiceAccount token lacks one) is trusted this long.
NO_EXPIRY_SECONDS = 60.0
# Reviews of tokens new to the process: a burst's few Trigger tokens pass at once; a client
# making up tokens gets 429 beyond this.
REVIEWS_PER_SECOND = 20.0
REVIEW_BURST = 50.0
UNAVAILABLE_RETRY_SECONDS = 5.0
UNKNOWN_LIMIT = 1024

Observe = Callable[[str], None]


class DeliveryAuth:
    """Decides each delivery of one receiver (a function, ``all``, or the dead-letter sink).

    :param kube: the process's API client (its ServiceAccount may create tokenreviews and
        list triggers in its namespace).
    :param observe: told the reason of every verdict (the metric).
    """

    def __init__(self, name: str, settings: Settings, rule: SenderRule,
                 kube: Callable[[], KubeClient], observe: Observe | None = None,
                 wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name = name
        self.settings = settings
        self.rule = rule
        self._kube = kube
        self._observe = observe
        self._wall = wall
        self._clock = clock
        self._lock = threading.Lock()
        self._refresh = threading.Lock()
        self._reviews = ReviewCache(limit=CACHE_LIMIT)
        self._limit = RateLimit(REVIEWS_PER_SECOND, REVIEW_BURST)
        self._sleep = sleep
        self._subjects: frozenset[str] | None = None
        self._failure: str | None = None
        self._attempted_at = float("-inf")
        # when the last listing that succeeded began, and when each identity not among the
        # Triggers' was first seen
        self._listed_from = float("-inf")
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self._no_triggers_api = False

    # -- the verdict --------------------------------------------------------------------------

    def refusal(self, authorization: str | None) -> Answer | None:
        """``None`` when the delivery may proceed, else the answer refusing it."""
        verdict = self.check(authorization)
        if self._observe is not None:
            self._observe(verdict.reason.value)
        if verdict.accepted:
            return None
        log.info("%s refused a delivery: %s (%s)%s", self.name, verdict.reason.value,
                 verdict.detail, f"; subject {verdict.subject}" if verdict.subject else "")
        return refusal_answer(verdict)

    def check(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if isinstance(token, Verdict):
            return token
        verdict = self._review(token)
        if not verdict.accepted:
            return verdict
        return self._authorize(verdict.subject)

    def _review(self, token: str) -> Verdict:
        key, now = digest(token), self._wall()
        with self._lock:
            known = self._reviews.get(key, now)
            wait = 0.0 if known is not None else self._limit.take(self._clock())
        if known is not None:
            return known
        shapeless = not_a_jwt(token)
        if shapeless is not None:
            return shapeless
        if wait:
            return Verdict(Reason.BUSY, "too many tokens new to this function at once",
                           retry_after=wait)
        audience = self.settings.audience
        try:
            status = review_token(self._kube(), token, [audience])
        except TemporaryError as exc:
            return Verdict(Reason.UNAVAILABLE, f"the token could not be reviewed: {exc}",
                           retry_after=max(exc.retry_after, UNAVAILABLE_RETRY_SECONDS))
        except ApiError as exc:
            log.error("%s cannot review tokens (%s): may its ServiceAccount create "
                      "tokenreviews?", self.name, exc)
            return Verdict(Reason.UNAVAILABLE, f"the token could not be reviewed: {exc.status} "
                           f"{exc.reason}", retry_after=UNAVAILABLE_RETRY_SECONDS)
        verdict = reviewed(status, audience)
        expires = expiry(token) if verdict.accepted else None
        with self._lock:
            self._reviews.put(key, verdict, self._wall(), expires, NO_EXPIRY_SECONDS)
        return verdict

    def _authorize(self, subject: str) -> Verdict:
        if subject in self.settings.subjects:
            return Verdict(Reason.ACCEPTED, subject=subject)
        subjects, failure = self.allowed_subjects()
        if subjects is not None and subject in subjects:
            return Verdict(Reason.ACCEPTED, subject=subject)
        # Not listed: perhaps a Trigger made since. The Broker sends for a Trigger only once
        # it is Ready, its identity in its status, so a listing begun after the subject was
        # first seen settles it; until one has, it is not refused.
        first = self._first_seen(subject)
        if self._listed_from < first:
            subjects, failure = self._relist_after(first)
            if subjects is not None and subject in subjects:
                return Verdict(Reason.ACCEPTED, subject=subject)
        if self._listed_from >= first:
            return Verdict(Reason.FORBIDDEN, f"{subject} is not the identity of a Trigger of "
                           f"{self.name}", subject=subject)
        return Verdict(Reason.UNAVAILABLE, failure or "the Triggers could not be listed",
                       subject=subject, retry_after=UNAVAILABLE_RETRY_SECONDS)

    # -- the Triggers -------------------------------------------------------------------------

    def allowed_subjects(self) -> tuple[frozenset[str] | None, str | None]:
        """The subjects of the Triggers, listed again once ``refresh_seconds`` have passed
        since the last attempt; and why the last listing failed, if it did (the subjects
        listed before that are kept)."""
        if self._clock() - self._attempted_at >= self.settings.refresh_seconds:
            with self._refresh:
                if self._clock() - self._attempted_at >= self.settings.refresh_seconds:
                    self._list()  # else another thread has just listed
        return self._subjects, self._failure

    def _relist_after(self, first: float) -> tuple[frozenset[str] | None, str | None]:
        """The subjects as a listing begun after ``first`` has them: one another thread began
        since, or one begun now, once ``min_refresh_seconds`` have passed since the last
        attempt (waiting for them: at most that long, so a flood of identities never listed
        costs at most one listing per interval)."""
        with self._refresh:
            if self._listed_from < first:
                wait = self.settings.min_refresh_seconds - (self._clock() - self._attempted_at)
                if wait > 0:
                    self._sleep(wait)
                self._list()
        return self._subjects, self._failure

    def _first_seen(self, subject: str) -> float:
        """When an identity not among the Triggers' was first seen (the last
        :data:`UNKNOWN_LIMIT` of them are remembered)."""
        with self._lock:
            first = self._unknown.setdefault(subject, self._clock())
            self._unknown.move_to_end(subject)
            while len(self._unknown) > UNKNOWN_LIMIT:
                self._unknown.popitem(last=False)
            return first

    def _list(self) -> None:
        began = self._attempted_at = self._clock()
        try:
            triggers = self._list_triggers()
        except (TemporaryError, ApiError) as exc:
            self._failure = f"the Triggers could not be listed: {exc}"
            log.warning("%s: %s", self.name, self._failure)
            return
        self._subjects, self._failure = self.rule.subjects(triggers), None
        self._listed_from = began

    def _list_triggers(self) -> list[dict[str, Any]]:
        try:
            return self._kube().list(TRIGGERS, self.settings.namespace,
                                     label_selector=self.rule.label_selector)
        except ApiError as exc:
            if exc.status != 404:
                raise
            if not self._no_triggers_api:
                self._no_triggers_api = True
                log.warning("%s: the API server serves no Triggers (no Knative Eventing): "
                            "only %s may deliver", self.name,
                            ", ".join(sorted(self.settings.subjects)) or "nobody")
            return []


def refusal_answer(verdict: Verdict) -> Answer:
    """The problem document refusing a delivery (with the challenge of a 401)."""
    status, headers, body = problem_answer(verdict.status, f"{verdict.reason.value}: "
                                           f"{verdict.detail}", retry_after=verdict.retry_after)
    if status == 401:
        headers.append(("WWW-Authenticate", "Bearer" if verdict.reason is Reason.MISSING
                        else 'Bearer error="invalid_token"'))
    return status, headers, body


class DeliveryGate:
    """The delivery check of one receiver, made from its settings on first use (``settings``
    ``None``: the environment's, the namespace the pod's ServiceAccount's). Settings that
    cannot work (:class:`~functions.core.delivery_auth.ConfigError`) make :meth:`prepare`
    raise, so a function's warm-up fails its readiness, and every delivery a 503 meanwhile."""

    def __init__(self, receiver: str, settings: Settings | None,
                 kube: Callable[[], KubeClient], observe: Observe | None = None) -> None:
        self.receiver = receiver
        self._settings = settings
        self._kube = kube
        self._observe = observe
        self._lock = threading.Lock()
        self._made = False
        self._auth: DeliveryAuth | None = None

    def auth(self) -> DeliveryAuth | None:
        """The check, or ``None`` when it is turned off (``FUNCTIONS_DELIVERY_AUTH=none``)."""
        with self._lock:
            if not self._made:
                self._auth, self._made = self._make(), True
            return self._auth

    def prepare(self) -> None:
        """Make the check and list the Triggers, before the first delivery arrives (a listing
        that fails is tried again by the deliveries)."""
        auth = self.auth()
        if auth is not None:
            auth.allowed_subjects()

    def admit(self, authorization: str | None) -> Answer | None:
        """``None`` when the delivery may proceed, else the answer refusing it."""
        try:
            auth = self.auth()
        except ConfigError as exc:
            if self._observe is not None:
                self._observe(Reason.UNAVAILABLE.value)
            return problem_answer(503, f"delivery authentication cannot work: {exc}",
                                  retry_after=30)
        return None if auth is None else auth.refusal(authorization)

    def _make(self) -> DeliveryAuth | None:
        settings = self._settings or settings_from(os.environ, self.receiver, _pod_namespace())
        if not settings.enabled:
            log.warning("%s accepts deliveries from anyone: %s=none", self.receiver, MODE)
            return None
        rule = (dead_letter_rule(settings.audience) if self.receiver == "dead-letters"
                else function_rule(self.receiver))
        log.info("%s accepts deliveries with a token for %s from the Triggers of %s%s",
                 self.receiver, settings.audience, settings.namespace,
                 f" and from {', '.join(sorted(settings.subjects))}" if settings.subjects
                 else "")
        return DeliveryAuth(self.receiver, settings, rule, self._kube, self._observe)


def _pod_namespace() -> str | None:
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
    except OSError:
        return None
