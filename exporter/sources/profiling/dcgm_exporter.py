"""dcgm-exporter source: reuse the profiling values a node's dcgm-exporter already collects.

Where the GPU Operator runs dcgm-exporter, it owns the (pre-Hopper) profiler; a second
consumer would fight it. This source scrapes its ``/metrics`` on loopback, takes the
``DCGM_FI_PROF_*`` rows (ratios, PCIe/NVLink bytes per second) and the ``DCGM_FI_DEV_*`` rows,
maps rows to our devices by UUID (``GPU_I_ID`` for MIG instances) and publishes the same
profiling samples as GPM and DCGM.

Both vocabularies are accepted: dcgm-exporter <= 4.8 (``DCGM_FI_PROF_SM_ACTIVE``,
``DCGM_FI_DEV_GPU_UTIL`` in %, memory in MiB, clocks in MHz, energy in mJ) and >= 4.9
(DCGM 4.6+ names such as ``DCGM_FI_PROF_SM_UTIL_RATIO``, unit-suffixed DEV names in base
units). DEV rows only tell a GPU dcgm-exporter watches without profiling (``not_exported``)
from one it does not know (``not_found``); the NVML source owns those metric families.

dcgm-exporter samples profiling every collection interval (30 s by default) and prints no
timestamps, so each value is integrated over the time since our previous scrape: exact for
``rate()`` only when both intervals match (see docs/profiling.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp
import structlog
from prometheus_client.parser import text_string_to_metric_families

from exporter import urls
from exporter.readings import Device, ProfilingReading, ProfilingStatus
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.profiling.fields import NAMES, RATIO_FIELDS, build_window, normalise_uuid
from exporter.sources.profiling.integrator import ProfilingIntegrator
from exporter.sources.profiling.select import ProfilingSelector
from exporter.util import OnChange

log = structlog.get_logger("dcgm_exporter")

SOURCE = "dcgm-exporter"
MIB = 1024.0 * 1024.0
MAX_WINDOW = 120.0  # longer gaps are not integrated as if one value covered them

# <= 4.8 DEV names with their units -> (normalised key, factor to base units).
DEV_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_utilization_ratio", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory_copy_utilization_ratio", 0.01),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("memory_free_bytes", MIB),
    "DCGM_FI_DEV_POWER_USAGE": ("power_watts", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_joules", 0.001),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_hertz", 1e6),
    "DCGM_FI_DEV_MEM_CLOCK": ("memory_clock_hertz", 1e6),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_celsius", 1.0),
}
# >= 4.9: the unit is in the name.
DEV_SUFFIXES: dict[str, str] = {
    "_RATIO": "ratio",
    "_BYTES": "bytes",
    "_HZ": "hertz",
    "_WATTS": "watts",
    "_JOULES": "joules",
    "_CELSIUS": "celsius",
}


class _ScrapeError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Scrape:
    """One parsed exposition: profiling values and DEV values, per row key."""

    profiling: dict[str, dict[int, float]]
    device: dict[str, dict[str, float]]
    vocabulary: str  # "4.8" (old names), "4.9" (renamed), "" (no DCGM rows)


def row_key(uuid: str, gpu_instance: str = "") -> str:
    return f"{normalise_uuid(uuid)}/{gpu_instance}"


def device_key(device: Device) -> str:
    if device.is_mig:
        return row_key(device.parent_uuid, device.gpu_instance_id)
    return row_key(device.uuid)


def parse(text: str) -> Scrape:
    """Parse a dcgm-exporter exposition; raises ValueError on text that is not one."""
    profiling: dict[str, dict[int, float]] = {}
    device: dict[str, dict[str, float]] = {}
    old = new = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser appends "_total" to counters that lack it (DCGM names are upper case).
            name = sample.name.removesuffix("_total")
            if not name.startswith(("DCGM_FI_PROF_", "DCGM_FI_DEV_")):
                continue
            uuid = sample.labels.get("UUID") or sample.labels.get("uuid") or ""
            if not uuid:
                continue
            key = row_key(uuid, sample.labels.get("GPU_I_ID", ""))
            value = float(sample.value)
            field_id = NAMES.get(name)
            if field_id is not None:
                renamed = name.endswith("_RATIO")
                old, new = old or (not renamed and field_id in RATIO_FIELDS), new or renamed
                if field_id in RATIO_FIELDS and value > 1.0 + 1e-6:
                    value /= 100.0  # a custom counters file exporting percent
                profiling.setdefault(key, {})[field_id] = value
            elif name.startswith("DCGM_FI_DEV_"):
                normalised = _dev_value(name, value)
                if normalised is not None:
                    device.setdefault(key, {})[normalised[0]] = normalised[1]
                    new = new or name.endswith(tuple(DEV_SUFFIXES))
    vocabulary = "4.9" if new else "4.8" if old or profiling or device else ""
    return Scrape(profiling, device, vocabulary)


def _dev_value(name: str, value: float) -> tuple[str, float] | None:
    if name in DEV_FIELDS:
        key, factor = DEV_FIELDS[name]
        return key, value * factor
    for suffix, unit in DEV_SUFFIXES.items():
        if name.endswith(suffix):
            base = name.removeprefix("DCGM_FI_DEV_").removesuffix(suffix).lower()
            if unit == "ratio" and value > 1.0 + 1e-6:
                value /= 100.0  # DCGM_FI_DEV_GPU_UTIL_RATIO is still an INT64 field (%?)
            return f"{base}_{unit}", value
    return None


class DcgmExporterSource(Source):
    name = SOURCE
    gpu_poll = True

    def __init__(
        self,
        inventory: Callable[[], tuple[Device, ...]],
        url: str,
        *,
        interval: float = 5.0,
        timeout: float = 2.0,
        max_body_bytes: int = 16 * 1024 * 1024,
        selector: ProfilingSelector | None = None,
        required: bool = False,
        integrator: ProfilingIntegrator | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inventory = inventory
        self.url = url
        self.shown = urls.redact(url)
        """The URL as logs, errors and /debug/state show it (userinfo and query values
        replaced by <secret>)."""
        self.interval = interval
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.selector = selector
        self.required = required
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._integrator = integrator or ProfilingIntegrator()
        self._last_scrape_at = 0.0
        self._scrape_reason = "pending"
        self._gpu_reason: dict[str, str] = {}
        self._log = OnChange(log)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout), raise_for_status=False
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def poll(self) -> SourceResult:
        devices = self._wanted()
        if not devices:
            return SourceResult(source=SOURCE)
        if self._session is None:
            await self.start()
        now = self._clock()
        try:
            scrape = parse_or_fail(await self._fetch())
        except _ScrapeError as exc:
            return self._failed(devices, exc)
        self._scrape_state("", "")
        if scrape.vocabulary:
            self._log("vocabulary", scrape.vocabulary, "", event="dcgm_exporter_vocabulary",
                      url=self.shown)
        gap = now - self._last_scrape_at if self._last_scrape_at else self.interval
        self._last_scrape_at = now
        seconds = min(gap, MAX_WINDOW)
        out: dict[str, ProfilingStatus] = {}
        errors: dict[str, int] = {}
        for device in devices:
            key = device_key(device)
            values = scrape.profiling.get(key)
            if values:
                window = build_window(seconds, values)
                status = self._integrator.window(device.gpu, SOURCE, window)
                reason = ""
            else:
                reason = "not_exported" if key in scrape.device else "not_found"
                status = self._integrator.unavailable(device.gpu, SOURCE, reason)
                errors[reason] = errors.get(reason, 0) + 1
            self._gpu_state(device, reason)
            if self._publish(device.gpu, reason):
                out[device.gpu] = status
        return SourceResult(source=SOURCE, reading=ProfilingReading(out), errors=errors)

    def _wanted(self) -> list[Device]:
        return [
            d
            for d in self.inventory()
            if d.uuid and (self.selector is None or self.selector.should_poll(SOURCE, d.gpu))
        ]

    async def _fetch(self) -> bytes:
        assert self._session is not None
        try:
            async with self._session.get(self.url) as resp:
                if resp.status != 200:
                    raise _ScrapeError("bad_response", f"{self.shown}: HTTP {resp.status}")
                body = bytearray()
                async for chunk in resp.content.iter_chunked(65536):
                    body.extend(chunk)
                    if len(body) > self.max_body_bytes:
                        raise _ScrapeError(
                            "bad_response",
                            f"{self.shown}: body larger than {self.max_body_bytes} bytes",
                        )
                return bytes(body)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            message = f"{self.shown}: {type(exc).__name__}: {exc}".rstrip(": ")
            raise _ScrapeError("unreachable", urls.scrub(message, self.url)) from exc

    def _failed(self, devices: Iterable[Device], exc: _ScrapeError) -> SourceResult:
        self._scrape_state(exc.reason, str(exc))
        self._last_scrape_at = 0.0  # the next window starts afresh
        out: dict[str, ProfilingStatus] = {}
        for device in devices:
            if self.selector is not None:
                self.selector.report(SOURCE, device.gpu, False, exc.reason)
            if self._publish(device.gpu, exc.reason):
                out[device.gpu] = self._integrator.unavailable(device.gpu, SOURCE, exc.reason)
        if self.required:
            return SourceResult(
                source=SOURCE,
                ok=False,
                reason=exc.reason,
                error=str(exc),
                reading=ProfilingReading(out),
            )
        return SourceResult(source=SOURCE, reading=ProfilingReading(out), errors={exc.reason: 1})

    def _publish(self, gpu: str, reason: str) -> bool:
        if self.selector is None:
            return True
        return self.selector.should_publish(SOURCE, gpu)

    def _scrape_state(self, reason: str, message: str) -> None:
        previous, self._scrape_reason = self._scrape_reason, reason
        if reason == previous or self.required:  # required: the scheduler logs it
            return
        if reason:
            log.warning("dcgm_exporter_unavailable", url=self.shown, reason=reason, error=message)
        elif previous != "pending":
            log.info("dcgm_exporter_recovered", url=self.shown, after=previous)

    def _gpu_state(self, device: Device, reason: str) -> None:
        if self.selector is not None:
            self.selector.report(SOURCE, device.gpu, not reason, reason)
        previous = self._gpu_reason.get(device.gpu)
        self._gpu_reason[device.gpu] = reason
        if previous == reason:
            return
        if reason:
            log.warning(
                "dcgm_exporter_gpu_unavailable", gpu=device.gpu, uuid=device.uuid, reason=reason
            )
        elif previous:
            log.info("dcgm_exporter_gpu_recovered", gpu=device.gpu, after=previous)


def parse_or_fail(body: bytes) -> Scrape:
    try:
        return parse(body.decode("utf-8", errors="replace"))
    except Exception as exc:  # the parser raises several types on malformed text
        raise _ScrapeError(
            "bad_response", f"not a Prometheus text exposition: {type(exc).__name__}: {exc}"
        ) from exc
