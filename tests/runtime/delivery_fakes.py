"""A stand-in API server for the delivery check: TokenReview as the real one answers it (a
signed ServiceAccount token, valid for the asked audiences, until its ``exp``) and a
namespace's Triggers with Knative's ``status.auth``. Every request is counted, so a test can
say what a delivery cost."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import jwt

from functions.core.delivery_auth import FUNCTION_LABEL, Settings, audience_for, subject_of
from functions.kube.client import KubeClient
from functions.kube.reviews import TOKENREVIEWS
from functions.kube.transport import Request, Response, TransportError
from functions.runtime.delivery_auth import TRIGGERS

NAMESPACE = "opendatahub"
AUDIENCE = audience_for(NAMESPACE, "odh-training-reconcile")
SIGNING_KEY = "a-test-signing-key-of-32-bytes!!"
TRIGGER_ACCOUNT = "odh-training-reconcile-oidc-eventing.knative.dev-trigger"
BROKER_SUBJECT = subject_of(NAMESPACE, TRIGGER_ACCOUNT)
SETTINGS = Settings(audience=AUDIENCE, namespace=NAMESPACE)


def token(subject: str = BROKER_SUBJECT, audience: str = AUDIENCE,
          lifetime: float = 3600.0, key: str = SIGNING_KEY) -> str:
    """A ServiceAccount-like token (what TokenRequest returns)."""
    now = time.time()
    return jwt.encode({"iss": "https://kubernetes.default.svc", "sub": subject,
                       "aud": [audience], "iat": int(now), "exp": int(now + lifetime)},
                      key, algorithm="HS256")


def trigger(name: str, function: str, account: str | None,
            dead_letter_audience: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if account:
        status["auth"] = {"serviceAccountName": account}
    if dead_letter_audience:
        status["deadLetterSinkAudience"] = dead_letter_audience
    return {"metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {FUNCTION_LABEL: function}}, "status": status}


class FakeApiServer:
    """TokenReview and Triggers; ``down`` makes every request fail as an unreachable server
    does, ``forbid`` answers 403 to what the caller may not do."""

    def __init__(self, triggers: list[dict[str, Any]] | None = None) -> None:
        self.triggers = list(triggers if triggers is not None
                             else [trigger("odh-training-reconcile", "reconcile",
                                           TRIGGER_ACCOUNT)])
        self.down = False
        self.forbid: set[str] = set()
        self.serves_triggers = True
        self.requests: list[tuple[str, str, Mapping[str, str]]] = []
        self.reviews: list[dict[str, Any]] = []  # the TokenReviews' specs
        self._lock = threading.Lock()

    def client(self) -> KubeClient:
        return KubeClient(self, retries=0, timeout=1.0)

    def count(self, path: str = "") -> int:
        with self._lock:
            return sum(1 for _, p, _ in self.requests if p.startswith(path))

    def refresh_credentials(self) -> None:
        pass

    def send(self, request: Request, timeout: float) -> Response:
        with self._lock:
            self.requests.append((request.method, request.path, dict(request.query)))
        if self.down:
            raise TransportError(f"{request.method} {request.path}: connection refused")
        if request.path == TOKENREVIEWS.path() and request.method == "POST":
            if "tokenreviews" in self.forbid:
                return _answer(403, {"reason": "Forbidden", "message": "may not"})
            spec = json.loads(request.body or b"{}")["spec"]
            with self._lock:
                self.reviews.append(spec)
            return _answer(201, {"status": review(spec)})
        if request.path == TRIGGERS.path(NAMESPACE) and request.method == "GET":
            if not self.serves_triggers:
                return _answer(404, {"reason": "NotFound", "message": "the server could not "
                                     "find the requested resource"})
            if "triggers" in self.forbid:
                return _answer(403, {"reason": "Forbidden", "message": "may not"})
            wanted = _selected(request.query.get("labelSelector"))
            items = [t for t in self.triggers if wanted(t["metadata"]["labels"])]
            return _answer(200, {"items": items, "metadata": {"resourceVersion": "1"}})
        return _answer(404, {"reason": "NotFound", "message": request.path})


def review(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The status a kube-apiserver gives a TokenReview of a ServiceAccount token, with the
    error texts it writes."""
    audiences = list(spec.get("audiences") or ["https://kubernetes.default.svc"])
    try:
        claims = jwt.decode(spec["token"], SIGNING_KEY, algorithms=["HS256"],
                            options={"verify_aud": False})
    except jwt.ExpiredSignatureError:
        return {"authenticated": False, "error": "[invalid bearer token, service account "
                "token has expired]", "user": {}}
    except jwt.PyJWTError:
        return {"authenticated": False, "error": "[invalid bearer token, square/go-jose: "
                "error in cryptographic primitive]", "user": {}}
    matched = [a for a in audiences if a in claims["aud"]]
    if not matched:
        return {"authenticated": False, "user": {}, "error": "[invalid bearer token, token "
                f"audiences {json.dumps(claims['aud'])} is invalid for the target audiences "
                f"{json.dumps(audiences)}]"}
    return {"authenticated": True, "audiences": matched,
            "user": {"username": claims["sub"], "groups": ["system:serviceaccounts"]}}


def _selected(selector: str | None) -> Any:
    if not selector:
        return lambda labels: True
    key, _, rest = selector.partition(" in (")
    if rest:
        values = set(rest.rstrip(")").split(","))
        return lambda labels: labels.get(key) in values
    key, _, value = selector.partition("=")
    return lambda labels: labels.get(key) == value


def _answer(status: int, body: dict[str, Any]) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())
