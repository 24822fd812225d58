"""The source filters (config/components/source-filters): added to config/default they give
the objects source ``spec.filters`` and change nothing else; the local stack merges them as
kustomize does; and they pass exactly the events that some Trigger of ``eventing/`` takes, so
dropping the rest at the adapter changes who gets what in nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from functions.core.triggers import compile_trigger_filter
from functions.runtime.eventing import (
    adapter_environment,
    load_manifests,
    source_filter_patches,
    with_source_filters,
)
from tests.deploy.support import REPO, build_default_with

Obj = dict[str, Any]
COMPONENT = REPO / "config" / "components" / "source-filters"
EVENTING = REPO / "eventing"
TYPES = tuple(f"dev.knative.apiserver.resource.{verb}" for verb in ("add", "update", "delete"))


def overlay(kustomize: Path, tmp: Path, component: bool) -> list[Obj]:
    """config/default, with the source filters or without."""
    added = ["config/components/source-filters"] if component else []
    return build_default_with(kustomize, tmp, *added)


def _key(obj: Obj) -> tuple[str, str, str]:
    return (str(obj["kind"]), str(obj["metadata"].get("namespace")), obj["metadata"]["name"])


def test_the_component_adds_filters_to_the_objects_source_only(bin_dir: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "filtered").mkdir()
    plain = {_key(o): o for o in overlay(bin_dir / "kustomize", tmp_path / "plain", False)}
    filtered = {_key(o): o for o in overlay(bin_dir / "kustomize", tmp_path / "filtered", True)}
    assert plain.keys() == filtered.keys()
    changed = sorted(k for k in plain if plain[k] != filtered[k])
    assert changed == [("ApiServerSource", "opendatahub", "odh-training-objects")]
    source = filtered[changed[0]]
    assert "filters" not in plain[changed[0]]["spec"]
    assert {**source["spec"], "filters": None} == {**plain[changed[0]]["spec"], "filters": None}
    [patch] = source_filter_patches(COMPONENT)
    assert source["spec"]["filters"] == patch["spec"]["filters"]


def test_the_local_stack_merges_them_as_kustomize_does(bin_dir: Path, tmp_path: Path) -> None:
    built = [o for o in overlay(bin_dir / "kustomize", tmp_path, True)
             if o["kind"] == "ApiServerSource"]
    merged = with_source_filters(load_manifests(EVENTING).apiserver_sources,
                                 source_filter_patches(COMPONENT))
    assert ({o["metadata"]["name"]: o["spec"].get("filters") for o in merged}
            == {o["metadata"]["name"]: o["spec"].get("filters") for o in built})
    # and the sources of eventing/ themselves are left as they were
    assert not any(s["spec"].get("filters") for s in load_manifests(EVENTING).apiserver_sources)


def _events(source: Obj) -> list[dict[str, str]]:
    """Every kind of CloudEvent the source's adapter makes: each watched kind, each change."""
    extensions = (source["spec"].get("ceOverrides") or {}).get("extensions") or {}
    return [{"type": kind_type, "kind": str(r["kind"]), "apiversion": str(r["apiVersion"]),
             "name": "x", "namespace": "ns", **extensions}
            for r in source["spec"]["resources"] for kind_type in TYPES]


FILTERED = [s for s in with_source_filters(load_manifests(EVENTING).apiserver_sources,
                                           source_filter_patches(COMPONENT))
            if s["spec"].get("filters")]


@pytest.mark.parametrize("source", [pytest.param(s, id=s["metadata"]["name"]) for s in FILTERED])
def test_a_source_sends_exactly_what_some_trigger_takes(source: Obj) -> None:
    triggers = [compile_trigger_filter(t["spec"]) for t in load_manifests(EVENTING).triggers]
    passes = compile_trigger_filter({"filters": source["spec"]["filters"]}).matches
    wrong = [(e["type"].rpartition(".")[2], e["kind"], passes(e)) for e in _events(source)
             if passes(e) != any(t.matches(e) for t in triggers)]
    assert wrong == [], "(change, kind, sent) the source filters and the Triggers disagree on"
    dropped = {(e["type"].rpartition(".")[2], e["kind"]) for e in _events(source)
               if not passes(e)}
    # what the filters are there for: creations made by reconcile, Service updates
    assert {("add", "Pod"), ("add", "Service"), ("update", "Service")} <= dropped


def test_the_adapter_is_given_the_filters() -> None:
    [source] = FILTERED
    config = adapter_environment(source, "http://sink")["K_SOURCE_CONFIG"]
    assert '"filters"' in config
    [plain] = [s for s in load_manifests(EVENTING).apiserver_sources
               if s["metadata"]["name"] == source["metadata"]["name"]]
    assert '"filters"' not in adapter_environment(plain, "http://sink")["K_SOURCE_CONFIG"]
