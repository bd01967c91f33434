"""Running the sources: the scheduler polls each on its own cadence and publishes into
the snapshot (the wiring that builds it is ``exporter/wiring/``)."""
