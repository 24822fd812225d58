"""What each of our functions did during a burst, from its own ``/metrics``: the deliveries it
answered and the time its handlers ran.

The audit log tells what a controller asked of the API server; it cannot tell how many
CloudEvents reached each function nor how long each one held its answer. On the real Knative
data plane that answer is also what the next change of the same watch waits for: the receive
adapter sends one watch's changes one at a time, and the in-memory channel answers a send only
when every Trigger's subscriber has answered (reconcile creating a new job's pods and services
is the longest pass).

Scraped just before the burst and once the run is over (after the Events settle), over every
replica of every function (each replica's ``/metrics`` already adds up its gunicorn workers);
a run reports the difference.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

DELIVERIES = "odh_training_events"
HANDLER = "odh_training_handler_duration_seconds"
# the flat names of one run's figures: ``<figure>.<function>``
FIGURES = ("deliveries", "handler_s")


def figures(texts: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """``{function: [exposition text of each replica]}`` → ``deliveries.<function>`` (events
    answered, whatever the outcome) and ``handler_s.<function>`` (the wall time of its
    handler runs, every controller of the function together)."""
    found: dict[str, float] = {}
    for function, replicas in texts.items():
        totals = dict.fromkeys(FIGURES, 0.0)
        for text in replicas:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == f"{DELIVERIES}_total":
                        totals["deliveries"] += sample.value
                    elif sample.name == f"{HANDLER}_sum":
                        totals["handler_s"] += sample.value
        for name, value in totals.items():
            found[f"{name}.{function}"] = round(value, 3)
    return found


def scrape(urls: Mapping[str, Sequence[str]], timeout: float = 10.0) -> dict[str, float]:
    """:func:`figures` of the functions at ``urls`` (``{function: [base URL of each
    replica]}``, each ending in ``/``). A function that does not answer is left out: its
    figures would be wrong, not zero."""
    texts: dict[str, list[str]] = {}
    for function, bases in urls.items():
        try:
            texts[function] = [_get(base + "metrics", timeout) for base in bases]
        except OSError:
            continue
    return figures(texts)


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - local URL
        return bytes(answer.read()).decode()


def since(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """What the run added to each figure: a function's metrics count from its start, which
    is before the canary job and the wait for the burst's namespace."""
    return {name: round(value - before.get(name, 0.0), 3) for name, value in after.items()}


def per_job(summary: Mapping[str, float], jobs: int) -> dict[str, dict[str, float]]:
    """``{function: {"deliveries": per job, "handler_s": total}}``
    from the medians of :func:`figures` over a system's runs."""
    found: dict[str, dict[str, float]] = {}
    for key, value in summary.items():
        name, _, function = key.partition(".")
        if name not in FIGURES or not function:
            continue
        found.setdefault(function, {})[name] = (
            round(value, 1) if name == "handler_s" else round(value / jobs, 2))
    return dict(sorted(found.items()))
