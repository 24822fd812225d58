"""Which ``RELATED_IMAGE_*`` variable overrides which ``params.env`` key, and the rewrite itself.

The platform injects image references as environment variables; kustomize reads them from
``params.env`` through a generated ConfigMap and ``replacements``. Keeping the mapping and the
rewrite pure makes the render cache key a function of the environment, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping

# params.env key -> environment variable, per rendered set.
TRAINER_IMAGE_PARAMS: Mapping[str, str] = {
    "odh-kubeflow-trainer-controller-image": "RELATED_IMAGE_ODH_TRAINER_IMAGE",
}
RUNTIME_IMAGE_PARAMS: Mapping[str, str] = {
    "odh-th-torch-cuda-py312-image": "RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE",
    "odh-th-torch-rocm-py312-image": "RELATED_IMAGE_ODH_TH_TORCH_ROCM_PY312_IMAGE",
    "odh-th-torch-cpu-py312-image": "RELATED_IMAGE_ODH_TH_TORCH_CPU_PY312_IMAGE",
    "odh-speculator-model-opt-cuda-image": "RELATED_IMAGE_RHAII_MODEL_OPT_CUDA_IMAGE",
    "odh-vllm-cuda-image": "RELATED_IMAGE_RHAII_VLLM_CUDA_IMAGE",
}
# Only the 3.5 tags follow the environment; the 3.4 tags stay as shipped.
_WORKBENCH = "odh-training-universal-workbench-image"
IMAGESTREAM_PARAMS: Mapping[str, str] = {
    f"{_WORKBENCH}-cuda-3-5": "RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE",
    f"{_WORKBENCH}-rocm-3-5": "RELATED_IMAGE_ODH_TH_TORCH_ROCM_PY312_IMAGE",
    f"{_WORKBENCH}-cpu-3-5": "RELATED_IMAGE_ODH_TH_TORCH_CPU_PY312_IMAGE",
}


def parse_params(text: str) -> dict[str, str]:
    """``key=value`` lines; blank lines and ``#`` comments skipped; split on the first ``=``."""
    params: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        params[key.strip()] = value.strip()
    return params


def overrides(mapping: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The params a non-empty environment variable overrides (key -> new value)."""
    return {key: env[var] for key, var in mapping.items() if env.get(var)}


def apply_overrides(text: str, mapping: Mapping[str, str], env: Mapping[str, str]) -> str:
    """``params.env`` text with the mapped keys set from ``env``.

    Order and comments are kept and the output is deterministic, so equal inputs give equal
    text (and equal render cache keys). Keys in ``mapping`` absent from the file are appended
    when their variable is set, as the operator does.
    """
    wanted = overrides(mapping, env)
    if not wanted:
        return text
    lines: list[str] = []
    seen: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        key = line.partition("=")[0].strip()
        if line and not line.startswith("#") and "=" in line and key in wanted:
            lines.append(f"{key}={wanted[key]}")
            seen.add(key)
        else:
            lines.append(raw)
    lines.extend(f"{key}={value}" for key, value in wanted.items() if key not in seen)
    return "\n".join(lines) + "\n"
