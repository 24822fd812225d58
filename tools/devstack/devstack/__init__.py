"""The local development and test stack of the ODH training functions: a real local control
plane (``devstack.cluster``), the whole product on it with the real Knative Eventing, the
upstream controllers run by a local kubelet and a pod network (``python -m devstack dev``), an
emulation of the Broker (``devstack.broker``), event recording and replay, and API fault
injection. A distribution of its own: the product (``functions``) never imports it."""
