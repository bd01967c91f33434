"""Rendered manifests validate strictly: core kinds with kubernetes-validate for several
Kubernetes versions, prometheus-operator kinds against their CRD schemas (tests/schemas/)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helm import (
    KUBE_VERSIONS,
    VALUE_SETS,
    crd_schema,
    helm,
    manifests,
    with_image,
)

CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: manifests(values) for name, values in VALUE_SETS.items()}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_clean(name: str, kube_version: str) -> None:
    from tests.support.helm import CHART

    report = helm().lint(str(CHART), with_image(VALUE_SETS[name]), strict=True,
                         namespace="monitoring", kube_version=f"v{kube_version}.0")
    assert report["errors"] == []
    # Only the info "icon is recommended" may remain; warnings fail like `helm lint --strict`.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_core_kinds_validate_strictly(
    rendered: dict[str, list[dict[str, Any]]], name: str, kube_version: str
) -> None:
    kv = pytest.importorskip("kubernetes_validate.utils")
    objs = [o for o in rendered[name] if o["kind"] not in CRD_KINDS]
    assert objs
    for obj in objs:
        try:
            kv.validate(obj, kube_version, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {kube_version}: {exc.message}")


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_crd_kinds_match_their_schema(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for obj in rendered[name]:
        if obj["kind"] in CRD_KINDS:
            validator = jsonschema.Draft202012Validator(crd_schema(obj["kind"]))
            errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                      for e in validator.iter_errors(obj)]
            assert errors == [], f"{obj['kind']}/{obj['metadata']['name']}"


def test_crd_schemas_reject_what_the_operator_would() -> None:
    """The hand-written CRD subsets are not vacuous."""
    jsonschema = pytest.importorskip("jsonschema")
    sm = jsonschema.Draft202012Validator(crd_schema("ServiceMonitor"))
    good = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "x"},
            "spec": {"selector": {}, "endpoints": [{"port": "metrics", "interval": "15s"}]}}
    assert list(sm.iter_errors(good)) == []
    bad_interval = {**good, "spec": {"selector": {}, "endpoints": [{"interval": "15 seconds"}]}}
    assert list(sm.iter_errors(bad_interval))
    no_selector = {**good, "spec": {"endpoints": []}}
    assert list(sm.iter_errors(no_selector))
    pr = jsonschema.Draft202012Validator(crd_schema("PrometheusRule"))
    rule_doc: dict[str, Any] = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                "metadata": {"name": "r"},
                "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0",
                                                             "for": "5m"}]}]}}
    assert list(pr.iter_errors(rule_doc)) == []
    both = {"alert": "A", "record": "r", "expr": "1"}
    rule_doc["spec"]["groups"][0]["rules"] = [both]
    assert list(pr.iter_errors(rule_doc))
    rule_doc["spec"]["groups"][0]["rules"] = [{"alert": "A", "expr": "1", "labels": {"n": 3}}]
    assert list(pr.iter_errors(rule_doc))


def test_kubernetes_validate_catches_a_bad_manifest() -> None:
    kv = pytest.importorskip("kubernetes_validate.utils")
    from tests.support.helm import one

    ds = one(manifests(), "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["bogusField"] = 1
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, KUBE_VERSIONS[-1], strict=True)
