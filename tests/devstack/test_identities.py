"""Who the local receivers are and whom they take deliveries from: each reads its audience
from the namespace and Service a pod would know, and the emulated Broker's tokens are asked
for per audience and again before they expire."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest

from devstack.cluster.runner import LocalCluster
from devstack.identities import SERVED, delivery_env, function_identities
from devstack.knative_stack import KnativeEventing
from devstack.tokens import DELIVERY_TOKEN_SECONDS, RENEW_BEFORE_SECONDS, TokenSource
from functions.core.delivery_auth import audience_for, settings_from
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from tests.support import REPO

IDENTITIES = function_identities(REPO / "config" / "serving", SERVED)


@pytest.mark.parametrize("identity", IDENTITIES, ids=lambda i: i.function)
def test_each_receiver_checks_the_audience_its_trigger_names(identity: Any) -> None:
    """The environment the stack gives a receiver makes it expect the audience eventing/
    names for it (the functions' Triggers, the Broker's dead-letter sink)."""
    env = delivery_env(identity, enabled=True)
    settings = settings_from(env, identity.function)
    assert settings.audience == audience_for(identity.namespace, identity.service)
    assert settings.audience in (REPO / "eventing" / ("broker.yaml" if identity.function ==
                                 "dead-letters" else "triggers.yaml")).read_text()


def test_the_emulated_brokers_identity_is_a_sender_and_off_is_off() -> None:
    identity = IDENTITIES[0]
    env = delivery_env(identity, enabled=True, senders=("system:serviceaccount:ns:broker",))
    assert settings_from(env, identity.function).subjects == {"system:serviceaccount:ns:broker"}
    assert not settings_from(delivery_env(identity, enabled=False), identity.function).enabled


@pytest.mark.parametrize(("oidc", "flag"), [pytest.param(True, "enabled", id="on"),
                                            pytest.param(False, None, id="off")])
def test_knative_runs_with_authentication_oidc(tmp_path: Path, oidc: bool,
                                               flag: str | None) -> None:
    cluster = LocalCluster(tmp_path / "bin", state_dir=tmp_path / "state")  # not started
    eventing = KnativeEventing(cluster=cluster, bin_dir=tmp_path, proxy_port=0, oidc=oidc)
    assert eventing.features().get("authentication-oidc") == flag


class TokenRequests:
    """Answers TokenRequests with a token naming the audience asked for."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def send(self, request: Request, timeout: float) -> Response:
        spec = json.loads(request.body or b"{}")["spec"]
        self.asked.append(spec)
        token = jwt.encode({"aud": spec["audiences"], "n": len(self.asked)}, "k" * 32)
        return Response(201, {}, json.dumps({"status": {"token": token}}).encode())

    def refresh_credentials(self) -> None:
        pass


def test_tokens_per_audience_asked_again_before_they_expire() -> None:
    server = TokenRequests()
    now = [0.0]
    source = TokenSource(KubeClient(server, retries=0), "ns", "broker", clock=lambda: now[0])
    first = source("a")
    assert source("a") == first and len(server.asked) == 1
    assert jwt.decode(source("b"), options={"verify_signature": False})["aud"] == ["b"]
    assert server.asked[0] == {"audiences": ["a"], "expirationSeconds": DELIVERY_TOKEN_SECONDS}
    now[0] = DELIVERY_TOKEN_SECONDS - RENEW_BEFORE_SECONDS
    assert source("a") != first and len(server.asked) == 3
    assert source.subject == "system:serviceaccount:ns:broker"
