"""Benchmarks and their deterministic fixtures; run by hand with ``make bench``."""
