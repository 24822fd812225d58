"""The Trainer component: deploys Kubeflow Trainer v2 from a ``Trainer`` custom resource."""
