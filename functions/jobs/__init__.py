"""Kubeflow training-job controllers (PyTorchJob, TFJob, MXJob, MPIJob v2beta1)."""
