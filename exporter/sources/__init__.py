"""Sources: each reads one thing (NVML, GPM, DCGM, serving engines, Kubernetes) on its own
schedule and publishes a :class:`~exporter.snapshot.SourceResult`."""
