"""--profiling modes, and auto's per-GPU choice on a mixed Hopper + Ampere node."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from exporter.metrics.profiling import AVAILABILITY
from exporter.readings import Device
from exporter.snapshot import SourceResult
from exporter.sources.nvml_session import DeviceHandle
from exporter.sources.profiling.build import ProfilingOffSource, build_profiling_sources
from exporter.sources.profiling.config import ProfilingConfig
from exporter.sources.profiling.dcgm import DcgmSource
from exporter.sources.profiling.dcgm_bindings import load_bindings
from exporter.sources.profiling.gpm import GpmSource
from exporter.sources.profiling.select import ProfilingSelector
from exporter.wiring import config
from tests.support.typed import gpus_of

FAKE_DIR = str(Path(__file__).parent / "fakes" / "dcgm")
load_bindings(FAKE_DIR, search_paths=())
import fake_dcgm_engine  # noqa: E402
from fake_dcgm_engine import FakeGpu, FakeHostEngine  # noqa: E402

H100, A100 = "GPU-hhhh", "GPU-aaaa"


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _stub_nvml() -> SimpleNamespace:
    """Just enough NVML for GpmSource's probe and first sample (no metrics yet)."""
    return SimpleNamespace(
        NVMLError=_NVMLError,
        nvmlGpmQueryDeviceSupport=lambda h: SimpleNamespace(isSupportedDevice=int(h == "h0")),
        nvmlGpmSampleAlloc=lambda: object(),
        nvmlGpmSampleGet=lambda h, s: None,
        nvmlGpmSampleFree=lambda s: None,
        nvmlShutdown=lambda: None,
    )


def _session() -> SimpleNamespace:
    return SimpleNamespace(
        nvml=_stub_nvml(),
        devices=[DeviceHandle(Device("0", H100), "h0"), DeviceHandle(Device("1", A100), "h1")],
        open=lambda: None,
        close=lambda: None,
    )


INVENTORY = (Device("0", H100), Device("1", A100))


def _inventory() -> tuple[Device, ...]:
    return INVENTORY


def _rows(result: SourceResult, gpu: str) -> list[tuple[str, float, dict[str, str]]]:
    """goodput_gpu_profiling_available as /metrics shows it for this backend's status."""
    status = gpus_of(result).get(gpu)
    if status is None:
        return []
    fam = AVAILABILITY.families[0]
    return [(fam.name, v, dict(zip(fam.labels, labels, strict=True)))
            for labels, v in fam.rows((status,))]


@pytest.mark.parametrize(("mode", "extra", "names"), [
    ("auto", {}, ["gpm", "dcgm"]),
    ("auto", {"dcgm_exporter_url": "http://localhost:9400/metrics"},
     ["gpm", "dcgm", "dcgm-exporter"]),
    ("gpm", {}, ["gpm"]),
    ("dcgm", {}, ["dcgm"]),
    ("dcgm-exporter", {"dcgm_exporter_url": "http://localhost:9400/metrics"}, ["dcgm-exporter"]),
    ("off", {}, ["profiling-off"]),
])
def test_modes_build_their_sources(mode: str, extra: dict[str, Any], names: list[str]) -> None:
    settings = config.build({"profiling": {"mode": mode, **extra}}, environ={})
    sources = build_profiling_sources(settings, _session(), _inventory)
    assert [s.name for s in sources] == names
    dcgm = [s for s in sources if isinstance(s, DcgmSource)]
    if dcgm:
        assert dcgm[0].required is (mode == "dcgm")


def test_auto_fallbacks_share_their_counters() -> None:
    settings = config.build({"profiling": {"dcgm_exporter_url": "http://localhost:9400/m"}},
                            environ={})
    _, dcgm, exporter = build_profiling_sources(settings, _session(), _inventory)
    assert dcgm._integrator is exporter._integrator  # type: ignore[attr-defined]


def test_auto_never_starts_an_embedded_engine() -> None:
    settings = config.build({"profiling": {"dcgm_host_engine": "embedded"}}, environ={})
    dcgm = next(s for s in build_profiling_sources(settings, _session(), _inventory)
                if isinstance(s, DcgmSource))
    assert dcgm.address.kind == "tcp"


def test_config_from_environment() -> None:
    settings = config.build({}, environ={"GOODPUT_PROFILING__MODE": "dcgm",
                                         "GOODPUT_PROFILING__DCGM_HOST_ENGINE": "unix:///run/he"})
    assert settings.section(ProfilingConfig).mode == "dcgm"
    with pytest.raises(config.ConfigError, match="dcgm_exporter_url"):
        config.build({"profiling": {"mode": "dcgm-exporter"}}, environ={})
    with pytest.raises(config.ConfigError, match="http"):
        config.build({"profiling": {"dcgm_exporter_url": "localhost:9400"}}, environ={})


async def test_off_says_so_per_gpu() -> None:
    result = await ProfilingOffSource(_inventory).poll()
    assert _rows(result, "1") == [("goodput_gpu_profiling_available", 0.0,
                                   {"source": "none", "reason": "off"})]


def test_mixed_node_gpm_on_hopper_dcgm_on_ampere() -> None:
    fake_dcgm_engine.ENGINE = FakeHostEngine(gpus=[FakeGpu(0, A100, {1002: 0.7})])
    selector = ProfilingSelector(("gpm", "dcgm"))
    gpm = GpmSource(_session(), selector=selector)  # type: ignore[arg-type]
    dcgm = DcgmSource(_inventory, bindings_path=FAKE_DIR, selector=selector,
                      loader=lambda p: load_bindings(p, search_paths=()))
    with capture_logs() as logs:
        g1 = gpm.poll_blocking()
        d1 = dcgm.poll_blocking()
        fake_dcgm_engine.ENGINE.advance()
        g2 = gpm.poll_blocking()
        d2 = dcgm.poll_blocking()
    assert _rows(g1, "1") == [("goodput_gpu_profiling_available", 0.0,
                               {"source": "gpm", "reason": "unsupported"})]
    assert set(gpus_of(d1)) == {"1"}  # DCGM never touches the H100
    assert _rows(d2, "1") == [("goodput_gpu_profiling_available", 1.0,
                               {"source": "dcgm", "reason": ""})]
    assert "1" not in gpus_of(g2)  # GPM steps aside once DCGM serves GPU 1
    assert selector.owner("0") == "gpm" and selector.owner("1") == "dcgm"
    chosen = [e for e in logs if e["event"] == "profiling_source_selected"]
    assert [(e["gpu"], e["source"]) for e in chosen] == [("0", "gpm"), ("1", "dcgm")]


def test_selector_falls_back_and_back() -> None:
    sel = ProfilingSelector(("gpm", "dcgm", "dcgm-exporter"))
    assert not sel.should_poll("dcgm", "0")  # GPM has not answered
    sel.report("gpm", "0", False, "unsupported")
    assert sel.should_poll("dcgm", "0") and not sel.should_poll("dcgm-exporter", "0")
    sel.report("dcgm", "0", False, "unreachable")
    assert sel.owner("0") == ""
    assert sel.should_poll("dcgm-exporter", "0")
    sel.report("dcgm-exporter", "0", True)
    assert sel.owner("0") == "dcgm-exporter"
    assert not sel.should_publish("dcgm", "0")  # its 0 row would contradict the 1 row
    assert sel.should_publish("gpm", "0") is False
    sel.report("dcgm", "0", True)  # host engine back
    assert sel.owner("0") == "dcgm"
    assert not sel.should_poll("dcgm-exporter", "0")
