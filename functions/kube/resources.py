"""A static table of the API resources this package touches.

Hot paths address resources through this table instead of discovery, so a cold function pod
makes no discovery round trips. Unknown kinds (the Trainer's rendered manifests) are resolved
with :meth:`functions.kube.client.KubeClient.resource_for`, which asks discovery once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object (and a subresource of it)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


def _core(plural: str, kind: str, namespaced: bool = True) -> Resource:
    return Resource("", "v1", plural, kind, namespaced)


PODS = _core("pods", "Pod")
SERVICES = _core("services", "Service")
CONFIGMAPS = _core("configmaps", "ConfigMap")
SECRETS = _core("secrets", "Secret")
EVENTS = _core("events", "Event")
NAMESPACES = _core("namespaces", "Namespace", namespaced=False)
NODES = _core("nodes", "Node", namespaced=False)
SERVICEACCOUNTS = _core("serviceaccounts", "ServiceAccount")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
JOBS = Resource("batch", "v1", "jobs", "Job")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", namespaced=False)
HPAS = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
CLUSTERVERSIONS = Resource("config.openshift.io", "v1", "clusterversions", "ClusterVersion",
                           namespaced=False)

TRAINERS = Resource("components.platform.opendatahub.io", "v1alpha1", "trainers", "Trainer",
                    namespaced=False)
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
TFJOBS = Resource("kubeflow.org", "v1", "tfjobs", "TFJob")
MXJOBS = Resource("kubeflow.org", "v1", "mxjobs", "MXJob")
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
XGBOOSTJOBS = Resource("kubeflow.org", "v1", "xgboostjobs", "XGBoostJob")
PADDLEJOBS = Resource("kubeflow.org", "v1", "paddlejobs", "PaddleJob")
JAXJOBS = Resource("kubeflow.org", "v1", "jaxjobs", "JAXJob")
BROKERS = Resource("eventing.knative.dev", "v1", "brokers", "Broker")
PINGSOURCES = Resource("sources.knative.dev", "v1", "pingsources", "PingSource")
TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
CLUSTER_TRAINING_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes",
                                     "ClusterTrainingRuntime", namespaced=False)
PODGROUPS_VOLCANO = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PODGROUPS_SCHEDULER_PLUGINS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")

KNOWN: tuple[Resource, ...] = (
    PODS, SERVICES, CONFIGMAPS, SECRETS, EVENTS, NAMESPACES, NODES, SERVICEACCOUNTS,
    DEPLOYMENTS, ROLES, ROLEBINDINGS, JOBS, LEASES, CRDS, HPAS, CLUSTERVERSIONS,
    TRAINERS, PYTORCHJOBS, TFJOBS, MXJOBS, MPIJOBS, XGBOOSTJOBS, PADDLEJOBS, JAXJOBS,
    TRAINJOBS, CLUSTER_TRAINING_RUNTIMES,
)

_BY_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in KNOWN}


def known(api_version: str, kind: str) -> Resource | None:
    """The table entry for ``apiVersion``/``kind``, if this package knows it statically."""
    return _BY_KIND.get((api_version, kind))
