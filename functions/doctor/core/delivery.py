"""Whether only the Broker's deliveries reach the functions: Knative Eventing's
``authentication-oidc`` feature on, each of our Triggers naming the OIDC audience its function
checks tokens for, and no receiver opted out of the check.

The functions and the dead-letter sink take a delivery only with a token of one of their
Triggers' ServiceAccounts for their own audience (:mod:`functions.runtime.delivery_auth`).
Eventing sends such tokens only with ``authentication-oidc: enabled`` in ``config-features``
(OpenShift Serverless: ``spec.config.features`` of the ``KnativeEventing`` CR), and only to a
subscriber whose audience it knows: a Knative Serving Service publishes none, so each Trigger
names it (``spec.subscriber.audience``), and it must be the one the function derives from its
own namespace and Service name, or every delivery is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.core.delivery_auth import FUNCTION_LABEL, MODE, audience_for
from functions.doctor.core.model import Finding, Snapshot, Status

OIDC_FLAG = "authentication-oidc"
DEAD_LETTER_SERVICE = "odh-training-dead-letters"
ENABLE = (f"set {OIDC_FLAG}: enabled in config-features of knative-eventing (OpenShift "
          "Serverless: spec.config.features of the KnativeEventing CR)")


def _env(service: Mapping[str, Any]) -> dict[str, str]:
    template = ((service.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {str(e.get("name")): str(e.get("value") or "")
            for c in template.get("containers") or [] for e in c.get("env") or []}


def opted_out(snapshot: Snapshot) -> list[str]:
    """Our Knative Services that accept deliveries without a token."""
    return sorted(str((s.get("metadata") or {}).get("name")) for s in snapshot.objects("Service")
                  if _env(s).get(MODE, "").strip().lower() == "none")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def audience_problems(snapshot: Snapshot) -> list[str]:
    """Each of our Triggers (and the Broker's dead-letter sink) whose audience is not the one
    its receiver checks tokens for, or that Knative has given no ServiceAccount to send with."""
    found: list[str] = []
    for trigger in snapshot.objects("Trigger"):
        meta = trigger.get("metadata") or {}
        if FUNCTION_LABEL not in (meta.get("labels") or {}):
            continue
        subscriber = (trigger.get("spec") or {}).get("subscriber") or {}
        ref = subscriber.get("ref") or {}
        wanted = audience_for(str(ref.get("namespace") or meta.get("namespace") or ""),
                              str(ref.get("name") or ""))
        audience = subscriber.get("audience")
        if audience != wanted:
            found.append(f"Trigger {_name(trigger)}: audience {audience or 'unset'}, its "
                         f"function checks for {wanted}")
        elif not ((trigger.get("status") or {}).get("auth") or {}).get("serviceAccountName"):
            found.append(f"Trigger {_name(trigger)}: no OIDC ServiceAccount yet "
                         "(status.auth.serviceAccountName)")
    for broker in snapshot.objects("Broker"):
        sink = (((broker.get("spec") or {}).get("delivery") or {}).get("deadLetterSink")) or {}
        ref = sink.get("ref") or {}
        if ref.get("kind") == "Service" and ref.get("name") == DEAD_LETTER_SERVICE:
            namespace = str(ref.get("namespace") or (broker.get("metadata") or {}).get(
                "namespace") or "")
            wanted = audience_for(namespace, DEAD_LETTER_SERVICE)
            if sink.get("audience") != wanted:
                found.append(f"Broker {_name(broker)}: dead-letter sink audience "
                             f"{sink.get('audience') or 'unset'}, the sink checks for {wanted}")
    return found


def delivery_auth(snapshot: Snapshot) -> Finding:
    check = "delivery-auth"
    off = opted_out(snapshot)
    features = snapshot.eventing.features
    if off:
        return Finding(check=check, status=Status.WARN,
                       summary=f"{', '.join(off)} accept deliveries without a token "
                               f"({MODE}=none): any pod that reaches them may post work, the "
                               "NetworkPolicy is the only gate",
                       fix=f"{ENABLE}, then remove {MODE}=none from those Services")
    if features is None:
        return Finding(check=check, status=Status.SKIP,
                       summary="config-features of knative-eventing not readable: cannot tell "
                               f"whether {OIDC_FLAG} is on")
    if features.get(OIDC_FLAG, "disabled") != "enabled":
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{OIDC_FLAG} is {features.get(OIDC_FLAG, 'disabled')}: the "
                               "Broker sends no token and the functions refuse every delivery",
                       fix=f"{ENABLE}; or, where Eventing cannot run with it, set {MODE}=none "
                           "on every function Service and the dead-letter sink (then only the "
                           "NetworkPolicy keeps other pods out)")
    problems = audience_problems(snapshot)
    if problems:
        return Finding(check=check, status=Status.FAIL,
                       summary="deliveries would be refused: a Trigger's audience or identity "
                               "is not what its function checks",
                       fix="apply eventing/ (or the overlay) again; an overlay that changes the "
                           "namespace needs the `replacements` of config/overlays/openshift",
                       details=tuple(problems))
    triggers = sum(FUNCTION_LABEL in ((t.get("metadata") or {}).get("labels") or {})
                   for t in snapshot.objects("Trigger"))
    return Finding(check=check, status=Status.PASS,
                   summary=f"{OIDC_FLAG} enabled; "
                           + (f"{triggers} Triggers name their function's audience and have "
                              "their own ServiceAccount" if triggers else "no Trigger of ours "
                              "installed yet"))
