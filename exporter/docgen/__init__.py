"""The generated references, commands a person (and CI, with ``--check``) runs:
``python -m exporter.docgen.metrics`` writes docs/metrics.md from the collector registry,
``python -m exporter.docgen.settings`` docs/settings.md from the settings schema. At the top
of the layers with ``exporter/cli.py``: nothing imports them."""
