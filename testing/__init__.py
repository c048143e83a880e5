"""Helpers shared by the tests and the benchmarks: real servers, event and wire builders, store backends,
the corpus, golden files and seeded randomness, one concept per module. The product packages never import
it, and tests/test_layering.py enforces that. It is not shipped: pyproject.toml packages leave it out.
"""
