"""The ``/metrics`` of a function app of this process, as samples: the counters are the
process's, so what handlers driven in a test counted shows in every app."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime.app import create_app

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class NoApi:
    def send(self, request: Request, timeout: float) -> Response:
        raise AssertionError(f"unexpected API request {request.method} {request.path}")

    def refresh_credentials(self) -> None:
        pass


def scrape(function: str) -> tuple[Samples, set[str]]:
    """The samples and metric names of the ``/metrics`` of a function app of this process
    (the counters are the process's: the handlers driven here count in every app)."""
    app = create_app(function, controllers=[], warm_up="now",
                     kube_factory=lambda hook: KubeClient(NoApi()))
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.get_data(as_text=True)))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in families for s in family.samples}
    return samples, {family.name for family in families}


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)
