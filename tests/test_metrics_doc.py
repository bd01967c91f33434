"""docs/metrics.md is generated from the catalog and must match it."""

from exporter.docgen import metrics as docs


def test_metrics_doc_is_current():
    assert docs.main(["--check"]) == 0, "run: python -m exporter.docgen.metrics"
