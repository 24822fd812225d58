"""Who the local receivers are: which function each Knative Service of ``config/serving`` runs,
as which ServiceAccount, and whom it takes deliveries from.

A pod of a Knative Service knows its namespace and Service (its ServiceAccount's namespace,
``K_SERVICE``), from which a function derives the OIDC audience it checks deliveries' tokens
for (:mod:`functions.runtime.delivery_auth`); a local process is told them
(:func:`delivery_env`). The local stack's emulated Broker sends with a ServiceAccount of its
own, :data:`BROKER_ACCOUNT`, named to the functions as a sender they accept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.cluster.manifests import load_documents

FUNCTIONS = ("reconcile", "gc", "status")
# What the real event path also serves: the Broker's dead-letter sink.
SERVED = (*FUNCTIONS, "dead-letters")
# The emulated Broker's own identity: it sends deliveries with its tokens.
BROKER_ACCOUNT = "odh-training-dev-broker"


@dataclass(frozen=True)
class FunctionIdentity:
    """Which function a Knative Service runs and as which ServiceAccount."""

    service: str
    function: str
    namespace: str
    service_account: str | None
    manifest: dict[str, Any] = field(default_factory=dict, compare=False)


def function_identities(serving_dir: Path,
                        served: tuple[str, ...] = FUNCTIONS) -> list[FunctionIdentity]:
    """Read ``config/serving``: each Knative Service's function (the ``serve`` argument) and
    ServiceAccount, for the functions in ``served``."""
    found: list[FunctionIdentity] = []
    for obj in load_documents([serving_dir]) if serving_dir.exists() else []:
        if obj.get("kind") != "Service" or not str(obj.get("apiVersion", "")).startswith(
                "serving.knative.dev/"):
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        words = [str(w) for c in pod.get("containers") or []
                 for w in (c.get("command") or []) + (c.get("args") or [])]
        env = {e.get("name"): e.get("value") for c in pod.get("containers") or []
               for e in c.get("env") or []}
        function = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "serve"),
                        env.get("FUNCTION"))
        if function not in served:
            continue
        meta = obj["metadata"]
        found.append(FunctionIdentity(meta["name"], str(function),
                                      meta.get("namespace") or "opendatahub",
                                      pod.get("serviceAccountName"), obj))
    return found


def delivery_env(identity: FunctionIdentity, *, enabled: bool,
                 senders: Sequence[str] = ()) -> dict[str, str]:
    """The environment that tells a receiver whom it takes deliveries from, whatever the
    caller's environment says: the Broker's for its own Triggers, and ``senders``; or, not
    ``enabled``, anyone."""
    if not enabled:
        return {"FUNCTIONS_DELIVERY_AUTH": "none"}
    env = {"FUNCTIONS_DELIVERY_AUTH": "oidc", "FUNCTIONS_NAMESPACE": identity.namespace,
           "K_SERVICE": identity.service}
    if senders:
        env["FUNCTIONS_DELIVERY_SUBJECTS"] = ",".join(senders)
    return env
