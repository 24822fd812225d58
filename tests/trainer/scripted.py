"""A transport that answers from a script: (method, path) -> (status, JSON body). Requests
nobody scripted are answered 404, as an API server answers for what it does not serve."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response

Answer = tuple[int, Any]


@dataclass
class ScriptedTransport:
    answers: Mapping[tuple[str, str], Answer]
    seen: list[tuple[str, str]] = field(default_factory=list)

    def send(self, request: Request, timeout: float) -> Response:
        self.seen.append((request.method, request.path))
        status, body = self.answers.get((request.method, request.path), (404, {}))
        return Response(status, {"Content-Type": "application/json"},
                        json.dumps(body).encode())

    def refresh_credentials(self) -> None:
        pass


def scripted(answers: Mapping[tuple[str, str], Answer]) -> tuple[KubeClient, ScriptedTransport]:
    transport = ScriptedTransport(answers)
    return KubeClient(transport, retries=0), transport


def items(*objs: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "1"}, "items": list(objs)}


FORBIDDEN: Answer = (403, {"kind": "Status", "reason": "Forbidden", "message": "forbidden"})
