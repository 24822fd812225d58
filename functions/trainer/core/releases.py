"""Release bookkeeping: ``status.releases`` and the release that stamps applied objects.

The shipped ``component_metadata.yaml`` names the Kubeflow Trainer release; the platform can
announce its own version in the ``odh-trainer-config`` ConfigMap (``platformVersion``). The
release in force decides the ``platform.opendatahub.io/type``/``version`` annotations, and so
which objects garbage collection considers stale after an upgrade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from functions.trainer.core.api import PLATFORM_VERSION_KEY, Release

PLATFORM_RELEASE = "platform"

_SEMVER = re.compile(
    r"^(?P<major>0|[1-9]\d*)(?:\.(?P<minor>0|[1-9]\d*))?(?:\.(?P<patch>0|[1-9]\d*))?"
    r"(?P<pre>-[0-9A-Za-z.-]+)?(?P<build>\+[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True, slots=True)
class ReleaseStamp:
    """The release applied objects are annotated with (``type`` and ``version``)."""

    name: str
    version: str


def component_releases(metadata_text: str) -> tuple[Release, ...]:
    """The ``releases`` of ``component_metadata.yaml``; malformed input gives ``()``."""
    try:
        data = yaml.safe_load(metadata_text)
    except yaml.YAMLError:
        return ()
    entries = data.get("releases") if isinstance(data, dict) else None
    found: list[Release] = []
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name"):
            found.append(Release(name=str(entry["name"]), version=str(entry.get("version", "")),
                                 repoUrl=str(entry.get("repoUrl", ""))))
    return tuple(found)


def parse_version(raw: str) -> str | None:
    """A tolerant semantic-version parse: ``v`` prefix, missing minor/patch. Normalised form."""
    text = raw.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    match = _SEMVER.match(text)
    if match is None:
        return None
    core = ".".join(match.group(part) or "0" for part in ("major", "minor", "patch"))
    return core + (match.group("pre") or "") + (match.group("build") or "")


def platform_version(configmap: Mapping[str, Any] | None) -> str | None:
    """The raw, parseable ``platformVersion`` of the handshake ConfigMap, if any."""
    if not configmap:
        return None
    raw = str((configmap.get("data") or {}).get(PLATFORM_VERSION_KEY) or "")
    return raw if raw and parse_version(raw) is not None else None


def release_stamp(component: tuple[Release, ...], platform: str | None) -> ReleaseStamp:
    """The platform's release when announced, otherwise the first component release."""
    if platform is not None:
        return ReleaseStamp(PLATFORM_RELEASE, parse_version(platform) or platform)
    if component:
        first = component[0]
        return ReleaseStamp(first.name, parse_version(first.version) or first.version)
    return ReleaseStamp("", "")


def upsert_releases(current: Iterable[Release], updates: Iterable[Release]) -> tuple[Release, ...]:
    """``current`` with every update upserted by name (existing positions kept)."""
    merged = {release.name: release for release in current}
    for release in updates:
        merged[release.name] = release
    return tuple(merged.values())


def status_releases(current: Iterable[Release], component: tuple[Release, ...],
                    platform: str | None) -> tuple[Release, ...]:
    updates = list(component)
    if platform is not None:
        updates.append(Release(name=PLATFORM_RELEASE, version=platform))
    return upsert_releases(current, updates)
