"""Questions only the API server can answer about a caller: TokenReview (whose token is this,
and is it valid for an audience) and SubjectAccessReview's resource. Shared by the training API
(:mod:`functions.api.auth`) and the functions' delivery check
(:mod:`functions.runtime.delivery_auth`), so both ask the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from functions.kube.client import KubeClient
from functions.kube.resources import Resource

TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview",
                        namespaced=False)
SUBJECTACCESSREVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews",
                                "SubjectAccessReview", namespaced=False)


def review_token(kube: KubeClient, token: str, audiences: Sequence[str] = ()) -> dict[str, Any]:
    """The ``status`` of a TokenReview of ``token``: ``authenticated``, ``user``, ``audiences``
    (those of ``audiences`` the token is valid for) or ``error``. With ``audiences`` the API
    server accepts the token only for one of them; without, for its own. Raises
    :class:`~functions.kube.client.ApiError` (e.g. 403: the caller may not create
    tokenreviews) or :class:`~functions.core.errors.TemporaryError` (the API server is out of
    reach)."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    answer = kube.create({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "metadata": {}, "spec": spec}, res=TOKENREVIEWS)
    status = answer.get("status") or {}
    return dict(status) if isinstance(status, dict) else {}
