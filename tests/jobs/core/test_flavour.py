"""Which flavour an MPIJob is, from the API version its spec was written through."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.flavour import ANNOTATION, framework_of, pin_patch, spec_api_version
from functions.jobs.core.frameworks import MPI, MPI_V1, PYTORCH

V1 = "kubeflow.org/v1"
V2 = "kubeflow.org/v2beta1"
SPEC: dict[str, Any] = {"f:spec": {"f:mpiReplicaSpecs": {}}}
STATUS: dict[str, Any] = {"f:status": {"f:conditions": {}}}
META: dict[str, Any] = {"f:metadata": {"f:annotations": {}}}


def entry(version: str, fields: dict[str, Any], time: str | None = "2026-03-01T12:00:00Z",
          manager: str = "m") -> dict[str, Any]:
    out = {"manager": manager, "operation": "Update", "apiVersion": version,
           "fieldsType": "FieldsV1", "fieldsV1": fields}
    if time is not None:
        out["time"] = time
    return out


def mpijob(*entries: dict[str, Any], read_as: str = V2, pinned: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pi", "namespace": "ns"}
    if pinned:
        meta["annotations"] = {ANNOTATION: pinned}
    if entries:
        meta["managedFields"] = list(entries)
    return {"apiVersion": read_as, "kind": "MPIJob", "metadata": meta, "spec": {}}


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param(mpijob(entry(V1, SPEC)), MPI_V1, id="created-through-v1"),
    pytest.param(mpijob(entry(V2, SPEC), read_as=V1), MPI, id="created-through-v2beta1"),
    pytest.param(mpijob(), MPI, id="no-managed-fields-read-as-v2beta1"),
    pytest.param(mpijob(read_as=V1), MPI_V1, id="no-managed-fields-read-as-v1"),
    pytest.param(mpijob(entry(V1, SPEC, "2026-03-01T12:00:00Z"),
                        entry(V2, STATUS, "2026-03-01T12:00:05Z")),
                 MPI_V1, id="our-status-writes-through-v2beta1-do-not-count"),
    pytest.param(mpijob(entry(V2, META, "2026-03-01T11:00:00Z"),
                        entry(V1, SPEC, "2026-03-01T12:00:00Z")),
                 MPI_V1, id="an-earlier-metadata-writer-does-not-count"),
    pytest.param(mpijob(entry(V2, SPEC, "2026-03-01T12:10:00Z", "kueue"),
                        entry(V1, SPEC, "2026-03-01T12:00:00Z", "sdk")),
                 MPI_V1, id="a-later-spec-writer-does-not-change-it"),
    pytest.param(mpijob(entry(V1, SPEC, "2026-03-01T12:00:00Z", "sdk"),
                        entry(V2, SPEC, "2026-03-01T12:00:00Z", "queue")),
                 MPI_V1, id="same-second-keeps-the-server-order"),
    pytest.param(mpijob(entry(V2, SPEC, None, "untimed"),
                        entry(V1, SPEC, "2026-03-01T12:00:00Z", "sdk")),
                 MPI_V1, id="an-entry-without-time-counts-as-latest"),
    pytest.param(mpijob(entry(V2, SPEC, "2026-03-01T12:00:00Z", "queue"),
                        entry(V1, SPEC, "2026-03-01T12:10:00Z", "sdk"), pinned=V1),
                 MPI_V1, id="pinned-stays-when-the-author-writes-again-later"),
    pytest.param(mpijob(entry(V1, SPEC), pinned=V2), MPI, id="pinned-by-the-author"),
    pytest.param(mpijob(entry(V1, SPEC), pinned="kubeflow.org/v9"), MPI_V1,
                 id="a-pin-naming-no-flavour-is-ignored"),
    pytest.param({**mpijob(entry(V2, SPEC)), "kind": "PyTorchJob"}, PYTORCH,
                 id="kinds-with-one-flavour-ignore-managed-fields"),
])
def test_framework_of(obj: dict[str, Any], expected: object) -> None:
    assert framework_of(obj) == expected


def test_spec_api_version_of_the_cache_summary() -> None:
    """The watch cache keeps only ``f:spec`` of each field set (functions/kube/store.py)."""
    cached = mpijob(entry(V1, {"f:spec": {}}), entry(V2, {}, "2026-03-01T12:00:01Z"))
    assert spec_api_version(cached) == V1


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param(mpijob(entry(V1, SPEC)), V1, id="unpinned-v1"),
    pytest.param(mpijob(entry(V2, SPEC)), V2, id="unpinned-v2beta1"),
    pytest.param(mpijob(entry(V1, SPEC), pinned=V1), None, id="already-pinned"),
    pytest.param(mpijob(entry(V1, SPEC), pinned="nonsense"), V1, id="bad-pin-replaced"),
    pytest.param({**mpijob(entry(V1, SPEC)), "kind": "TFJob"}, None, id="one-flavour-kind"),
])
def test_pin_patch(obj: dict[str, Any], expected: str | None) -> None:
    patch = pin_patch(obj)
    if expected is None:
        assert patch is None
    else:
        assert patch == {"metadata": {"annotations": {ANNOTATION: expected}}}
