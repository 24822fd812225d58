"""A real local control plane for development and tests (no containers, no kubelet)."""
