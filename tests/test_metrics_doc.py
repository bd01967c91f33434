"""docs/metrics.md is generated from the catalog and must match it."""

from exporter.metrics import docs


def test_metrics_doc_is_current():
    assert docs.main(["--check"]) == 0, "run: python -m exporter.metrics.docs"
