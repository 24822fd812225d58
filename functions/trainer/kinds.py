"""The API resources the Trainer component reads and writes, addressed without discovery.

Rendered objects are mostly of these kinds; knowing their plurals and scope statically keeps a
cold function pod from spending discovery round trips before its first apply. Kinds not listed
here are resolved through :meth:`functions.kube.client.KubeClient.resource_for`.
"""

from __future__ import annotations

from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource

_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

ROLES = Resource(_RBAC, "v1", "roles", "Role")
ROLEBINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding")
CLUSTERROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTERROLEBINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding",
                               namespaced=False)
MUTATING_WEBHOOKS = Resource(_ADMISSION, "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", namespaced=False)
VALIDATING_WEBHOOKS = Resource(_ADMISSION, "v1", "validatingwebhookconfigurations",
                               "ValidatingWebhookConfiguration", namespaced=False)
PODMONITORS = Resource("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor")
CLUSTER_TRAINING_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1",
                                     "clustertrainingruntimes", "ClusterTrainingRuntime",
                                     namespaced=False)
TRAINING_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes",
                             "TrainingRuntime")
IMAGESTREAMS = Resource("image.openshift.io", "v1", "imagestreams", "ImageStream")
OPERATOR_CONDITIONS = Resource("operators.coreos.com", "v2", "operatorconditions",
                               "OperatorCondition")
JOBSET_OPERATORS = Resource("operator.openshift.io", "v1", "jobsetoperators", "JobSetOperator",
                            namespaced=False)

_TABLE: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r for r in (
        ROLES, ROLEBINDINGS, CLUSTERROLES, CLUSTERROLEBINDINGS, MUTATING_WEBHOOKS,
        VALIDATING_WEBHOOKS, PODMONITORS, CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES,
        IMAGESTREAMS, resources.CONFIGMAPS, resources.SECRETS, resources.SERVICES,
        resources.SERVICEACCOUNTS, resources.DEPLOYMENTS, resources.CRDS,
        resources.NAMESPACES)
}


def resource_of(kube: KubeClient, api_version: str, kind: str) -> Resource:
    """The resource of a rendered kind: this table, then the client's (discovery-backed) one."""
    return _TABLE.get((api_version, kind)) or kube.resource_for(api_version, kind)
