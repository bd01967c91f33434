"""Grafana dashboards as code (grafana-foundation-sdk). `python -m dashboards.generator`
writes dashboards/*.json; `--check` fails when the committed JSON is out of date."""
