"""The efficiency model: regimes, busy-but-unproductive, derived efficiency gauges.

``core`` is pure (windows in, verdicts out); ``source`` feeds it from the snapshot store.
"""
