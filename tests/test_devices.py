"""GPU selection (``devices``, ``--devices``): a daemon owns the GPUs it is given, by index or
UUID, so two daemons with different node names can each own part of one host; a selection
naming no GPU of the host is one line and exit 2 at start-up."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from exporter.readings import Device
from exporter.settings.devices import DeviceSelectionError, select, spans
from exporter.sim.fake_nvml import simulated_node
from exporter.sources.nvml_session import DeviceHandle, NvmlSession
from exporter.wiring.config import ConfigError, build
from testkit.harness import REPO, child_env, daemon, http_get


def test_devices_parse_from_flags_env_and_file(tmp_path) -> None:
    assert build({}, {}).devices == []
    assert build({"devices": ["0,2"]}, {}).devices == ["0", "2"]
    assert build({"devices": ["0", "3-5"]}, {}).devices == ["0", "3", "4", "5"]
    assert build({}, {"GOODPUT_DEVICES": "10,11"}).devices == ["10", "11"]
    assert build({}, {"GOODPUT_DEVICES": "[1, 2]"}).devices == ["1", "2"]
    uuid = "GPU-5e1f0000-0000-4000-8000-000000000002"
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"devices: [0, {uuid}]\n")
    assert build({}, {}, str(cfg)).devices == ["0", uuid]


@pytest.mark.parametrize("value, words", [
    ("x", "'x' is neither a GPU index"), ("-1", "neither a GPU index"),
    ("3-1", "GPU range '3-1'"), ("0,,1", "'' is neither"), ("0-5000", "GPU range")])
def test_a_malformed_selection_names_the_item(value: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        build({"devices": [value]}, {})
    assert "devices" in str(err.value)


def _handles() -> list[DeviceHandle]:
    gpus = [Device(gpu=str(i), uuid=f"GPU-{i}") for i in range(3)]
    mig = [Device(gpu="1-1", uuid="MIG-a", parent_uuid="GPU-1"),
           Device(gpu="1-2", uuid="MIG-b", parent_uuid="GPU-1")]
    return [DeviceHandle(d, None) for d in (gpus[0], gpus[1], *mig, gpus[2])]


@pytest.mark.parametrize("wanted, gpus", [
    ((), ["0", "1", "1-1", "1-2", "2"]),
    (("2", "0"), ["0", "2"]),
    (("1",), ["1", "1-1", "1-2"]),
    (("GPU-1",), ["1", "1-1", "1-2"]),
    (("MIG-b", "GPU-2"), ["1-2", "2"])])
def test_select_by_index_or_uuid_keeps_the_real_index(wanted: tuple[str, ...],
                                                      gpus: list[str]) -> None:
    assert [h.device.gpu for h in select(_handles(), wanted)] == gpus


def test_select_names_every_unknown_item_and_the_host_gpus() -> None:
    with pytest.raises(DeviceSelectionError) as err:
        select(_handles(), ["0", "7", "GPU-9"])
    assert str(err.value) == ("no GPU 7, GPU-9 on this host (its GPUs: 0-2; nvidia-smi -L "
                              "lists their UUIDs)")
    assert spans([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


def test_the_session_lists_only_the_selected_gpus() -> None:
    uuid = "GPU-5e1f0000-0000-4000-8000-000000000010"
    session = NvmlSession(simulated_node(gpus=12), "simulated", ["9", uuid])
    session.open()
    try:
        assert [dh.device.gpu for dh in session.devices] == ["9", "10"]
    finally:
        session.close()


@pytest.mark.integration
def test_a_daemon_on_the_simulated_node_publishes_only_its_gpus() -> None:
    with daemon("--simulate", "--devices", "0,2", "--node-name", "half-a",
                ready_path="/readyz") as url:
        status, body = http_get(url + "/metrics")
    assert status == 200
    gpus = set(re.findall(r'^goodput_gpu_\w+\{[^}]*\bgpu="([^"]+)"', body, re.M))
    assert gpus == {"0", "2"}
    assert 'node="half-a"' in body


@pytest.mark.parametrize("devices, named", [("0,12", "no GPU 12 on this host"),
                                            ("GPU-nope", "no GPU GPU-nope on this host"),
                                            ("zero", "bad value for 'devices'")])
def test_a_selection_naming_no_gpu_exits_2_with_one_line(devices: str, named: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--devices", devices,
         "--listen", "127.0.0.1:0", "--log-format", "console", "--log-level", "warning"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and named in result.stderr, result.stderr
    assert result.stderr.startswith("gpu-goodput-exporter: ")
