"""ServiceAccount tokens for local processes: each runs as the identity it would have in a
cluster, so a missing RBAC rule fails locally as it would there.

A pod in a cluster reads a token the kubelet requested for its ServiceAccount, bound to the
pod; a local process gets the same kind of token (TokenRequest, bound to the pod when there is
one) in a copy of the admin kubeconfig. The token is not refreshed: it lives
:data:`TOKEN_SECONDS`, longer than any local run.

A sender that authenticates its deliveries, as Knative's Broker does with OIDC, asks for a
token per audience and asks again before it expires (:class:`TokenSource`): the emulated
Broker (:mod:`devstack.broker`) so authenticates to the functions.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from functions.kube import resources
from functions.kube.client import KubeClient

TOKEN_SECONDS = 24 * 3600
# A delivery token: as Knative's OIDCTokenProvider asks for them (an hour), asked again once
# less than five minutes of it are left.
DELIVERY_TOKEN_SECONDS = 3600
RENEW_BEFORE_SECONDS = 300


def service_account_token(kube: KubeClient, namespace: str, name: str, *,
                          bound_pod: dict[str, Any] | None = None,
                          audiences: Sequence[str] = (),
                          seconds: int = TOKEN_SECONDS) -> str:
    """A token of ServiceAccount ``namespace/name`` (bound to ``bound_pod`` when given: it
    stops working once that pod is deleted), for ``audiences`` (else the API server's)."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if audiences:
        spec["audiences"] = list(audiences)
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                  "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = resources.SERVICEACCOUNTS.path(namespace, name, "token")
    response = kube.call("create", "POST", path, body=body)
    if response.status >= 300:
        raise RuntimeError(f"TokenRequest for {namespace}/{name} failed: {response.status} "
                           f"{response.body[:300]!r}")
    return str(yaml.safe_load(response.body)["status"]["token"])


def token_kubeconfig(admin_kubeconfig: Path, token: str, out: Path) -> Path:
    """A copy of the admin kubeconfig that authenticates with ``token`` instead. Written to a
    new file renamed into place: the adapters of one identity share ``out``, and one that is
    starting must never read it half-written by the next."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "token"
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w") as handle:  # mkstemp: 0600 from the start
        handle.write(yaml.safe_dump(config))
    os.replace(name, out)
    return out


class TokenSource:
    """Tokens of one ServiceAccount, one per audience, each asked for when first needed and
    again once less than :data:`RENEW_BEFORE_SECONDS` of it are left. Thread-safe."""

    def __init__(self, kube: KubeClient, namespace: str, name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self._clock = clock
        self._tokens: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    @classmethod
    def of_account(cls, kube: KubeClient, namespace: str, name: str) -> TokenSource:
        """The tokens of ServiceAccount ``namespace/name``, made here if it does not exist."""
        kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace}}, "odh-training-dev")
        return cls(kube, namespace, name)

    @property
    def subject(self) -> str:
        """Who the tokens say sends (a TokenReview's username)."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def __call__(self, audience: str) -> str:
        with self._lock:
            found = self._tokens.get(audience)
            if found is not None and found[0] > self._clock():
                return found[1]
            token = service_account_token(self.kube, self.namespace, self.name,
                                          audiences=[audience],
                                          seconds=DELIVERY_TOKEN_SECONDS)
            renew = self._clock() + DELIVERY_TOKEN_SECONDS - RENEW_BEFORE_SECONDS
            self._tokens[audience] = (renew, token)
            return token
