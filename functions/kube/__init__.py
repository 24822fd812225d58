"""The one seam between this package and the Kubernetes API server.

Everything above it speaks plain dicts (raw JSON); everything below it is HTTP. Swap the
transport to inject faults or to count requests.
"""

from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource

__all__ = ["ApiError", "KubeClient", "Resource"]
