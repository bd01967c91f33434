"""Metric families: the catalog every source declares into, and the renderer."""
