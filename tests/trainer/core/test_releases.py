"""component_metadata.yaml, the platform handshake and the release stamp."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.trainer.core import releases as rel
from functions.trainer.core.api import Release

TRAINER = Release(name="Kubeflow Trainer", version="2.3.0",
                  repoUrl="https://github.com/kubeflow/trainer")


def test_component_releases_of_the_shipped_metadata(upstream_manifests: Path) -> None:
    text = (upstream_manifests / "component_metadata.yaml").read_text()
    assert rel.component_releases(text) == (TRAINER,)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("releases: []", (), id="empty"),
    pytest.param(": : :", (), id="not-yaml"),
    pytest.param("- a\n- b", (), id="not-a-mapping"),
    pytest.param("releases:\n- {version: '1'}\n- {name: X, version: 1.0}",
                 (Release(name="X", version="1.0"),), id="nameless-entry-skipped"),
])
def test_component_releases_tolerates_bad_input(text: str, expected: tuple[Release, ...]) -> None:
    assert rel.component_releases(text) == expected


@pytest.mark.parametrize(("raw", "expected"), [
    pytest.param("2.25.0", "2.25.0", id="plain"),
    pytest.param("v2.25.0", "2.25.0", id="v-prefix"),
    pytest.param(" 3.4 ", "3.4.0", id="missing-patch"),
    pytest.param("3", "3.0.0", id="major-only"),
    pytest.param("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5", id="pre-release-build"),
    pytest.param("stable", None, id="word"),
    pytest.param("01.2.3", None, id="leading-zero"),
    pytest.param("", None, id="empty"),
])
def test_parse_version(raw: str, expected: str | None) -> None:
    assert rel.parse_version(raw) == expected


@pytest.mark.parametrize(("configmap", "expected"), [
    pytest.param(None, None, id="missing"),
    pytest.param({"data": {}}, None, id="no-key"),
    pytest.param({"data": {"platformVersion": "nope"}}, None, id="unparseable"),
    pytest.param({"data": {"platformVersion": "v3.4.0"}}, "v3.4.0", id="raw-kept"),
])
def test_platform_version(configmap: dict[str, object] | None, expected: str | None) -> None:
    assert rel.platform_version(configmap) == expected


@pytest.mark.parametrize(("platform", "expected"), [
    pytest.param(None, rel.ReleaseStamp("Kubeflow Trainer", "2.3.0"), id="bootstrap"),
    pytest.param("v3.4", rel.ReleaseStamp("platform", "3.4.0"), id="platform-normalised"),
])
def test_release_stamp(platform: str | None, expected: rel.ReleaseStamp) -> None:
    assert rel.release_stamp((TRAINER,), platform) == expected


def test_release_stamp_without_metadata() -> None:
    assert rel.release_stamp((), None) == rel.ReleaseStamp("", "")


@pytest.mark.parametrize(("current", "platform", "expected"), [
    pytest.param((), None, (TRAINER,), id="first"),
    pytest.param((), "3.4.0", (TRAINER, Release(name="platform", version="3.4.0")),
                 id="with-platform"),
    pytest.param((Release(name="platform", version="3.3"), Release(name="Kubeflow Trainer")),
                 "3.4", (Release(name="platform", version="3.4"), TRAINER),
                 id="upsert-keeps-positions"),
    pytest.param((Release(name="platform", version="3.3"),), None,
                 (Release(name="platform", version="3.3"), TRAINER),
                 id="platform-entry-never-removed"),
])
def test_status_releases(current: tuple[Release, ...], platform: str | None,
                         expected: tuple[Release, ...]) -> None:
    assert rel.status_releases(current, (TRAINER,), platform) == expected
