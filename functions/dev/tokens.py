"""ServiceAccount tokens for local processes: each runs as the identity it would have in a
cluster, so a missing RBAC rule fails locally as it would there.

A pod in a cluster reads a token the kubelet requested for its ServiceAccount, bound to the
pod; a local process gets the same kind of token (TokenRequest, bound to the pod when there is
one) in a copy of the admin kubeconfig. The token is not refreshed: it lives
:data:`TOKEN_SECONDS`, longer than any local run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from functions.kube import resources
from functions.kube.client import KubeClient

TOKEN_SECONDS = 24 * 3600


def service_account_token(kube: KubeClient, namespace: str, name: str, *,
                          bound_pod: dict[str, Any] | None = None) -> str:
    """A token of ServiceAccount ``namespace/name`` (bound to ``bound_pod`` when given: it
    stops working once that pod is deleted)."""
    spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
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
