"""What a release is made of, and what the install path promises: one version everywhere,
chart metadata for a chart index, a chart that names no unpublished image, documentation
that names no unpublished package, and CI that really builds and smoke-tests the image."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from tests.support.helm import CHART, VALUE_SETS, helm, manifests, one, render

ROOT = Path(__file__).resolve().parents[1]
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_one_version_everywhere() -> None:
    assert CHART_META["version"] == __version__
    assert str(CHART_META["appVersion"]) == __version__
    # The Dockerfile's default label (scripts/image.sh passes the same value explicitly).
    assert f"ARG VERSION={__version__}\n" in (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^## \[{re.escape(__version__)}\]$",
                     (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_chart_metadata_for_an_index() -> None:
    assert CHART_META["maintainers"] and all(m.get("name") for m in CHART_META["maintainers"])
    notes = CHART_META["annotations"]
    assert notes["artifacthub.io/license"] == "Apache-2.0"
    changes = yaml.safe_load(notes["artifacthub.io/changes"])
    assert changes and all(
        c["kind"] in {"added", "changed", "deprecated", "removed", "fixed", "security"}
        and c["description"] for c in changes)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_service_links_are_off(name: str) -> None:
    """A Service named like the release would inject GOODPUT_*_PORT=tcp://... variables."""
    spec: dict[str, Any] = one(manifests(VALUE_SETS[name]), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["enableServiceLinks"] is False


def test_image_repository_is_required() -> None:
    with pytest.raises(helm().HelmError, match=r"image\.repository is required.*make image"):
        render({"image": {"repository": ""}})


def test_image_is_the_repository_given_at_the_app_version() -> None:
    objs = manifests({"image": {"repository": "reg.example/gge"}})
    (container,) = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"reg.example/gge:{__version__}"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((CHART).glob("*.y*ml"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_nothing_unpublished_or_outside(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"pip install (-U )?gpu-goodput-exporter", text), "not on PyPI"
    assert "ghcr.io" not in text, "no image is published"
    assert "../shared" not in text and "the seed" not in text, "outside the repository"


def test_image_sources_name_no_made_up_repository() -> None:
    for path in (ROOT / "Dockerfile", CHART / "Chart.yaml",
                 ROOT / "deploy" / "systemd" / "gpu-goodput-exporter.service"):
        assert "github.com/gpu-goodput-exporter" not in path.read_text(), path


def test_ci_builds_the_image_and_the_packages_then_runs_the_readme_command() -> None:
    lines = [x.strip() for x in (ROOT / ".ci" / "run").read_text().splitlines()
             if x.strip() and not x.lstrip().startswith("#")]
    assert any("image_smoke.py" in x and "--debian-base" in x for x in lines)
    assert any("make dist" in x for x in lines)
    assert lines[-1] == "make test"


def test_runtime_needs_no_kubernetes_client() -> None:
    """The [kubernetes] extra is optional: nothing imports the client at start-up."""
    import subprocess
    import sys
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in meta["dependencies"] if d.startswith("kubernetes")]
    assert meta["optional-dependencies"]["kubernetes"]
    code = ("import sys; sys.modules['kubernetes'] = None\n"
            "import exporter.cli, exporter.wiring.daemon, exporter.sources.serving")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_discovery_without_the_client_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from structlog.testing import capture_logs

    from exporter.sources.serving import build as serving

    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with capture_logs() as logs:
        assert serving._kube_api() is None
    (entry,) = [e for e in logs if e["event"] == "serving_discovery_unavailable"]
    assert "[kubernetes] extra" in entry["error"] and "--extras kubernetes" in entry["error"]
