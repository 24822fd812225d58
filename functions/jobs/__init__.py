"""Kubeflow training-job controllers: the kinds of functions.jobs.core.frameworks (the v1 kinds
and MPIJob v2beta1)."""
