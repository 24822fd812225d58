"""Pure parts of the local stack: what a kubelet, cluster DNS and kube-proxy decide, without I/O."""
