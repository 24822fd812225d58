"""Shared by the deployment tests: kustomize builds, the Dockerfile's command, RBAC coverage.

Everything here is plain data in, plain data out, except :func:`build`, which runs the real
kustomize binary of the test bin dir.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]

# Every kustomization a user may apply, relative to the repository.
KUSTOMIZATIONS = ("config/default", "config/overlays/openshift", "config/overlays/rhoai",
                  "config/func", "config/crd",
                  "config/network", "config/rbac", "config/serving", "config/samples",
                  "config/api", "config/monitoring", "eventing")
# The ones that install the product (the rest are parts or samples).
INSTALLS = ("config/default", "config/overlays/openshift", "config/overlays/rhoai",
            "config/func")
FUNCTIONS = ("reconcile", "gc", "status")


def build(kustomize: Path, directory: str | Path) -> list[Obj]:
    """``kustomize build`` of a directory of this repository, parsed."""
    done = subprocess.run([str(kustomize), "build", str(REPO / directory)], capture_output=True,
                          text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"kustomize build {directory} failed: {done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def build_default_with(kustomize: Path, tmp: Path, *components: str) -> list[Obj]:
    """``kustomize build`` of an overlay, written to ``tmp``, of config/default with
    ``components`` (paths from the repository root) added."""
    up = os.path.relpath(REPO, tmp)
    lines = [f"resources: [{up}/config/default]"]
    if components:
        lines.append("components: [" + ", ".join(f"{up}/{c}" for c in components) + "]")
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return build(kustomize, tmp)


def find(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind}/{name}"
    return matches[0]


def knative_service(objs: Iterable[Obj], name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == "Service"
               and o["apiVersion"].startswith("serving.knative.dev/")
               and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} Knative Service {name}"
    return matches[0]


# -- the Dockerfile --------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: tuple[tuple[str, str], ...]   # (INSTRUCTION, arguments), continuations joined


def dockerfile_stages(text: str) -> list[Stage]:
    """The stages of a Dockerfile, each with its instructions (comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = arguments.split()
            name = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            stages.append(Stage(words[0], name, ()))
        elif stages:
            last = stages[-1]
            stages[-1] = Stage(last.base, last.name,
                               (*last.instructions, (instruction, arguments.strip())))
    return stages


def exec_form(arguments: str) -> list[str]:
    """A JSON (exec) form argument list; anything else is an error."""
    value = json.loads(arguments)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not an exec-form list: {arguments}")
    return value


def image_command(stage: Stage) -> list[str]:
    """ENTRYPOINT + CMD of a stage (the last of each wins, as in Docker)."""
    entrypoint: list[str] = []
    cmd: list[str] = []
    for instruction, arguments in stage.instructions:
        if instruction == "ENTRYPOINT":
            entrypoint = exec_form(arguments)
        elif instruction == "CMD":
            cmd = exec_form(arguments)
    return entrypoint + cmd


def image_env(stage: Stage) -> dict[str, str]:
    """ENV of a stage, ``KEY=value`` pairs, with ``$VAR`` references left as written."""
    env: dict[str, str] = {}
    for instruction, arguments in stage.instructions:
        if instruction == "ENV":
            for pair in shlex.split(arguments):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def image_entrypoint(stage: Stage) -> list[str]:
    for instruction, arguments in reversed(stage.instructions):
        if instruction == "ENTRYPOINT":
            return exec_form(arguments)
    return []


# -- RBAC coverage -----------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Permission:
    """One verb on one resource (or subresource) of one group, optionally of one name."""

    group: str
    resource: str
    verb: str
    name: str = ""


def permissions(rules: Iterable[Mapping[str, Any]]) -> Iterator[Permission]:
    """Every (group, resource, verb, name) a list of resource rules grants."""
    for rule in rules:
        names = rule.get("resourceNames") or [""]
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    for name in names:
                        yield Permission(group, resource, verb, name)


def _matches(held: Mapping[str, Any], wanted: Permission) -> bool:
    def has(field: str, value: str) -> bool:
        values = held.get(field) or []
        return value in values or "*" in values
    names = held.get("resourceNames") or []
    return (has("apiGroups", wanted.group) and has("resources", wanted.resource)
            and has("verbs", wanted.verb) and (not names or wanted.name in names))


def uncovered(required: Iterable[Mapping[str, Any]],
              held: Iterable[Mapping[str, Any]]) -> list[Permission]:
    """The permissions of ``required`` rules that no rule of ``held`` grants (RBAC semantics:
    a held rule with resourceNames covers only those names)."""
    held_rules = list(held)
    missing = {p for p in permissions(required)
               if not any(_matches(rule, p) for rule in held_rules)}
    non_resource = [r for r in required if r.get("nonResourceURLs")]
    for rule in non_resource:
        for url in rule["nonResourceURLs"]:
            for verb in rule.get("verbs") or []:
                if not any(url in (h.get("nonResourceURLs") or [])
                           and verb in (h.get("verbs") or []) for h in held_rules):
                    missing.add(Permission("", url, verb))
    return sorted(missing)


def local_command_env(stage: Stage, python_bin: Path, base: Mapping[str, str]
                      ) -> dict[str, str]:
    """The image's ENV for a local run of its command: the image's Python environment is
    replaced by ``python_bin`` (a virtualenv's ``bin``) at the front of ``PATH``."""
    env = dict(base)
    for key, value in image_env(stage).items():
        if key == "PATH":
            rest = value.partition(":")[2]
            assert rest == "$PATH", f"unexpected PATH {value}"
            env["PATH"] = f"{python_bin}:{base.get('PATH', '')}"
        else:
            env[key] = value
    return env


def dockerfile_command(path: Path | None = None) -> tuple[Stage, list[str]]:
    """The final stage of the repository's Dockerfile and its ENTRYPOINT + CMD."""
    stage = dockerfile_stages((path or REPO / "Dockerfile").read_text())[-1]
    return stage, image_command(stage)
