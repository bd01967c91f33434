"""Benchmarks and validation runs, by hand (bench/README.md)."""
