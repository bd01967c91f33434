"""Validation on real GPUs: known workloads, what the daemon saw."""
