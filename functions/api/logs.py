"""A job's logs through the API server's pod log proxy, streamed when followed.

Kept apart from the routes because telling a missing pod from a kubelet that does not answer
takes a look at the API server's error body, and a followed log is a stream, not a document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flask import Response

from functions.api.core import crs
from functions.api.core.openapi import LogQuery
from functions.api.core.problems import ProblemError, problem, single_field
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.transport import Request, TransportError

LOG_TIMEOUT_SECONDS = 10.0
Obj = dict[str, Any]


def pod_logs(kube: KubeClient, cr: Obj, query: LogQuery) -> Response:
    """The logs of the replica ``query`` names (default: the job's primary one)."""
    meta = cr["metadata"]
    replica = query.replica or crs.primary_replica(cr)
    pods = kube.list(resources.PODS, meta["namespace"],
                     label_selector=crs.log_pod_selector(cr, replica, query.index))
    pod = crs.newest(pods)
    if pod is None:
        raise ProblemError(single_field(404, "replica",
                                        f"job {meta['name']} has no {replica} pod "
                                        f"{query.index} (yet)"))
    params = {"container": crs.log_container(cr, pod)}
    if query.tail_lines is not None:
        params["tailLines"] = str(query.tail_lines)
    if query.follow:
        params["follow"] = "true"
    path = resources.PODS.path(meta["namespace"], pod["metadata"]["name"], "log")
    stream = getattr(kube.transport, "stream", None)
    try:
        if query.follow and stream is not None:
            status, _, raw = stream(Request("GET", path, params), LOG_TIMEOUT_SECONDS * 30)
            if status == 200:
                return Response(_chunks(raw), mimetype="text/plain")
            body = raw.read()
            raw.release_conn()
        else:
            answer = kube.transport.send(Request("GET", path, params), LOG_TIMEOUT_SECONDS)
            status, body = answer.status, answer.body
            if status == 200:
                return Response(body, mimetype="text/plain")
    except TransportError as exc:
        raise ProblemError(problem(503, f"the API server is unreachable: {exc}"),
                           {"Retry-After": "5"}) from exc
    message, missing_pod = _message(body)
    pod_name = pod["metadata"]["name"]
    if status == 404 and missing_pod:
        raise ProblemError(problem(404, f"pod {pod_name}: {message}"))
    if status == 400:
        raise ProblemError(single_field(400, "replica", message))
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    raise ProblemError(problem(
        502, f"the API server could not get the logs of pod {pod_name} from the kubelet of "
             f"{node} ({status}): {message}"), {"Retry-After": "10"})


def _chunks(raw: Any) -> Iterator[bytes]:
    try:
        yield from raw.stream(4096)
    finally:
        raw.release_conn()


def _message(body: bytes) -> tuple[str, bool]:
    """The API server's message, and whether it says the pod itself is gone (rather than
    the kubelet not answering for its logs)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500].decode("utf-8", "replace"), False
    if not isinstance(data, dict):
        return str(data), False
    details = data.get("details") or {}
    return str(data.get("message") or data), details.get("kind") == "pods"
