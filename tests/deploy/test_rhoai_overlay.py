"""The Red Hat OpenShift AI overlay: the OpenShift install in the platform's applications
namespace, the function image taken from params.env as the Open Data Hub operator gives a
component its images (it rewrites params.env before building the manifests)."""

from __future__ import annotations

import shutil
from pathlib import Path

from functions.core.delivery_auth import audience_for
from tests.deploy.support import FUNCTIONS, REPO, Obj, build, knative_service

OVERLAY = REPO / "config" / "overlays" / "rhoai"
NAMESPACE = "redhat-ods-applications"


def params(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def images(objs: list[Obj]) -> set[str]:
    return {c["image"] for o in objs if o["kind"] == "Service"
            and o["apiVersion"].startswith("serving.knative.dev/")
            for c in o["spec"]["template"]["spec"]["containers"]}


def test_every_function_runs_the_image_params_env_names(bin_dir: Path) -> None:
    objs = build(bin_dir / "kustomize", OVERLAY)
    assert images(objs) == {params(OVERLAY / "params.env")["odh-training-functions-image"]}
    for function in FUNCTIONS:
        assert knative_service(objs, f"odh-training-{function}")["metadata"]["namespace"] == \
            NAMESPACE


def test_the_operator_s_rewritten_params_env_reaches_every_function(bin_dir: Path,
                                                                    tmp_path: Path) -> None:
    copy = tmp_path / "config" / "overlays" / "rhoai"
    for tree in ("config", "eventing"):  # what the overlay's resources reach
        shutil.copytree(REPO / tree, tmp_path / tree)
    (copy / "params.env").write_text(
        "odh-training-functions-image=registry.example.com/odh/functions@sha256:" + "a" * 64
        + "\n")
    assert images(build(bin_dir / "kustomize", copy)) == {
        "registry.example.com/odh/functions@sha256:" + "a" * 64}


def test_everything_lives_in_the_platform_namespace(bin_dir: Path) -> None:
    objs = build(bin_dir / "kustomize", OVERLAY)
    namespaced = {o["metadata"].get("namespace") for o in objs} - {None}
    assert namespaced == {NAMESPACE, "knative-eventing"} or namespaced == {NAMESPACE}, namespaced
    triggers = [o for o in objs if o["kind"] == "Trigger"]
    assert {t["spec"]["subscriber"]["audience"] for t in triggers} == {
        audience_for(NAMESPACE, f"odh-training-{fn}") for fn in FUNCTIONS}
