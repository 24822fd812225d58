"""Kubeflow training on Open Data Hub as stateless Knative functions.

The package is layered: ``functions.core`` and each domain's ``core`` subpackage are pure (plain
data in, plain data out); ``functions.kube`` is the one seam to the Kubernetes API;
``functions.runtime`` turns CloudEvents into reconcile calls; ``functions.cluster`` runs a real
local control plane for development and tests.
"""

__version__ = "0.1.0"
