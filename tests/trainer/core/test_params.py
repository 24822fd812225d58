"""params.env parsing and the RELATED_IMAGE_* overrides."""

from __future__ import annotations

import pytest

from functions.trainer.core import params

TRAINER_PARAMS = "odh-kubeflow-trainer-controller-image=quay.io/opendatahub/trainer:odh-stable\n"
SHIPPED = {"odh-kubeflow-trainer-controller-image": "quay.io/opendatahub/trainer:odh-stable"}
RUNTIME_PARAMS = (
    "# runtime images\n"
    "odh-th-torch-cuda-py312-image=quay.io/x/cuda:1\n"
    "\n"
    "odh-th-torch-rocm-py312-image=quay.io/x/rocm:1\n"
    "odh-vllm-cuda-image=quay.io/x/vllm:1\n"
)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("a=1\nb=2\n", {"a": "1", "b": "2"}, id="plain"),
    pytest.param("  a = 1 \n\n# c=3\n", {"a": "1"}, id="trimmed-blank-comment"),
    pytest.param("url=http://x/?q=1\n", {"url": "http://x/?q=1"}, id="split-on-first-equals"),
    pytest.param("no-equals-line\nk=v", {"k": "v"}, id="line-without-equals"),
])
def test_parse_params(text: str, expected: dict[str, str]) -> None:
    assert params.parse_params(text) == expected


@pytest.mark.parametrize(("text", "mapping", "env", "expected"), [
    pytest.param(TRAINER_PARAMS, params.TRAINER_IMAGE_PARAMS,
                 {"RELATED_IMAGE_ODH_TRAINER_IMAGE": "registry/trainer@sha256:1"},
                 {"odh-kubeflow-trainer-controller-image": "registry/trainer@sha256:1"},
                 id="trainer-image"),
    pytest.param(TRAINER_PARAMS, params.TRAINER_IMAGE_PARAMS,
                 {"RELATED_IMAGE_ODH_TRAINER_IMAGE": ""},
                 SHIPPED, id="empty-variable-ignored"),
    pytest.param(TRAINER_PARAMS, params.TRAINER_IMAGE_PARAMS, {"UNRELATED": "x"},
                 SHIPPED, id="no-variable"),
    pytest.param(RUNTIME_PARAMS, params.RUNTIME_IMAGE_PARAMS,
                 {"RELATED_IMAGE_ODH_TH_TORCH_ROCM_PY312_IMAGE": "r:2",
                  "RELATED_IMAGE_RHAII_MODEL_OPT_CUDA_IMAGE": "spec:2"},
                 {"odh-th-torch-cuda-py312-image": "quay.io/x/cuda:1",
                  "odh-th-torch-rocm-py312-image": "r:2",
                  "odh-vllm-cuda-image": "quay.io/x/vllm:1",
                  "odh-speculator-model-opt-cuda-image": "spec:2"},
                 id="runtime-images-and-appended-key"),
    pytest.param("odh-training-universal-workbench-image-cuda-3-4=old\n"
                 "odh-training-universal-workbench-image-cuda-3-5=old\n",
                 params.IMAGESTREAM_PARAMS,
                 {"RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE": "new"},
                 {"odh-training-universal-workbench-image-cuda-3-4": "old",
                  "odh-training-universal-workbench-image-cuda-3-5": "new"},
                 id="imagestream-3-5-follows-3-4-stays"),
])
def test_apply_overrides(text: str, mapping: dict[str, str], env: dict[str, str],
                         expected: dict[str, str]) -> None:
    assert params.parse_params(params.apply_overrides(text, mapping, env)) == expected


def test_overrides_keep_comments_order_and_are_deterministic() -> None:
    env = {"RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE": "c:9"}
    first = params.apply_overrides(RUNTIME_PARAMS, params.RUNTIME_IMAGE_PARAMS, env)
    assert first == params.apply_overrides(RUNTIME_PARAMS, params.RUNTIME_IMAGE_PARAMS, env)
    assert first.splitlines() == [
        "# runtime images", "odh-th-torch-cuda-py312-image=c:9", "",
        "odh-th-torch-rocm-py312-image=quay.io/x/rocm:1", "odh-vllm-cuda-image=quay.io/x/vllm:1"]


def test_unchanged_text_when_nothing_overrides() -> None:
    assert params.apply_overrides(RUNTIME_PARAMS, params.RUNTIME_IMAGE_PARAMS, {}) is RUNTIME_PARAMS
