"""Kubeflow training on Open Data Hub as stateless Knative functions.

The package is layered: ``functions.core`` and each domain's ``core`` subpackage are pure (plain
data in, plain data out); ``functions.kube`` is the one seam to the Kubernetes API;
``functions.runtime`` turns CloudEvents into reconcile calls; ``devstack.cluster`` runs a real
local control plane for development and tests.
"""


def __getattr__(name: str) -> str:
    """``__version__``, the package's one version source (its metadata, from
    pyproject.toml), looked up when asked: importing ``importlib.metadata`` costs 27 ms, which
    a function's cold start (``import functions``) need not pay."""
    if name != "__version__":
        raise AttributeError(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odh-training-functions")
    except PackageNotFoundError:  # a source tree used without installing it
        return "0+unknown"
