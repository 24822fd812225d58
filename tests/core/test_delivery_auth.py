"""The rules of who may deliver to a function (functions.core.delivery_auth), as data: the
header, the TokenReview's answer, the Triggers' identities, what is remembered and the
settings."""

from __future__ import annotations

import time
from typing import Any

import pytest

from functions.core.delivery_auth import (
    DISABLED,
    ConfigError,
    RateLimit,
    Reason,
    ReviewCache,
    Settings,
    Verdict,
    audience_for,
    bearer_token,
    dead_letter_rule,
    expiry,
    function_rule,
    not_a_jwt,
    reviewed,
    settings_from,
    trigger_subjects,
)
from tests.runtime.delivery_fakes import AUDIENCE, NAMESPACE, token, trigger

JWT = token()


@pytest.mark.parametrize(("header", "expected"), [
    pytest.param(None, Reason.MISSING, id="no-header"),
    pytest.param("   ", Reason.MISSING, id="blank"),
    pytest.param(f"Basic {JWT}", Reason.MALFORMED, id="other-scheme"),
    pytest.param("Bearer", Reason.MALFORMED, id="no-token"),
    pytest.param(f"Bearer {JWT} extra", Reason.MALFORMED, id="two-words"),
    pytest.param("Bearer " + "e" * 20_000, Reason.MALFORMED, id="over-the-size-limit"),
    pytest.param(f"Bearer {JWT}", None, id="a-jwt"),
    pytest.param(f"bearer  {JWT} ", None, id="scheme-case-and-spaces"),
])
def test_the_header_gives_a_token_or_why_not(header: str | None,
                                             expected: Reason | None) -> None:
    found = bearer_token(header)
    if expected is None:
        assert found == JWT
    else:
        assert isinstance(found, Verdict) and found.reason is expected
        assert found.status == 401
        assert JWT not in found.detail


@pytest.mark.parametrize(("token", "refused"), [
    pytest.param("not-a-jwt", True, id="one-segment"),
    pytest.param("a.b.c", True, id="three-segments-not-base64-json"),
    pytest.param(JWT, False, id="a-jwt"),
])
def test_what_is_not_a_jwt_is_refused_before_a_review(token: str, refused: bool) -> None:
    verdict = not_a_jwt(token)
    assert (verdict is not None and verdict.reason is Reason.MALFORMED) is refused


OK = {"authenticated": True, "audiences": [AUDIENCE],
      "user": {"username": "system:serviceaccount:opendatahub:sa"}}


@pytest.mark.parametrize(("status", "reason"), [
    pytest.param(OK, Reason.ACCEPTED, id="valid"),
    pytest.param({**OK, "audiences": None}, Reason.ACCEPTED, id="valid-no-audiences-echoed"),
    pytest.param({**OK, "audiences": ["other"]}, Reason.WRONG_AUDIENCE,
                 id="authenticated-for-another-audience"),
    pytest.param({**OK, "user": {}}, Reason.REFUSED, id="no-user"),
    pytest.param({"authenticated": False, "error": "[invalid bearer token, token audiences "
                  '["x"] is invalid for the target audiences ["y"]]'},
                 Reason.WRONG_AUDIENCE, id="wrong-audience"),
    pytest.param({"authenticated": False, "error": "[invalid bearer token, service account "
                  "token has expired]"}, Reason.EXPIRED, id="expired"),
    pytest.param({"authenticated": False, "error": "[invalid bearer token, square/go-jose: "
                  "error in cryptographic primitive]"}, Reason.REFUSED, id="bad-signature"),
    pytest.param({"authenticated": False}, Reason.REFUSED, id="refused-without-error"),
    pytest.param({}, Reason.REFUSED, id="empty-status"),
])
def test_a_token_review_becomes_a_verdict(status: dict[str, Any], reason: Reason) -> None:
    verdict = reviewed(status, AUDIENCE)
    assert verdict.reason is reason
    if reason is Reason.ACCEPTED:
        assert verdict.subject == "system:serviceaccount:opendatahub:sa"


def test_the_audience_names_the_namespace_as_knative_writes_it() -> None:
    assert audience_for("OpenDataHub", "Odh-Training-Reconcile") == \
        "serving.knative.dev/service/opendatahub/odh-training-reconcile"


def test_expiry_is_the_exp_claim() -> None:
    assert expiry(token(lifetime=100)) == pytest.approx(time.time() + 100, abs=2)
    assert expiry("not-a-token") is None


TRIGGERS = [
    trigger("odh-training-reconcile", "reconcile", "reconcile-oidc"),
    trigger("odh-training-gc", "gc", "gc-oidc", dead_letter_audience="dls"),
    trigger("not-ready", "status", None),
    {"metadata": {"name": "many", "namespace": NAMESPACE, "labels": {}},
     "status": {"auth": {"serviceAccountName": "a", "serviceAccountNames": ["a", "b"]}}},
]


def subject(account: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{account}"


@pytest.mark.parametrize(("rule", "selector", "subjects"), [
    pytest.param(function_rule("reconcile"), "functions.opendatahub.io/function=reconcile",
                 {"reconcile-oidc", "gc-oidc", "a", "b"}, id="one-function"),
    pytest.param(function_rule("all"),
                 "functions.opendatahub.io/function in (reconcile,gc,status,all)",
                 {"reconcile-oidc", "gc-oidc", "a", "b"}, id="all"),
    pytest.param(dead_letter_rule("dls"), None, {"gc-oidc"}, id="dead-letters"),
])
def test_who_may_send_follows_the_triggers(rule: Any, selector: str | None,
                                           subjects: set[str]) -> None:
    """The label selector does the function's choosing (the API server applies it); the
    dead-letter sink chooses by the sink each Trigger's status names."""
    assert rule.label_selector == selector
    assert rule.subjects(TRIGGERS) == {subject(s) for s in subjects}


def test_a_trigger_without_an_identity_allows_nobody() -> None:
    assert trigger_subjects([trigger("t", "reconcile", None)]) == frozenset()


def test_the_cache_remembers_until_exp_and_a_refusal_briefly() -> None:
    cache = ReviewCache(limit=2, refused_seconds=10)
    ok = Verdict(Reason.ACCEPTED, subject="s")
    cache.put("a", ok, now=0, expires=100, accepted_seconds=5)
    assert cache.get("a", 99) == ok
    assert cache.get("a", 100) == Verdict(Reason.EXPIRED, "the token has expired")
    assert cache.get("a", 101) is None  # forgotten: the next review says what it is
    cache.put("b", Verdict(Reason.REFUSED, "no"), now=0, expires=None, accepted_seconds=5)
    assert cache.get("b", 9) is not None and cache.get("b", 10) is None
    cache.put("c", ok, now=0, expires=None, accepted_seconds=5)
    assert cache.get("c", 4.9) == ok and cache.get("c", 5) is not None  # no exp: 5 s


def test_the_cache_is_bounded_and_keeps_the_recently_used() -> None:
    cache = ReviewCache(limit=2)
    ok = Verdict(Reason.ACCEPTED, subject="s")
    for key in ("a", "b"):
        cache.put(key, ok, now=0, expires=100, accepted_seconds=5)
    cache.get("a", 1)
    cache.put("c", ok, now=1, expires=100, accepted_seconds=5)
    assert (cache.get("a", 2), cache.get("b", 2), len(cache)) == (ok, None, 2)


@pytest.mark.parametrize("reason", [Reason.UNAVAILABLE, Reason.BUSY])
def test_the_cache_never_keeps_a_transient_answer(reason: Reason) -> None:
    cache = ReviewCache()
    cache.put("a", Verdict(reason), now=0, expires=None, accepted_seconds=5)
    assert cache.get("a", 0) is None


def test_the_rate_limit_allows_a_burst_then_its_rate() -> None:
    limit = RateLimit(rate=2, burst=3)
    assert [limit.take(0) for _ in range(3)] == [0, 0, 0]
    assert limit.take(0) == pytest.approx(0.5)
    assert limit.take(0.5) == 0


@pytest.mark.parametrize(("env", "namespace_file", "expected"), [
    pytest.param({}, "opendatahub",
                 Settings(audience=AUDIENCE, namespace="opendatahub"), id="on-by-default"),
    pytest.param({"K_SERVICE": "mine"}, "ns",
                 Settings(audience="serving.knative.dev/service/ns/mine", namespace="ns"),
                 id="knative-names-the-service"),
    pytest.param({"FUNCTIONS_NAMESPACE": "elsewhere"}, "opendatahub",
                 Settings(audience="serving.knative.dev/service/elsewhere/"
                          "odh-training-reconcile", namespace="elsewhere"),
                 id="namespace-set"),
    pytest.param({"FUNCTIONS_DELIVERY_AUDIENCE": "aud", "FUNCTIONS_DELIVERY_SUBJECTS":
                  " a , b,,"}, "ns",
                 Settings(audience="aud", namespace="ns", subjects=frozenset({"a", "b"})),
                 id="audience-and-subjects-set"),
    pytest.param({"FUNCTIONS_DELIVERY_AUTH": "None"}, None, DISABLED, id="opt-out"),
])
def test_settings_from_the_environment(env: dict[str, str], namespace_file: str | None,
                                       expected: Settings) -> None:
    assert settings_from(env, "reconcile", namespace_file) == expected


@pytest.mark.parametrize(("env", "namespace_file", "message"), [
    pytest.param({"FUNCTIONS_DELIVERY_AUTH": "off"}, "ns", "choose one of oidc, none",
                 id="unknown-mode"),
    pytest.param({}, None, "FUNCTIONS_NAMESPACE", id="no-namespace"),
])
def test_settings_that_cannot_work_say_what_to_set(env: dict[str, str],
                                                   namespace_file: str | None,
                                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from(env, "reconcile", namespace_file)


def test_an_unknown_receiver_without_k_service_has_no_audience() -> None:
    with pytest.raises(ConfigError, match="K_SERVICE"):
        settings_from({}, "something", "ns")
