"""The local development run: the whole product against a real local cluster."""
