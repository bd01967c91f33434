"""The simulated fleet: generator, sharded Prometheus stack, benchmark (issue 27)."""
