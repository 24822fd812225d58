"""Tools for exercising the functions under trouble (API faults) in tests and benchmarks."""
