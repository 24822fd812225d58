"""Parsed jobs are remembered per version; a new version of the same generation reuses the
spec parts and reads the metadata and status anew (functions/jobs/reads.py ParsedJobs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import Job, parse_job
from functions.jobs.reads import ParsedJobs
from tests.jobs.fixtures import load

Obj = dict[str, Any]
RUNNING = {"conditions": [{"type": "Running", "status": "True", "reason": "JobRunning"}]}
SAMPLES = ["pytorch-master-workers.yaml", "pytorch-elastic.yaml", "tfjob-chief-workers.yaml",
           "mpijob-pi.yaml", "mxjob-train.yaml"]


def dump(job: Job) -> Obj:
    return job.model_dump()


def version(obj: Obj, rv: str, generation: int, **changes: Any) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-1", resourceVersion=rv, generation=generation)
    for field, value in changes.items():
        if field == "status":
            out["status"] = value
        elif field == "replicas":
            next(iter(out["spec"][next(k for k in out["spec"] if k.endswith("Specs"))]
                      .values()))["replicas"] = value
        else:
            out["metadata"][field] = value
    return out


@pytest.mark.parametrize("sample", [pytest.param(s, id=s.removesuffix(".yaml"))
                                    for s in SAMPLES])
@pytest.mark.parametrize("changes", [
    pytest.param({"status": RUNNING}, id="status-write"),
    pytest.param({"labels": {"team": "b"}, "annotations": {"note": "x"}}, id="metadata-write"),
    pytest.param({"deletionTimestamp": "2026-03-01T12:00:00Z"}, id="deletion"),
])
def test_new_version_of_the_same_generation_reads_like_a_fresh_parse(
        sample: str, changes: dict[str, Any]) -> None:
    parsed = ParsedJobs()
    first = version(load(sample), "10", 1)
    earlier = parsed.parse(first)
    with_defaults(earlier)  # the defaulted copy is carried over too
    later_obj = version(load(sample), "11", 1, **changes)
    later = parsed.parse(later_obj)
    assert later is not earlier
    assert later.replica_specs is earlier.replica_specs  # shared, not parsed again
    assert dump(later) == dump(parse_job(later_obj))
    assert dump(with_defaults(later)) == dump(with_defaults(parse_job(later_obj)))
    assert dump(with_defaults(earlier)) == dump(with_defaults(parse_job(first)))  # untouched


def test_a_new_generation_is_parsed_anew() -> None:
    parsed = ParsedJobs()
    earlier = parsed.parse(version(load("pytorch-master-workers.yaml"), "10", 1))
    changed = version(load("pytorch-master-workers.yaml"), "11", 2, replicas=7)
    later = parsed.parse(changed)
    assert later.replica_specs is not earlier.replica_specs
    assert dump(with_defaults(later)) == dump(with_defaults(parse_job(changed)))


def test_same_version_is_the_same_job_and_objects_without_versions_are_not_remembered(
        ) -> None:
    parsed = ParsedJobs()
    obj = version(load("tfjob-chief-workers.yaml"), "10", 1)
    assert parsed.parse(obj) is parsed.parse(copy.deepcopy(obj))
    bare = load("tfjob-chief-workers.yaml")
    bare["metadata"].pop("resourceVersion", None)
    assert parsed.parse(bare) is not parsed.parse(bare)
