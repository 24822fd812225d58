"""The Managed flow: check dependencies, ensure the namespace, render, apply, clean up.

Reads are one LIST per rendered type (namespaced types in the operand namespace, cluster-scoped
types by the part-of label), so a reconcile that finds everything in place costs a fixed number
of reads and no writes: an object is applied only when the cluster lacks something of its
desired body. The steps follow the operator's action order and stop at the first failure,
which becomes ``ProvisioningSucceeded=False`` (reason ``Error``) with the operator's wording.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.runtime.registry import Context
from functions.trainer import kinds, sweep
from functions.trainer.core import dependencies as deps
from functions.trainer.core import releases as rel
from functions.trainer.core.api import (
    PART_OF_LABEL,
    PART_OF_SELECTOR,
    PART_OF_VALUE,
    PLATFORM_CONFIGMAP,
    Condition,
    Release,
    Trainer,
)
from functions.trainer.core.apply import Action, Stamp, apply_order, object_id, plan_object
from functions.trainer.core.gc import ObjectId, collectable, labelled, sweep_needed
from functions.trainer.core.status import provisioned, provisioning_failed
from functions.trainer.render import Renderer, RenderError, Sources, read_component_metadata

Obj = dict[str, Any]
CLUSTER_VERSION_NAME = "version"
NEW_TYPE_TIMEOUT_SECONDS = 20.0
renderer = Renderer()


class ProvisioningFailed(Exception):
    """A step failed; the message is what ``ProvisioningSucceeded`` reports."""


@dataclass
class Outcome:
    """What a Managed pass learned; the status is computed from it."""

    provisioning: Condition
    degraded: Condition
    deployments: list[Obj]
    releases: tuple[Release, ...]
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReleaseInfo:
    component: tuple[Release, ...]
    platform: str | None


def is_openshift(kube: KubeClient) -> bool:
    """OpenShift has a ClusterVersion named ``version``. Errors other than 404 propagate."""
    return kube.get(resources.CLUSTERVERSIONS, CLUSTER_VERSION_NAME) is not None


def dependency_failure(kube: KubeClient, openshift: bool) -> deps.DependencyFailure | None:
    """The first unmet JobSet dependency (OpenShift: operator, CR, health; always: the CRD)."""
    if openshift:
        names = [str(o["metadata"]["name"]) for o in sweep.list_all(kube,
                                                                   kinds.OPERATOR_CONDITIONS)]
        if not deps.operator_installed(names):
            return deps.operator_missing()
        failure = deps.operator_cr_failure(sweep.list_all(kube, kinds.JOBSET_OPERATORS))
        if failure is not None:
            return failure
    served = kube.discover(deps.JOBSET_GROUP_VERSION)
    if not any(r.plural == deps.JOBSET_PLURAL for r in served):
        return deps.crd_failure(openshift)
    return None


def ensure_namespace(kube: KubeClient, name: str) -> bool:
    """Create the namespace, labelled, when missing; never touch an existing one. True if new."""
    if kube.get(resources.NAMESPACES, name) is not None:
        return False
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": {PART_OF_LABEL: PART_OF_VALUE}}}
    try:
        kube.create(namespace, res=resources.NAMESPACES)
    except ApiError as exc:
        if exc.status != 409:
            raise ProvisioningFailed(f"failed to create namespace: {exc.message}") from exc
        return False
    return True


def release_info(kube: KubeClient, sources: Sources, namespace: str,
                 configmaps: Sequence[Obj] | None = None) -> ReleaseInfo:
    """Component releases from the shipped metadata and the platform's announced version.

    ``configmaps`` (the namespace's ConfigMaps, when already listed) saves the GET.
    """
    component = rel.component_releases(read_component_metadata(sources))
    if configmaps is not None:
        platform_cm = next((c for c in configmaps
                            if c["metadata"]["name"] == PLATFORM_CONFIGMAP), None)
    else:
        try:
            platform_cm = kube.get(resources.CONFIGMAPS, PLATFORM_CONFIGMAP, namespace)
        except ApiError as exc:
            raise ProvisioningFailed(f"failed to get platform version: {exc.message}") from exc
    return ReleaseInfo(component, rel.platform_version(platform_cm))


def render_all(sources: Sources, namespace: str, openshift: bool,
               env: Mapping[str, str]) -> list[Obj]:
    sets = [(sources.manifests, namespace), (sources.runtime_set, None)]
    if openshift:
        sets.append((sources.imagestream_set, namespace))
    objs: list[Obj] = []
    try:
        for manifest_set, target_namespace in sets:
            objs.extend(renderer.render(manifest_set, env, target_namespace))
    except RenderError as exc:
        raise ProvisioningFailed(f"rendering manifests: {exc}") from exc
    return objs


Observed = dict[tuple[str, str], tuple[Resource, list[Obj]]]


def observe(kube: KubeClient, desired: Sequence[Obj], namespace: str) -> tuple[
        Observed, set[tuple[str, str]]]:
    """One LIST per rendered type, and the types the server does not serve.

    Namespaced types are listed in the operand namespace, cluster-scoped ones by the part-of
    label. ConfigMaps are listed unfiltered in the namespace, which also yields the platform's
    unlabelled handshake ConfigMap without a second read.
    """
    observed: Observed = {}
    missing: set[tuple[str, str]] = set()
    type_keys = {(str(o["apiVersion"]), str(o["kind"])) for o in desired}
    type_keys.add((resources.DEPLOYMENTS.api_version, "Deployment"))
    for type_key in sorted(type_keys):
        try:
            res = kinds.resource_of(kube, *type_key)
            selector = None if res.kind == "ConfigMap" else PART_OF_SELECTOR
            items = kube.list(res, namespace if res.namespaced else None,
                              label_selector=selector)
        except ApiError as exc:
            if exc.status != 404:
                raise
            missing.add(type_key)
            continue
        observed[type_key] = (res, items)
    return observed, missing


def _failure_text(obj: Obj, exc: ApiError) -> str:
    meta = obj["metadata"]
    where = f"{meta.get('namespace') or ''}/{meta['name']}"
    return (f"failure deploying resource {where}: apply failed {obj['apiVersion']}, "
            f"Kind={obj['kind']}: {exc.message or exc.reason}")


class Provisioner:
    """One Managed pass over one Trainer (a fresh instance per reconcile)."""

    def __init__(self, ctx: Context, trainer: Trainer, sources: Sources | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.ctx = ctx
        self.kube = ctx.kube
        self.trainer = trainer
        self.sources = sources or Sources.from_env()
        self.env = dict(os.environ) if env is None else env
        self.namespace = trainer.spec.namespace
        self.deployments: list[Obj] | None = None
        self.releases: ReleaseInfo = ReleaseInfo((), None)
        self.applied: list[str] = []
        self.applied_crds = 0
        self.deleted: list[str] = []

    def run(self) -> Outcome:
        generation = self.trainer.metadata.generation
        try:
            openshift = is_openshift(self.kube)
        except ApiError as exc:
            failure: deps.DependencyFailure | None = deps.detection_failure(exc.message)
            openshift = False
        else:
            failure = dependency_failure(self.kube, openshift)
        degraded = deps.degraded_condition(failure)
        if failure is not None:
            self.releases = release_info(self.kube, self.sources, self.namespace)
            return self._outcome(provisioning_failed(generation,
                                                     deps.provisioning_error(failure)), degraded)
        try:
            self._provision(openshift)
        except ProvisioningFailed as exc:
            return self._outcome(provisioning_failed(generation, str(exc)), degraded)
        except ApiError as exc:
            return self._outcome(provisioning_failed(generation, str(exc)), degraded)
        return self._outcome(provisioned(generation), degraded)

    def _outcome(self, provisioning: Condition, degraded: Condition) -> Outcome:
        """The outcome; a pass that stopped early reads the Deployments as the status function
        does, so both compute the same ``DeploymentsAvailable``."""
        if self.deployments is None:
            self.deployments = sweep.list_labelled(self.kube, resources.DEPLOYMENTS,
                                                   self.namespace)
        return Outcome(provisioning, degraded, self.deployments,
                       rel.status_releases(self.trainer.status.releases,
                                           self.releases.component, self.releases.platform),
                       self.applied, self.deleted)

    def stamp(self) -> Stamp:
        release = rel.release_stamp(self.releases.component, self.releases.platform)
        meta = self.trainer.metadata
        return Stamp(meta.generation, meta.name, meta.uid, release.name, release.version)

    def _provision(self, openshift: bool) -> None:
        created_namespace = ensure_namespace(self.kube, self.namespace)
        desired = render_all(self.sources, self.namespace, openshift, self.env)
        observed, missing = observe(self.kube, desired, self.namespace)
        configmaps = observed.get(("v1", "ConfigMap"), (resources.CONFIGMAPS, []))[1]
        self.releases = release_info(self.kube, self.sources, self.namespace, configmaps)
        stamp = self.stamp()
        before = [o for _, items in observed.values() for o in items]
        live = {object_id(o): o for o in before}
        for obj in apply_order(desired):
            type_key = (str(obj["apiVersion"]), str(obj["kind"]))
            meta = obj["metadata"]
            if type_key in missing:
                items = self._observe_new_type(type_key)
                if items is None:
                    raise ProvisioningFailed(
                        f"failed to lookup object {meta.get('namespace') or ''}/{meta['name']}: "
                        f"no matches for kind \"{obj['kind']}\" in version "
                        f"\"{obj['apiVersion']}\"")
                missing.discard(type_key)
                observed[type_key] = items
                live.update((object_id(o), o) for o in items[1])
            res = observed[type_key][0]
            current = live.get(object_id(obj))
            listed_unfiltered = type_key == ("v1", "ConfigMap")
            if current is None and not listed_unfiltered and not (
                    created_namespace and _in(obj, self.namespace)):
                current = self._get(res, obj)
            live[object_id(obj)] = self._apply(res, obj, current, stamp, desired)
        self._strip_runtime_finalizers(live.values())
        deleted = self._collect(observed, live, before, desired, stamp)
        self.deployments = [o for key, o in live.items()
                            if o.get("kind") == "Deployment" and key not in deleted
                            and _in(o, self.namespace) and labelled(o)]

    def _observe_new_type(self, type_key: tuple[str, str]
                          ) -> tuple[Resource, list[Obj]] | None:
        """A type that was not served when observed, after this pass applied CRDs.

        New CRDs take a moment to be served; wait for discovery to list the kind, then read
        it like any other type. ``None`` when it does not appear.
        """
        if not self.applied_crds:
            return None
        api_version, kind = type_key
        deadline = time.monotonic() + NEW_TYPE_TIMEOUT_SECONDS
        while not any(r.kind == kind for r in self.kube.discover(api_version)):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)
        res = kinds.resource_of(self.kube, api_version, kind)
        namespace = self.namespace if res.namespaced else None
        return res, sweep.list_labelled(self.kube, res, namespace)

    def _get(self, res: Resource, obj: Obj) -> Obj | None:
        """An object missing from the labelled LIST may still exist unlabelled."""
        meta = obj["metadata"]
        try:
            return self.kube.get(res, meta["name"], meta.get("namespace"))
        except ApiError as exc:
            raise ProvisioningFailed(
                f"failed to lookup object {meta.get('namespace') or ''}/{meta['name']}: "
                f"{exc.message}") from exc

    def _apply(self, res: Resource, obj: Obj, current: Obj | None, stamp: Stamp,
               desired: Sequence[Obj]) -> Obj:
        plan = plan_object(obj, current, stamp)
        if plan.owner_references is not None and current is not None:
            current = self._strip_owners(res, current, plan.owner_references)
        if plan.action is not Action.APPLY:
            return current or obj
        try:
            applied = self._ssa(plan.body, plan.field_manager, res)
        except ApiError as exc:
            if exc.status == 422 and "field is immutable" in exc.message:
                self._delete_deployments(desired)
                try:
                    applied = self._ssa(plan.body, plan.field_manager, res)
                except ApiError as again:
                    raise ProvisioningFailed(_failure_text(obj, again)) from again
            elif exc.status == 404 and obj["kind"] == "CustomResourceDefinition":
                return current or obj
            else:
                raise ProvisioningFailed(_failure_text(obj, exc)) from exc
        self.applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
        if obj["kind"] == "CustomResourceDefinition":
            self.applied_crds += 1
        return applied

    def _ssa(self, body: Obj, manager: str, res: Resource) -> Obj:
        return self.kube.apply(body, manager, force=True, res=res)

    def _strip_owners(self, res: Resource, current: Obj, keep: list[Obj]) -> Obj:
        meta = current["metadata"]
        patch = {"metadata": {"ownerReferences": keep or None,
                              "resourceVersion": meta.get("resourceVersion")}}
        try:
            return self.kube.patch(res, meta["name"], patch, meta.get("namespace"))
        except ApiError as exc:
            raise ProvisioningFailed(
                f"failed to remove owner references from {meta.get('namespace') or ''}/"
                f"{meta['name']}: {exc.message}") from exc

    def _delete_deployments(self, desired: Sequence[Obj]) -> None:
        """Immutable-selector recovery: delete the rendered Deployments so they are recreated."""
        for obj in desired:
            if obj["kind"] == "Deployment":
                meta = obj["metadata"]
                self.kube.delete(resources.DEPLOYMENTS, meta["name"], meta.get("namespace"),
                                 propagation="Background")
                self.ctx.log.info("deleted Deployment %s/%s to recreate it with a new "
                                  "selector", meta.get("namespace"), meta["name"])

    def _strip_runtime_finalizers(self, live: Iterable[Obj]) -> None:
        runtimes = [(kinds.CLUSTER_TRAINING_RUNTIMES, o) for o in live
                    if o.get("kind") == "ClusterTrainingRuntime" and labelled(o)]
        try:
            runtimes += [(kinds.TRAINING_RUNTIMES, o)
                         for o in sweep.list_labelled(self.kube, kinds.TRAINING_RUNTIMES)]
            sweep.strip_runtime_finalizers(self.kube, runtimes)
        except ApiError as exc:
            raise ProvisioningFailed(
                f"listing clustertrainingruntimes for finalizer removal: {exc.message}") from exc

    def _collect(self, observed: Observed, live: Mapping[ObjectId, Obj], before: Sequence[Obj],
                 desired: Sequence[Obj], stamp: Stamp) -> set[ObjectId]:
        """Delete stale objects of the rendered types; sweep every type when the stamp moved.

        Judged on the objects as they are after the apply; whether the stamp moved is judged
        on the objects as they were before it.
        """
        wanted: set[ObjectId] = {object_id(o) for o in desired}
        resource_by_type = {(res.group, res.kind): res for res, _ in observed.values()}
        deleted: set[ObjectId] = set()
        try:
            for key, obj in live.items():
                res = resource_by_type.get((key[0], key[1]))
                if res is not None and collectable(obj, stamp, wanted) and \
                        sweep.delete_object(self.kube, obj, res, "Foreground"):
                    deleted.add(key)
                    self.deleted.append(f"{key[1]}/{key[2]}/{key[3]}")
            if sweep_needed(before, stamp):
                self.deleted += sweep.sweep(self.kube, stamp, wanted, set(resource_by_type),
                                            namespace=self.namespace)
        except ApiError as exc:
            raise ProvisioningFailed(
                f"unable to refresh collectable resources: {exc.message}") from exc
        return deleted


def _in(obj: Obj, namespace: str) -> bool:
    return (obj.get("metadata") or {}).get("namespace") == namespace
