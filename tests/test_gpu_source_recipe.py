"""A GPU source from another vendor, added by docs/architecture.md's recipe alone, gets the
vendor-neutral GPU series (issue #52).

On a copy of the whole repository (``tests/support/repo_copy.py``),
``tests/support/amd_gpus.py`` (AMD GPUs from amdgpu's sysfs files) goes in as
``exporter/collectors/amd.py`` with its one registry line, the generated references are
regenerated and the chart's schema names it, as the recipe says; the real daemon runs it
with every NVML collector off over a fake sysfs tree. Its GPUs must get what every alert and
dashboard keys on: ``goodput_gpu_info`` with their identity, up, utilization (ratio and
counter), memory, power, energy and temperature, and the model's regime. Before the
neutral series were declared apart from NVML's collector, none of them appeared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import REPO, http_get
from tests.support import amd_gpus, repo_copy

NVML_OFF = ("--no-collector.nvml", "--no-collector.xid", "--no-collector.profiling")
GIB = 2**30
CARDS = [
    {"unique_id": "a1b2c3d4e5f60718", "product_name": "AMD Instinct MI300X",
     "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:0c:00.0", "gpu_busy_percent": "87",
     "mem_busy_percent": "40", "mem_info_vram_used": str(150 * GIB),
     "mem_info_vram_total": str(192 * GIB), "hwmon/hwmon0/power1_average": "612000000",
     "hwmon/hwmon0/power1_cap": "750000000", "hwmon/hwmon0/energy1_input": "9000000000",
     "hwmon/hwmon0/temp1_input": "61000"},
    {"unique_id": "a1b2c3d4e5f60719", "product_name": "AMD Instinct MI300X",
     "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:22:00.0", "gpu_busy_percent": "0",
     "mem_info_vram_used": "0", "mem_info_vram_total": str(192 * GIB),
     "hwmon/hwmon0/power1_average": "140000000", "hwmon/hwmon0/energy1_input": "100000000",
     "hwmon/hwmon0/temp1_input": "35000"},
]


SCHEMA = "helm/gpu-goodput-exporter/values.schema.json"


@pytest.fixture(scope="module")
def amd_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe, step by step, on a copy of the whole repository
    (``tests/support/repo_copy.py``): the module as exporter/collectors/amd.py, its name in
    COLLECTOR_NAMES, the two references regenerated and its name in the chart's schema."""
    root = repo_copy.whole(tmp_path_factory.mktemp("amd"))
    repo_copy.add_collector(root, amd_gpus.NAME, Path(amd_gpus.__file__))
    repo_copy.regenerate(root, repo_copy.generators("metrics", "settings"))
    schema = json.loads((root / SCHEMA).read_text())
    switches = schema["properties"]["exporter"]["properties"]["collectors"]["properties"]
    switches[amd_gpus.NAME] = {"type": "boolean"}
    (root / SCHEMA).write_text(json.dumps(schema, indent=2) + "\n")
    return root


@pytest.fixture
def amd_daemon(amd_repo: Path, tmp_path: Path) -> Iterator[str]:
    sysfs = amd_gpus.write_tree(tmp_path / "sys", CARDS)
    with repo_copy.daemon(amd_repo, *NVML_OFF, "--interval", "0.2", "--amd-interval", "0.2",
                          "--amd-sysfs-root", str(sysfs)) as url:
        yield url


def _amd_samples(url: str) -> dict[tuple[str, str], tuple[float, dict[str, str]]]:
    """(name, gpu) -> (value, labels) of every sample of the AMD GPUs (the first of a name
    and gpu: the families these checks read have one series per GPU)."""
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    found: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.labels.get("gpu", "").startswith("amd"):
                found.setdefault((s.name, s.labels["gpu"]), (s.value, s.labels))
    return found


def test_another_vendors_gpus_get_the_neutral_series(amd_daemon: str) -> None:
    deadline = time.monotonic() + 20
    while True:  # the counters and the regime need a second poll
        samples = _amd_samples(amd_daemon)
        if ("goodput_gpu_regime", "amd1") in samples and \
                samples.get(("goodput_gpu_utilization_seconds_total", "amd0"), (0,))[0] > 0:
            break
        assert time.monotonic() < deadline, sorted(samples)
        time.sleep(0.2)

    def value(name: str, gpu: str) -> float:
        assert (name, gpu) in samples, f"{name} missing for {gpu}: {sorted(samples)}"
        return samples[(name, gpu)][0]

    info = samples[("goodput_gpu_info", "amd0")][1]
    assert (info["uuid"], info["name"], info["pci_bus_id"]) == (
        "a1b2c3d4e5f60718", "AMD Instinct MI300X", "0000:0c:00.0")
    assert value("goodput_gpu_info", "amd1") == 1
    assert value("goodput_gpu_up", "amd0") == 1
    assert value("goodput_gpu_utilization_ratio", "amd0") == pytest.approx(0.87)
    assert value("goodput_gpu_utilization_ratio", "amd1") == 0
    assert value("goodput_gpu_memory_used_bytes", "amd0") == 150 * GIB
    assert value("goodput_gpu_memory_total_bytes", "amd1") == 192 * GIB
    assert value("goodput_gpu_power_watts", "amd0") == pytest.approx(612.0)
    assert value("goodput_gpu_energy_joules_total", "amd0") == pytest.approx(9000.0)
    assert value("goodput_gpu_temperature_celsius", "amd1") == pytest.approx(35.0)
    assert ("goodput_gpu_info", "amd2") not in samples  # the card of another vendor
    # the model judges them too: no profiling counters on the busy one, idle the other
    assert ("goodput_gpu_regime", "amd0") in samples


def test_the_recipe_adds_no_family_and_the_collector_its_flags(amd_repo: Path) -> None:
    """What the recipe says to regenerate names the new collector's settings, and the
    metrics reference is unchanged: it adds no family, its GPUs fill the neutral ones."""
    assert (amd_repo / "docs" / "metrics.md").read_text() == \
        (REPO / "docs" / "metrics.md").read_text()
    assert "docs/settings.md" in repo_copy.changed(amd_repo)
    out = repo_copy.ok(repo_copy.run(amd_repo, "-m", "exporter", "--help"))
    assert "--amd-sysfs-root DIR" in out and "[GOODPUT_AMD__SYSFS_ROOT]" in out


def test_the_copy_passes_the_checks_of_the_areas_the_recipe_touches(amd_repo: Path) -> None:
    """The generated references, the registry, the on/off switch of every collector (its
    own included), the chart's schema and the import layers, run in the copy as the commit
    would run them."""
    repo_copy.check(amd_repo)
    repo_copy.pytest(amd_repo, "tests/test_registry.py", "tests/test_collectors.py",
                     "tests/test_import_structure.py",
                     "tests/test_helm_chart.py::test_chart_names_every_collector_of_the_registry")
    listed = repo_copy.ok(repo_copy.run(amd_repo, "-m", "pytest", "-q", "--co", "-p",
                                        "no:cacheprovider", "tests/test_collectors.py"))
    assert "[amd]" in listed
