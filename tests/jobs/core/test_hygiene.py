"""TrainJob hygiene (:mod:`functions.jobs.core.hygiene`): the TTL and the history limit of
finished TrainJobs, from the TrainJob's annotation, its namespace's, or the Trainer's."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from functions.jobs.core import hygiene as h
from tests.jobs.fixtures import NOW, stamp
from tests.support import REPO

Obj = dict[str, Any]
NONE = h.Defaults()


def trainjob(name: str, finished: float | None = None, *, condition: str = "Complete",
             created: float = -7200, annotations: dict[str, str] | None = None) -> Obj:
    """A TrainJob that finished ``finished`` seconds from NOW (``None``: running)."""
    conditions = []
    if finished is not None:
        conditions.append({"type": condition, "status": "True", "reason": "Done",
                           "message": "", "lastTransitionTime": stamp(finished)})
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                         "creationTimestamp": stamp(created),
                         "annotations": annotations or {}},
            "status": {"conditions": conditions}}


def namespace(**annotations: str) -> Obj:
    return {"metadata": {"name": "team-a", "annotations": annotations}}


@pytest.mark.parametrize(("job", "ns", "defaults", "deleted", "requeue", "recorded"), [
    pytest.param(trainjob("a", -3600, annotations={h.TTL: "1h"}), None, NONE, True, None, {},
                 id="own-ttl-passed"),
    pytest.param(trainjob("a", -600, annotations={h.TTL: "1h"}), None, NONE, False, 3000.0,
                 {h.TTL_DEADLINE: stamp(3000)}, id="own-ttl-not-yet"),
    pytest.param(trainjob("a", -600, annotations={h.TTL: "1h", h.TTL_DEADLINE: stamp(3002)}),
                 None, NONE, False, 3000.0, {}, id="deadline-recorded-already"),
    pytest.param(trainjob("a", -600), namespace(**{h.TTL: "5m"}), NONE, True, None, {},
                 id="namespace-ttl"),
    pytest.param(trainjob("a", -600, annotations={h.TTL: "1h"}), namespace(**{h.TTL: "5m"}), NONE,
                 False, 3000.0, {h.TTL_DEADLINE: stamp(3000)}, id="trainjob-wins"),
    pytest.param(trainjob("a", -600), None, h.Defaults(ttl_seconds=60), True, None, {},
                 id="trainer-default"),
    pytest.param(trainjob("a", -1, condition="Failed", annotations={h.TTL: "0s"}), None, NONE, True,
                 None, {}, id="failed-zero-ttl"),
    pytest.param(trainjob("a", None, annotations={h.TTL: "0s"}), None, NONE, False, None, {},
                 id="running"),
    pytest.param(trainjob("a", -600), None, NONE, False, None, {}, id="not-opted-in"),
    pytest.param(trainjob("a", -600, annotations={h.TTL: "soon"}), None, NONE, False, None, {},
                 id="malformed-ignored"),
    pytest.param(trainjob("a", None, annotations={h.TTL_DEADLINE: stamp(5)}), None, NONE,
                 False, None, {h.TTL_DEADLINE: None}, id="deadline-forgotten"),
])
def test_ttl(job: Obj, ns: Obj | None, defaults: h.Defaults, deleted: bool,
             requeue: float | None, recorded: dict[str, str | None]) -> None:
    plan = h.ttl_plan(job, ns, defaults, NOW)
    assert [d.trainjob["metadata"]["name"] for d in plan.deletions] == (["a"] if deleted
                                                                        else [])
    assert plan.requeue_after == requeue
    assert plan.annotations == recorded


def test_ttl_event_names_the_setting() -> None:
    [deletion] = h.ttl_plan(trainjob("a", -3700), namespace(**{h.TTL: "1h"}), NONE,
                            NOW).deletions
    assert (deletion.reason, deletion.message) == (
        "TTLExpired", f"Deleted TrainJob a: it finished at {stamp(-3700)}, 1h1m40s ago "
                      "(training.opendatahub.io/ttl-after-finished 1h, the namespace's "
                      "annotation)")


JOBS = [trainjob("oldest", -500), trainjob("older", -400), trainjob("running", None),
        trainjob("newer", -300, condition="Failed"), trainjob("newest", -100)]


@pytest.mark.parametrize(("jobs", "ns", "defaults", "deleted"), [
    pytest.param(JOBS, namespace(**{h.HISTORY_LIMIT: "2"}), NONE, ["older", "oldest"],
                 id="namespace-keeps-the-two-newest"),
    pytest.param(JOBS, None, h.Defaults(history_limit=3), ["oldest"], id="trainer-default"),
    pytest.param(JOBS, namespace(**{h.HISTORY_LIMIT: "0"}), NONE,
                 ["newest", "newer", "older", "oldest"], id="zero-keeps-none"),
    pytest.param([*JOBS[:4], trainjob("newest", -100, annotations={h.HISTORY_LIMIT: "10"})],
                 namespace(**{h.HISTORY_LIMIT: "0"}), NONE, ["newer", "older", "oldest"],
                 id="a-trainjobs-own-limit"),
    pytest.param([trainjob("only-me", -500, annotations={h.HISTORY_LIMIT: "1"}), *JOBS[1:]],
                 None, NONE, ["only-me"], id="opted-in-alone"),
    pytest.param(JOBS, None, NONE, [], id="not-opted-in"),
    pytest.param([trainjob("b", -100, created=-50), trainjob("a", -100, created=-60)],
                 namespace(**{h.HISTORY_LIMIT: "1"}), NONE, ["a"],
                 id="same-finish-older-creation-goes"),
])
def test_history(jobs: list[Obj], ns: Obj | None, defaults: h.Defaults,
                 deleted: list[str]) -> None:
    assert h.history_applies(ns, defaults, jobs) is bool(deleted)
    found = h.history_plan(jobs, ns, defaults)
    assert [d.trainjob["metadata"]["name"] for d in found] == deleted
    assert all(d.reason == "HistoryLimitExceeded" for d in found)


def test_history_event_names_the_setting() -> None:
    [deletion] = h.history_plan(JOBS, None, h.Defaults(history_limit=3))
    assert deletion.message == ("Deleted TrainJob oldest: 3 finished TrainJobs of its "
                                "namespace are newer, past its history limit (historyLimit 3 "
                                "of the Trainer)")


def test_the_hygiene_sample() -> None:
    namespace_doc, trainjob_doc = yaml.safe_load_all(
        (REPO / "config" / "samples" / "trainjob-hygiene.yaml").read_text())
    assert h.ttl_of(trainjob_doc, namespace_doc, NONE) == h.Setting(
        3600.0, "training.opendatahub.io/ttl-after-finished 1h, the TrainJob's annotation")
    assert h.history_limit_of(trainjob_doc, namespace_doc, NONE) == h.Setting(
        20.0, "training.opendatahub.io/finished-history-limit 20, the namespace's annotation")
