"""Only the Broker's deliveries are accepted (functions.runtime.delivery_auth): each case of the
check against an API server that reviews tokens as kube-apiserver does, what a delivery costs
in API requests, and the answers a function and the dead-letter sink give, in process."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from functions.core.delivery_auth import DISABLED, Reason, Settings, audience_for, function_rule
from functions.runtime.app import create_app
from functions.runtime.dead_letters import create_dead_letter_app
from functions.runtime.delivery_auth import DeliveryAuth
from tests.core.test_events import load_sample
from tests.runtime.delivery_fakes import (
    AUDIENCE,
    BROKER_SUBJECT,
    NAMESPACE,
    SETTINGS,
    FakeApiServer,
    token,
    trigger,
)

OTHER_SUBJECT = f"system:serviceaccount:{NAMESPACE}:someone-else"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


def checker(api: FakeApiServer, settings: Settings = SETTINGS,
            clock: Clock | None = None) -> DeliveryAuth:
    kube = api.client()
    clock = clock or Clock()

    def sleep(seconds: float) -> None:
        clock.now += seconds

    return DeliveryAuth("reconcile", settings, function_rule("reconcile"), lambda: kube,
                        clock=clock, sleep=sleep)


@pytest.mark.parametrize(("header", "reason", "status"), [
    pytest.param(None, Reason.MISSING, 401, id="no-header"),
    pytest.param("Bearer not-a-jwt", Reason.MALFORMED, 401, id="malformed-header"),
    pytest.param(f"Bearer {token(key='another-signing-key-of-32-bytes!')}", Reason.REFUSED, 401,
                 id="refused-by-the-token-review"),
    pytest.param(f"Bearer {token(audience='mt-broker-filter')}", Reason.WRONG_AUDIENCE, 401,
                 id="wrong-audience"),
    pytest.param(f"Bearer {token(lifetime=-60)}", Reason.EXPIRED, 401, id="expired"),
    pytest.param(f"Bearer {token(subject=OTHER_SUBJECT)}", Reason.FORBIDDEN, 403,
                 id="valid-of-another-service-account"),
    pytest.param(f"Bearer {token()}", Reason.ACCEPTED, 200,
                 id="valid-of-the-trigger-service-account"),
])
def test_a_delivery_is_judged_by_its_token(api: FakeApiServer, header: str | None,
                                           reason: Reason, status: int) -> None:
    verdict = checker(api).check(header)
    assert (verdict.reason, verdict.status) == (reason, status)
    if header is not None and header.startswith("Bearer ey"):
        assert header.split()[1] not in verdict.detail


def test_a_known_token_costs_no_request(api: FakeApiServer) -> None:
    auth = checker(api)
    auth.allowed_subjects()
    header = f"Bearer {token()}"
    assert auth.check(header).accepted
    before = api.count()
    assert all(auth.check(header).accepted for _ in range(50))
    assert api.count() == before
    [review] = api.reviews  # one, asked for the function's own audience
    assert review["audiences"] == [AUDIENCE]


def test_a_refused_token_costs_one_review_per_interval(api: FakeApiServer) -> None:
    wall = Clock()
    kube = api.client()
    auth = DeliveryAuth("reconcile", SETTINGS, function_rule("reconcile"), lambda: kube,
                        wall=wall)
    header = f"Bearer {token(audience='other')}"
    for _ in range(20):
        assert auth.check(header).reason is Reason.WRONG_AUDIENCE
    assert api.count("/apis/authentication.k8s.io") == 1
    wall.now += 11
    assert auth.check(header).reason is Reason.WRONG_AUDIENCE
    assert api.count("/apis/authentication.k8s.io") == 2


def test_a_cached_token_past_its_exp_is_expired_without_a_request(api: FakeApiServer) -> None:
    wall = Clock()
    kube = api.client()
    auth = DeliveryAuth("reconcile", SETTINGS, function_rule("reconcile"), lambda: kube,
                        wall=wall)
    short = token(lifetime=30)
    wall.now = time.time()
    assert auth.check(f"Bearer {short}").accepted
    before = api.count()
    wall.now += 31
    assert auth.check(f"Bearer {short}").reason is Reason.EXPIRED
    assert api.count() == before


@pytest.mark.parametrize("broken", [
    pytest.param("down", id="api-server-unreachable"),
    pytest.param("forbidden", id="tokenreviews-not-allowed"),
])
def test_no_verdict_without_the_api_server_is_a_503(api: FakeApiServer, broken: str) -> None:
    if broken == "down":
        api.down = True
    else:
        api.forbid.add("tokenreviews")
    verdict = checker(api).check(f"Bearer {token()}")
    assert (verdict.reason, verdict.status) == (Reason.UNAVAILABLE, 503)
    assert verdict.retry_after is not None and verdict.retry_after > 0
    api.down = False
    api.forbid.clear()
    assert checker(api).check(f"Bearer {token()}").accepted


def test_triggers_out_of_reach_are_a_503_for_a_subject_not_yet_known(
        api: FakeApiServer) -> None:
    api.forbid.add("triggers")
    verdict = checker(api).check(f"Bearer {token()}")
    assert (verdict.reason, verdict.status) == (Reason.UNAVAILABLE, 503)
    assert "Triggers could not be listed" in verdict.detail


TRIGGER_LISTS = f"/apis/eventing.knative.dev/v1/namespaces/{NAMESPACE}/triggers"


def test_a_trigger_made_since_the_last_listing_is_found_at_once(api: FakeApiServer) -> None:
    """The Broker sends for a Trigger once it is Ready: a listing begun after its identity is
    first seen has it. Such a listing is made at once, waiting for the interval since the
    last one rather than refusing."""
    clock = Clock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    kube = api.client()
    auth = DeliveryAuth("reconcile", SETTINGS, function_rule("reconcile"), lambda: kube,
                        clock=clock, sleep=sleep)
    auth.allowed_subjects()
    lists = api.count(TRIGGER_LISTS)
    api.triggers.append(trigger("new", "reconcile", "new-trigger-oidc"))
    clock.now += 0.5
    newcomer = f"system:serviceaccount:{NAMESPACE}:new-trigger-oidc"
    assert auth.check(f"Bearer {token(subject=newcomer)}").accepted
    assert api.count(TRIGGER_LISTS) == lists + 1
    assert slept == [pytest.approx(1.5)]
    # a listed identity costs no listing until the list is old
    clock.now += 30
    assert auth.check(f"Bearer {token()}").accepted
    assert api.count(TRIGGER_LISTS) == lists + 1
    clock.now += 60
    assert auth.check(f"Bearer {token()}").accepted
    assert api.count(TRIGGER_LISTS) == lists + 2


def test_an_identity_refused_once_is_refused_again_without_a_listing(
        api: FakeApiServer) -> None:
    clock = Clock()
    auth = checker(api, clock=clock)
    auth.allowed_subjects()
    clock.now += 5
    assert auth.check(f"Bearer {token(subject=OTHER_SUBJECT)}").reason is Reason.FORBIDDEN
    lists = api.count(TRIGGER_LISTS)
    for extra in range(1, 20):
        clock.now += 3
        verdict = auth.check(f"Bearer {token(subject=OTHER_SUBJECT, lifetime=3600 + extra)}")
        assert verdict.reason is Reason.FORBIDDEN
    assert api.count(TRIGGER_LISTS) == lists  # 57 s: before the periodic listing


def test_only_the_functions_own_triggers_count(api: FakeApiServer) -> None:
    """A Trigger of another function (or without the label) is another identity."""
    api.triggers = [trigger("odh-training-gc", "gc", "odh-training-reconcile-oidc-eventing."
                            "knative.dev-trigger")]
    assert checker(api).check(f"Bearer {token()}").reason is Reason.FORBIDDEN


def test_explicit_subjects_pass_without_any_trigger(api: FakeApiServer) -> None:
    api.serves_triggers = False
    broker = f"system:serviceaccount:{NAMESPACE}:odh-training-dev-broker"
    settings = Settings(audience=AUDIENCE, namespace=NAMESPACE, subjects=frozenset({broker}))
    auth = checker(api, settings)
    assert auth.check(f"Bearer {token(subject=broker)}").accepted
    assert auth.check(f"Bearer {token()}").reason is Reason.FORBIDDEN  # no Triggers API


def test_tokens_made_up_in_a_burst_are_held_to_a_rate(api: FakeApiServer) -> None:
    auth = checker(api)
    verdicts = [auth.check(f"Bearer {token(lifetime=3600 + i)}").reason for i in range(80)]
    assert verdicts.count(Reason.BUSY) >= 20
    assert api.count("/apis/authentication.k8s.io") <= 55


# -- the function's answers -------------------------------------------------------------------


@pytest.fixture
def function_client(api: FakeApiServer) -> Any:
    kube = api.client()
    app = create_app("reconcile", controllers=[], kube_factory=lambda hook: kube,
                     warm_up="now", delivery_auth=SETTINGS)
    return app.test_client()


def metric(client: Any, reason: str) -> float:
    text = client.get("/metrics").get_data(as_text=True)
    for family in text_string_to_metric_families(text):
        if family.name == "odh_training_delivery_auth":
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels["reason"] == reason:
                    return float(sample.value)
    return 0.0


@pytest.mark.parametrize(("header", "status", "reason", "challenge"), [
    pytest.param(None, 401, "missing", "Bearer", id="no-token"),
    pytest.param(f"Bearer {token(audience='another')}", 401, "wrong_audience",
                 'Bearer error="invalid_token"', id="another-audience"),
    pytest.param(f"Bearer {token(subject=OTHER_SUBJECT)}", 403, "forbidden", None,
                 id="another-service-account"),
    pytest.param(f"Bearer {token()}", 202, "accepted", None, id="the-brokers-delivery"),
])
def test_the_function_answers_by_the_verdict(function_client: Any, header: str | None,
                                             status: int, reason: str,
                                             challenge: str | None,
                                             caplog: pytest.LogCaptureFixture) -> None:
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    if header is not None:
        headers = {**headers, "Authorization": header}
    with caplog.at_level(logging.INFO):
        answer = function_client.post("/", headers=headers, data=body)
    assert answer.status_code == status
    assert metric(function_client, reason) == 1
    assert answer.headers.get("WWW-Authenticate") == challenge
    if status != 202:
        problem = answer.get_json(force=True)
        assert answer.mimetype == "application/problem+json"
        assert problem["status"] == status and problem["detail"].startswith(reason)
        assert reason in caplog.text
    if header is not None:
        assert header.split()[1] not in caplog.text


def test_a_refused_delivery_is_answered_before_its_body_is_read(api: FakeApiServer) -> None:
    class Untouchable(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise AssertionError("the body was read")

    kube = api.client()
    app = create_app("reconcile", controllers=[], kube_factory=lambda hook: kube,
                     warm_up="now", delivery_auth=SETTINGS)
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": "10",
               "wsgi.input": Untouchable(), "HTTP_AUTHORIZATION": "Bearer nope"}
    started: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
        started.append(status)

    body = b"".join(app.wsgi_app(environ, start_response))
    assert started == ["401 Unauthorized"] and b"malformed" in body


def test_unworkable_settings_fail_readiness_and_deliveries_get_503(
        monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    for name in ("FUNCTIONS_DELIVERY_AUTH", "FUNCTIONS_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("functions.runtime.delivery_auth.SERVICE_ACCOUNT_DIR",
                        Path("/nonexistent"))
    kube = api.client()
    client = create_app("reconcile", controllers=[], kube_factory=lambda hook: kube,
                        warm_up="now").test_client()
    readiness = client.get("/health/readiness")
    assert readiness.status_code == 503 and b"FUNCTIONS_NAMESPACE" in readiness.data
    answer = client.post("/", headers={"Authorization": f"Bearer {token()}"}, data=b"{}")
    assert answer.status_code == 503 and "Retry-After" in answer.headers


def test_on_by_default(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    """Without any setting (the container's environment) a delivery needs a token."""
    monkeypatch.delenv("FUNCTIONS_DELIVERY_AUTH", raising=False)
    monkeypatch.setenv("FUNCTIONS_NAMESPACE", NAMESPACE)
    kube = api.client()
    client = create_app("reconcile", controllers=[], kube_factory=lambda hook: kube,
                        warm_up="now").test_client()
    assert client.post("/", data=b"{}").status_code == 401


def test_the_opt_out_accepts_without_a_token(api: FakeApiServer) -> None:
    kube = api.client()
    client = create_app("reconcile", controllers=[], kube_factory=lambda hook: kube,
                        warm_up="now", delivery_auth=DISABLED).test_client()
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    assert client.post("/", headers=headers, data=body).status_code == 202
    assert api.count("/apis/authentication.k8s.io") == 0


# -- the dead-letter sink ---------------------------------------------------------------------

DLS_AUDIENCE = audience_for(NAMESPACE, "odh-training-dead-letters")


@pytest.mark.parametrize(("subject", "audience", "status", "lines"), [
    pytest.param(BROKER_SUBJECT, DLS_AUDIENCE, 202, 1, id="a-trigger-whose-dead-letters-come-here"),
    pytest.param(OTHER_SUBJECT, DLS_AUDIENCE, 403, 0, id="another-service-account"),
    pytest.param(BROKER_SUBJECT, AUDIENCE, 401, 0, id="a-token-for-the-function"),
    pytest.param(None, None, 401, 0, id="no-token"),
])
def test_the_dead_letter_sink_takes_the_brokers_dead_letters_only(
        subject: str | None, audience: str | None, status: int, lines: int) -> None:
    api = FakeApiServer([trigger("odh-training-reconcile", "reconcile",
                                 "odh-training-reconcile-oidc-eventing.knative.dev-trigger",
                                 dead_letter_audience=DLS_AUDIENCE),
                         trigger("odh-training-status", "status", "someone-else")])
    kube = api.client()
    out = io.StringIO()
    client = create_dead_letter_app(
        out=out, kube_factory=lambda hook: kube,
        delivery_auth=Settings(audience=DLS_AUDIENCE, namespace=NAMESPACE)).test_client()
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    if subject is not None and audience is not None:
        credential = token(subject=subject, audience=audience)
        headers = {**headers, "Authorization": f"Bearer {credential}"}
    answer = client.post("/", headers=headers, data=body)
    assert answer.status_code == status
    assert len(out.getvalue().splitlines()) == lines
    text = client.get("/metrics").get_data(as_text=True)
    assert 'odh_training_delivery_auth_total{function="dead-letters"' in text
