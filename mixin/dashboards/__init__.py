"""Grafana dashboards as code (grafana-foundation-sdk), built from the mixin configuration:
the same selector, label names, datasource and price as the rules."""

from mixin.dashboards.files import dashboard_files

__all__ = ["dashboard_files"]
