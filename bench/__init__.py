"""Benchmarks: measured figures for the README and the closing notes (``make bench``)."""
