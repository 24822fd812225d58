"""``python -m functions doctor``: a read-only preflight of a live cluster."""
