"""Pure building blocks shared by every controller: no I/O, no Kubernetes client, no Flask."""
