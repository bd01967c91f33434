"""The monitoring mixin: recording rules, alerts and Grafana dashboards generated from one
configuration (mixin/config.yaml). `python -m mixin` writes alerts/*.rules.yml and
dashboards/*.json; `python -m mixin --check` fails when they differ from the committed ones."""
