"""Rendering the three manifest sets with the real kustomize binary, and the render cache."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from functions.trainer.render import (
    ManifestSet,
    Renderer,
    RenderError,
    Sources,
    kustomize_command,
)

Obj = dict[str, Any]
LABEL = "platform.opendatahub.io/part-of"


def by_name(objs: tuple[Obj, ...], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def container_image(obj: Obj, init: bool = False) -> str:
    if obj["kind"] == "Deployment":
        return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])
    pod = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return str(pod["spec"]["initContainers" if init else "containers"][0]["image"])


def test_manifests_set_inventory(trainer_env: Sources) -> None:
    objs = Renderer().render(trainer_env.manifests, {}, "apps")
    assert Counter(o["kind"] for o in objs) == Counter({
        "CustomResourceDefinition": 3, "ClusterRole": 4, "ConfigMap": 2, "ServiceAccount": 1,
        "Role": 1, "RoleBinding": 1, "ClusterRoleBinding": 1, "Secret": 1, "Service": 1,
        "Deployment": 1, "PodMonitor": 1, "MutatingWebhookConfiguration": 1,
        "ValidatingWebhookConfiguration": 1})
    assert all(o["metadata"]["labels"][LABEL] == "trainer" for o in objs)
    namespaced = [o for o in objs if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"apps"}
    assert len(namespaced) == 9
    deployment = by_name(objs, "Deployment")["kubeflow-trainer-controller-manager"]
    assert deployment["spec"]["selector"]["matchLabels"][LABEL] == "trainer"
    assert deployment["spec"]["template"]["metadata"]["labels"][LABEL] == "trainer"
    assert container_image(deployment) == "quay.io/opendatahub/trainer:odh-stable"
    binding = by_name(objs, "ClusterRoleBinding")["kubeflow-trainer-controller-manager"]
    assert binding["subjects"][0]["namespace"] == "apps"
    webhooks = by_name(objs, "ValidatingWebhookConfiguration")["validator.trainer.kubeflow.org"]
    assert {w["clientConfig"]["service"]["namespace"] for w in webhooks["webhooks"]} == {"apps"}
    public = by_name(objs, "RoleBinding")["kubeflow-trainer-public"]
    assert public["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                   "name": "system:authenticated"}]
    assert any(name.startswith("rhoai-config-") for name in by_name(objs, "ConfigMap"))


def test_runtimes_and_imagestreams(trainer_env: Sources) -> None:
    renderer = Renderer()
    runtimes = renderer.render(trainer_env.runtime_set, {}, None)
    assert {o["kind"] for o in runtimes} == {"ClusterTrainingRuntime"}
    named = by_name(runtimes, "ClusterTrainingRuntime")
    assert len(named) == 14
    assert {n for n in named if n.startswith("training-hub")} == {
        "training-hub", "training-hub-rocm", "training-hub-cpu",
        "training-hub-th09-cuda130-torch211-py312", "training-hub-th09-rocm714-torch211-py312",
        "training-hub-th09-cpu-torch211-py312"}
    assert all("namespace" not in o["metadata"] for o in runtimes)
    assert all(o["spec"]["mlPolicy"]["numNodes"] == 1 for o in runtimes)
    assert container_image(named["vllm-extract-cuda"], init=True) == \
        "quay.io/opendatahub/vllm:latest"
    streams = renderer.render(trainer_env.imagestream_set, {}, "apps")
    assert sorted(by_name(streams, "ImageStream")) == [
        "training-hub-universal-cpu", "training-hub-universal-cuda",
        "training-hub-universal-rocm"]
    assert {o["metadata"]["namespace"] for o in streams} == {"apps"}


@pytest.mark.parametrize(("set_name", "env", "kind", "name", "expected"), [
    pytest.param("manifests", {"RELATED_IMAGE_ODH_TRAINER_IMAGE": "registry.test/trainer:v9"},
                 "Deployment", "kubeflow-trainer-controller-manager",
                 "registry.test/trainer:v9", id="trainer-image"),
    pytest.param("runtimes", {"RELATED_IMAGE_ODH_TH_TORCH_ROCM_PY312_IMAGE": "r.test/rocm:2"},
                 "ClusterTrainingRuntime", "training-hub-th09-rocm714-torch211-py312",
                 "r.test/rocm:2", id="rocm-runtime"),
    pytest.param("runtimes", {"RELATED_IMAGE_RHAII_MODEL_OPT_CUDA_IMAGE": "s.test/spec:3"},
                 "ClusterTrainingRuntime", "vllm-extract-cuda", "s.test/spec:3",
                 id="speculator-container"),
])
def test_related_image_overrides(trainer_env: Sources, set_name: str, env: dict[str, str],
                                 kind: str, name: str, expected: str) -> None:
    manifest_set = {"manifests": trainer_env.manifests,
                    "runtimes": trainer_env.runtime_set}[set_name]
    objs = Renderer().render(manifest_set, env, "apps" if set_name == "manifests" else None)
    assert container_image(by_name(objs, kind)[name]) == expected


def test_imagestream_tags_follow_runtime_images(trainer_env: Sources) -> None:
    env = {"RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE": "c.test/cuda:5"}
    streams = by_name(Renderer().render(trainer_env.imagestream_set, env, "apps"), "ImageStream")
    cuda_tags = {t["name"]: t["from"]["name"]
                 for t in streams["training-hub-universal-cuda"]["spec"]["tags"]}
    assert cuda_tags == {
        "3.4": "quay.io/opendatahub/odh-th06-cuda130-torch210-py312:odh-3.4",
        "3.5": "c.test/cuda:5"}


def test_warm_render_is_cached_and_fast(trainer_env: Sources) -> None:
    renderer = Renderer()
    first = renderer.render(trainer_env.manifests, {}, "apps")
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        again = renderer.render(trainer_env.manifests, {}, "apps")
        timings.append(time.perf_counter() - started)
    assert again is first
    assert renderer.kustomize_runs == 1
    assert sorted(timings)[2] < 0.050, timings
    other = renderer.render(trainer_env.manifests, {"RELATED_IMAGE_ODH_TRAINER_IMAGE": "x:1"},
                            "apps")
    assert other is not first and renderer.kustomize_runs == 2
    renderer.render(trainer_env.manifests, {}, "other-namespace")
    assert renderer.kustomize_runs == 3


def test_changed_template_content_misses_the_cache(trainer_env: Sources,
                                                   tmp_path: Path) -> None:
    tree = tmp_path / "runtimes"
    shutil.copytree(trainer_env.runtimes, tree)
    manifest_set = ManifestSet("runtimes", tree, "", trainer_env.runtime_set.param_map, True)
    renderer = Renderer()
    before = renderer.render(manifest_set, {}, None)
    params = tree / "params.env"
    params.write_text(params.read_text().replace("speculator:latest", "speculator:v2"))
    after = renderer.render(manifest_set, {}, None)
    assert renderer.kustomize_runs == 2
    image = container_image(by_name(after, "ClusterTrainingRuntime")["speculator-model-opt-cuda"])
    assert image == "quay.io/opendatahub/speculator:v2"
    assert before is not after


def test_templates_are_never_modified(trainer_env: Sources) -> None:
    params = trainer_env.trainer / "rhoai" / "params.env"
    original = params.read_text()
    Renderer().render(trainer_env.manifests, {"RELATED_IMAGE_ODH_TRAINER_IMAGE": "y:1"}, "apps")
    assert params.read_text() == original


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(None, "no kustomization.yaml", id="missing-tree"),
    pytest.param("resources:\n- does-not-exist.yaml\n", "rendering kustomize overlay",
                 id="kustomize-fails"),
])
def test_render_errors(trainer_env: Sources, tmp_path: Path, content: str | None,
                       message: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    if content is not None:
        (tree / "kustomization.yaml").write_text(content)
    manifest_set = ManifestSet("broken", tree, "", {}, False)
    with pytest.raises(RenderError, match=message):
        Renderer(work_root=tmp_path / "work").render(manifest_set, {}, None)


def test_work_dir_inside_the_templates_is_refused(trainer_env: Sources) -> None:
    renderer = Renderer(work_root=trainer_env.runtimes / "work")
    with pytest.raises(RenderError, match="inside"):
        renderer.render(trainer_env.runtime_set, {}, None)
    assert not (trainer_env.runtimes / "work").exists()


@pytest.mark.parametrize(("binary", "expected_tail"), [
    pytest.param("/opt/bin/kustomize", ["build"], id="kustomize"),
    pytest.param("/usr/bin/kubectl", ["kustomize"], id="kubectl"),
])
def test_kustomize_command(binary: str, expected_tail: list[str]) -> None:
    assert kustomize_command({"KUSTOMIZE_BIN": binary}) == [binary, *expected_tail]


def test_sources_from_env_defaults() -> None:
    sources = Sources.from_env({})
    assert (sources.trainer, sources.runtimes, sources.imagestreams) == (
        Path("/opt/manifests/trainer"), Path("/opt/manifests/runtimes"),
        Path("/opt/manifests/imagestreams"))
    assert os.fspath(sources.component_metadata).endswith("trainer/component_metadata.yaml")
