"""Which Broker objects the lifecycle is sent to, and with which audience."""

from __future__ import annotations

from typing import Any

import pytest

from functions.runtime.lifecycle import broker_destination

Obj = dict[str, Any]
OWN = "eventing.knative.dev/broker/team-a/default"
URL = "http://broker-ingress.knative-eventing.svc.cluster.local/team-a/default"


def broker(address: Obj | None) -> Obj:
    return {"metadata": {"name": "default", "namespace": "team-a",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"address": address} if address is not None else {}}


@pytest.mark.parametrize(("address", "sent", "audience"), [
    pytest.param({"url": URL, "audience": OWN}, True, OWN, id="its-own-audience"),
    pytest.param({"url": URL}, True, None, id="no-oidc"),
    pytest.param(None, False, None, id="no-address-yet"),
    pytest.param({"url": URL, "audience": "https://kubernetes.default.svc"}, False, None,
                 id="the-api-servers-audience"),
    pytest.param({"url": URL, "audience": "eventing.knative.dev/broker/team-b/default"},
                 False, None, id="another-brokers-audience"),
    pytest.param({"url": "file:///etc/passwd", "audience": OWN}, False, None,
                 id="not-http"),
])
def test_a_broker_is_a_destination_with_its_own_audience_only(
        address: Obj | None, sent: bool, audience: str | None) -> None:
    found = broker_destination(broker(address))
    assert (found is not None) == sent
    if found is not None:
        assert (found.broker, found.url, found.audience) == ("team-a/default", URL, audience)
