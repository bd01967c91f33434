"""DCGM source: profiling counters (DCP fields) through a DCGM host engine, for GPUs before Hopper.

On Volta, Turing and Ampere the SM-active, tensor and DRAM counters exist only through DCGM's
profiling module. This source connects to the node's host engine (the one the GPU Operator
or dcgm-exporter runs; a second engine would fight it for the GPU's profiler), watches the DCP
fields by number on one DCGM group per GPU (so mixed SKUs never share a group), reads the
latest values every poll and publishes them as the same samples as GPM.

Failures are read from DCGM's status codes and shown per GPU as
``goodput_gpu_profiling_available{source="dcgm",reason=...} 0``: ``not_installed``,
``unreachable`` (host engine gone), ``not_loaded`` (profiling module missing), ``no_permission``
(engine not root / no SYS_ADMIN), ``locked`` (Nsight or another profiler owns the counters),
``incompatible`` (field groups that cannot be watched together), ``unsupported``, ``no_data``.
Each is logged once on change and retried with backoff, so the source recovers by itself.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from exporter.readings import Device, ProfilingReading, ProfilingStatus, ProfilingWindow
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.profiling.dcgm_bindings import (
    CONNECTION_CODES,
    SHRINK_CODES,
    BindingsNotFound,
    DcgmBindings,
    code_name,
    codes,
    error_code,
    load_bindings,
    reason_for,
)
from exporter.sources.profiling.fields import (
    CUMULATIVE_FIELDS,
    MMA_CYCLES_ACTIVE_TOTAL,
    PCIE_RX_BYTES_TOTAL,
    PCIE_TX_BYTES_TOTAL,
    RATE_FIELDS,
    RATIO_FIELDS,
    SM_ACTIVE_FIELD,
    SM_CYCLES_ACTIVE_TOTAL,
    SM_CYCLES_ELAPSED_TOTAL,
    build_window,
    normalise_uuid,
)
from exporter.sources.profiling.integrator import ProfilingIntegrator
from exporter.sources.profiling.select import ProfilingSelector

log = structlog.get_logger("dcgm")

SOURCE = "dcgm"

ALL_FIELDS = tuple(sorted((*RATIO_FIELDS, *RATE_FIELDS)))
# Tried in order when DCGM refuses a set (multi-pass, unsupported field, ...).
FIELD_SETS: tuple[tuple[int, ...], ...] = (
    ALL_FIELDS,
    (1001, 1002, 1003, 1004, 1005, 1009, 1010, 1011, 1012),
    (1002, 1004, 1005),
    (1002,),
)
MAX_BACKOFF = 60.0
GRACE_POLLS = 3  # blank polls right after a watch before calling it no_data
# When several fields fail differently, the most telling reason wins.
REASON_ORDER = (
    "no_permission",
    "not_loaded",
    "locked",
    "incompatible",
    "gpu_lost",
    "unsupported",
    "unreachable",
    "error",
    "no_data",
)


@dataclass(frozen=True)
class HostEngineAddress:
    kind: str  # tcp | unix | embedded
    address: str = ""

    @classmethod
    def parse(cls, value: str) -> HostEngineAddress:
        value = value.strip()
        if value == "embedded":
            return cls("embedded")
        if value.startswith("unix://"):
            return cls("unix", value.removeprefix("unix://"))
        if value.startswith("/"):
            return cls("unix", value)
        return cls("tcp", value.removeprefix("tcp://"))

    def __str__(self) -> str:
        return (
            "embedded host engine" if self.kind == "embedded" else f"{self.kind}://{self.address}"
        )


class _Down(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _GpuState:
    dcgm_id: int | None = None
    group: Any = None
    fields: tuple[int, ...] = ()
    cumulative: tuple[int, ...] = ()
    reason: str = "pending"
    retry_at: float = 0.0
    backoff: float = 0.0
    polls_since_watch: int = 0
    last_ts: int = 0
    last_cumulative: dict[int, float] = field(default_factory=dict)
    last: ProfilingStatus | None = None


@dataclass
class _Value:
    value: float | None
    reason: str
    ts: int


class DcgmSource(BlockingSource):
    name = SOURCE
    gpu_poll = True

    def __init__(
        self,
        inventory: Callable[[], tuple[Device, ...]],
        host_engine: str = "localhost:5555",
        *,
        interval: float = 1.0,
        connect_timeout: float = 2.0,
        bindings_path: str = "",
        library_path: str = "",
        selector: ProfilingSelector | None = None,
        required: bool = False,
        integrator: ProfilingIntegrator | None = None,
        loader: Callable[[str], DcgmBindings] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        super().__init__()
        self.inventory = inventory
        self.address = HostEngineAddress.parse(host_engine)
        self.connect_timeout = connect_timeout
        self.bindings_path = bindings_path
        self.library_path = library_path
        self.selector = selector
        # Required (--profiling=dcgm): an unusable DCGM fails the source. Optional (auto): it is
        # a normal state on nodes without DCGM, so the source stays up and logs it itself.
        self.required = required
        self._loader = loader or (lambda path: load_bindings(path))
        self._clock = clock
        self._b: DcgmBindings | None = None
        self._handle: Any = None
        self._ids: dict[str, int] = {}
        self._field_groups: dict[tuple[int, ...], Any] = {}
        self._states: dict[str, _GpuState] = {}
        self._integrator = integrator or ProfilingIntegrator()
        self._names = itertools.count()
        self._down_reason = ""
        self._down_error = ""
        self._retry_at = 0.0
        self._backoff = 0.0

    # lifecycle ---------------------------------------------------------------------------------
    def shutdown(self) -> None:
        self._disconnect()

    def poll_blocking(self) -> SourceResult:
        devices = self._wanted()
        if not devices:
            return SourceResult(source=SOURCE)  # GPM (or nothing) covers every GPU: stay idle
        now = self._clock()
        if self._handle is None and now >= self._retry_at:
            try:
                self._connect()
            except _Down as exc:
                self._went_down(exc.reason, str(exc), now)
        if self._handle is None:
            return self._down_result(devices)
        try:
            return self._poll(devices, now)
        except _Down as exc:
            self._disconnect()
            self._went_down(exc.reason, str(exc), now)
            return self._down_result(devices)

    def _wanted(self) -> list[Device]:
        out = []
        for device in self.inventory():
            if not device.uuid:
                continue
            if self.selector is not None and not self.selector.should_poll(SOURCE, device.gpu):
                continue
            out.append(device)
        return out

    # connection --------------------------------------------------------------------------------
    def _connect(self) -> None:
        if self._b is None:
            try:
                self._b = self._loader(self.bindings_path)
            except BindingsNotFound as exc:
                raise _Down("not_installed", str(exc)) from exc
        b = self._b
        try:
            b.structs._dcgmInit(self.library_path or None)
            b.agent.dcgmInit()
            self._handle = self._open_handle(b)
            self._ids = self._discover(b)
        except b.structs.DCGMError as exc:
            self._disconnect()
            code = error_code(exc)
            reason = reason_for(b.structs, code) if code is not None else "error"
            if reason in ("error", "no_data"):
                reason = "unreachable"
            raise _Down(reason, f"DCGM {self.address}: {exc} ({_name(b, code)})") from exc
        except Exception as exc:  # bindings that do not match libdcgm, and the like
            self._disconnect()
            raise _Down("error", f"DCGM {self.address}: {type(exc).__name__}: {exc}") from exc
        if self._down_reason and not self.required:
            log.info("dcgm_recovered", after=self._down_reason)
        self._down_reason = self._down_error = ""
        self._backoff = 0.0
        log.info(
            "dcgm_connected", host_engine=str(self.address), bindings=b.path, gpus=len(self._ids)
        )

    def _open_handle(self, b: DcgmBindings) -> Any:
        s, agent = b.structs, b.agent
        if self.address.kind == "embedded":
            return agent.dcgmStartEmbedded(s.DCGM_OPERATION_MODE_AUTO)
        timeout_ms = int(self.connect_timeout * 1000)
        if hasattr(agent, "dcgmConnect_v3") and hasattr(s, "c_dcgmConnectV3Params_v1"):
            params = s.c_dcgmConnectV3Params_v1()
            params.version = s.c_dcgmConnectV3Params_version
            params.persistAfterDisconnect = 0  # the engine drops our watches when we go
            params.timeoutMs = timeout_ms
            return agent.dcgmConnect_v3(f"{self.address.kind}://{self.address.address}", params)
        params = s.c_dcgmConnectV2Params_v2()
        params.version = s.c_dcgmConnectV2Params_version
        params.persistAfterDisconnect = 0
        params.timeoutMs = timeout_ms
        params.addressIsUnixSocket = 1 if self.address.kind == "unix" else 0
        return agent.dcgmConnect_v2(self.address.address, params)

    def _discover(self, b: DcgmBindings) -> dict[str, int]:
        ids: dict[str, int] = {}
        for gpu_id in b.agent.dcgmGetAllSupportedDevices(self._handle):
            attrs = b.agent.dcgmGetDeviceAttributes(self._handle, gpu_id)
            ids[normalise_uuid(_text(attrs.identifiers.uuid))] = int(gpu_id)
        return ids

    def _disconnect(self) -> None:
        handle, self._handle = self._handle, None
        b = self._b
        if handle is not None and b is not None:
            try:
                if self.address.kind == "embedded":
                    b.agent.dcgmStopEmbedded(handle)
                else:
                    b.agent.dcgmDisconnect(handle)
            except Exception:  # the engine may already be gone; nothing to release then
                pass
        self._field_groups.clear()
        for state in self._states.values():  # keep reasons and counters; watches are gone
            state.group, state.fields, state.cumulative = None, (), ()
            state.last_ts, state.retry_at, state.backoff = 0, 0.0, 0.0
            state.last_cumulative.clear()

    def _went_down(self, reason: str, message: str, now: float) -> None:
        # When required, the scheduler logs the failed result once per (ok, reason) change.
        if not self.required and reason != self._down_reason:
            log.warning("dcgm_unavailable", reason=reason, error=message)
        self._down_reason, self._down_error = reason, message
        if reason == "not_installed":
            self._backoff = MAX_BACKOFF
        else:
            self._backoff = min(max(self._backoff * 2, 1.0), MAX_BACKOFF)
        self._retry_at = now + self._backoff

    def _down_result(self, devices: Iterable[Device]) -> SourceResult:
        out: dict[str, ProfilingStatus] = {}
        for device in devices:
            if self.selector is not None:
                self.selector.report(SOURCE, device.gpu, False, self._down_reason)
                if not self.selector.should_publish(SOURCE, device.gpu):
                    continue
            out[device.gpu] = self._integrator.unavailable(device.gpu, SOURCE, self._down_reason)
        if not self.required:
            return SourceResult(
                source=SOURCE, reading=ProfilingReading(out), errors={self._down_reason: 1}
            )
        return SourceResult(
            source=SOURCE,
            ok=False,
            reason=self._down_reason,
            error=self._down_error,
            reading=ProfilingReading(out),
        )

    # polling -----------------------------------------------------------------------------------
    def _poll(self, devices: list[Device], now: float) -> SourceResult:
        for device in devices:
            state = self._states.setdefault(device.gpu, _GpuState())
            if state.group is None and now >= state.retry_at:
                self._watch(device, state, now)
        watched = [
            (d.gpu, self._states[d.gpu]) for d in devices if self._states[d.gpu].group is not None
        ]
        values = self._read(watched, now)
        out: dict[str, ProfilingStatus] = {}
        errors: dict[str, int] = {}
        for device in devices:
            state = self._states[device.gpu]
            status: ProfilingStatus | None
            if state.group is not None and state.dcgm_id is not None:
                status = self._evaluate(device.gpu, state, values.get(state.dcgm_id, {}), now)
            else:
                status = self._integrator.unavailable(device.gpu, SOURCE, state.reason)
            if state.reason == "pending" or status is None:
                continue
            if state.reason:
                errors[state.reason] = errors.get(state.reason, 0) + 1
            if self.selector is not None:
                self.selector.report(SOURCE, device.gpu, not state.reason, state.reason)
                if not self.selector.should_publish(SOURCE, device.gpu):
                    continue
            out[device.gpu] = status
        return SourceResult(source=SOURCE, reading=ProfilingReading(out), errors=errors)

    def _watch(self, device: Device, state: _GpuState, now: float) -> None:
        b = self._bindings()
        dcgm_id = self._dcgm_id(device, state, now)
        if dcgm_id is None:
            return
        state.dcgm_id = dcgm_id
        group = self._call(
            lambda: b.agent.dcgmGroupCreate(
                self._handle, b.structs.DCGM_GROUP_EMPTY, self._name("group")
            )
        )
        try:
            self._call(
                lambda: b.agent.dcgmGroupAddEntity(
                    self._handle, group, b.fields.DCGM_FE_GPU, dcgm_id
                )
            )
            watched, refused = self._watch_first_accepted(group)
        except BaseException:
            # The host engine keeps a group until it is destroyed, and it caps how many
            # exist: a failure here must not leave one behind per retry.
            with contextlib.suppress(Exception):
                self._destroy_group(group)
            raise
        if not watched:
            self._destroy_group(group)
            self._refused(device, state, dcgm_id, refused, now)
            return
        if refused:
            log.info(
                "dcgm_fields_reduced",
                gpu=device.gpu,
                watching=list(watched),
                refused=_name(b, error_code(refused[0][1])),
            )
        state.group, state.fields, state.polls_since_watch = group, watched, 0
        state.cumulative = ()
        try:
            self._watch_fields(group, CUMULATIVE_FIELDS)
            state.cumulative = CUMULATIVE_FIELDS
        except b.structs.DCGMError as exc:  # older DCGM or pre-Hopper: gauges only
            self._raise_if_connection(exc)

    def _dcgm_id(self, device: Device, state: _GpuState, now: float) -> int | None:
        """DCGM's id of ``device``, or None (its state says why, retried after the longest
        backoff) for a MIG instance or a GPU DCGM does not list."""
        if device.is_mig:
            why = ("MIG instances are not read through DCGM by this exporter "
                   "(use dcgm-exporter or GPM)")
        elif (dcgm_id := self._ids.get(normalise_uuid(device.uuid))) is not None:
            return dcgm_id
        else:
            why = f"GPU {device.uuid} is not among DCGM's supported devices"
        self._set(device.gpu, state, "unsupported", why)
        state.retry_at = now + MAX_BACKOFF
        return None

    def _refused(
        self,
        device: Device,
        state: _GpuState,
        dcgm_id: int,
        refused: list[tuple[tuple[int, ...], BaseException]],
        now: float,
    ) -> None:
        """Every field set was refused: say why (``incompatible`` when the sets failed in
        different ways) and back off."""
        b = self._bindings()
        last = refused[-1][1]
        code = error_code(last)
        reason = reason_for(b.structs, code) if code is not None else "error"
        if (
            reason == "unsupported"
            and len(refused) == len(FIELD_SETS)
            and any(error_code(e) != code for _, e in refused)
        ):
            reason = "incompatible"
        self._set(
            device.gpu,
            state,
            reason,
            f"watching profiling fields on DCGM GPU {dcgm_id}: {last} ({_name(b, code)})",
        )
        state.retry_at = now + self._next_backoff(state)

    def _watch_first_accepted(
        self, group: Any
    ) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], BaseException]]]:
        """(the largest field set the engine watches, the sets it refused before it)."""
        b = self._bindings()
        refused: list[tuple[tuple[int, ...], BaseException]] = []
        shrink = codes(b.structs, SHRINK_CODES)
        for field_set in FIELD_SETS:
            try:
                self._watch_fields(group, field_set)
            except b.structs.DCGMError as exc:
                self._raise_if_connection(exc)
                refused.append((field_set, exc))
                if error_code(exc) in shrink:
                    continue
                break
            return field_set, refused
        return (), refused

    def _watch_fields(self, group: Any, field_ids: tuple[int, ...]) -> None:
        b = self._bindings()
        if field_ids not in self._field_groups:
            self._field_groups[field_ids] = b.agent.dcgmFieldGroupCreate(
                self._handle, list(field_ids), self._name("fields")
            )
        update_us = int(self.interval * 1_000_000)
        keep_age = max(10.0, 5 * self.interval)
        b.agent.dcgmWatchFields(
            self._handle, group, self._field_groups[field_ids], update_us, keep_age, 0
        )

    def _read(
        self, watched: list[tuple[str, _GpuState]], now: float
    ) -> dict[int, dict[int, _Value]]:
        if not watched:
            return {}
        b = self._bindings()
        field_ids = sorted({f for _, s in watched for f in (*s.fields, *s.cumulative)})
        entities = [
            b.structs.c_dcgmGroupEntityPair_t(b.fields.DCGM_FE_GPU, s.dcgm_id) for _, s in watched
        ]
        try:
            rows = b.agent.dcgmEntitiesGetLatestValues(self._handle, entities, field_ids, 0)
        except b.structs.DCGMError as exc:
            self._raise_if_connection(exc)
            code = error_code(exc)
            reason = reason_for(b.structs, code) if code is not None else "error"
            for gpu, state in watched:  # re-watch after backoff: the cause may be ours
                self._drop_watch(state)
                self._set(gpu, state, reason, f"reading profiling fields: {exc}")
                state.retry_at = now + self._next_backoff(state)
            return {}
        out: dict[int, dict[int, _Value]] = {}
        for fv in rows:
            out.setdefault(int(fv.entityId), {})[int(fv.fieldId)] = self._decode(fv)
        return out

    def _decode(self, fv: Any) -> _Value:
        b = self._bindings()
        ts = int(fv.ts)
        if fv.status != b.structs.DCGM_ST_OK:
            return _Value(None, reason_for(b.structs, int(fv.status)), ts)
        v = b.value
        if fv.fieldType == ord(b.fields.DCGM_FT_DOUBLE):
            raw: float = float(fv.value.dbl)
            blank, denied, unsupported = (
                v.DCGM_FP64_BLANK,
                v.DCGM_FP64_NOT_PERMISSIONED,
                v.DCGM_FP64_NOT_SUPPORTED,
            )
        elif fv.fieldType == ord(b.fields.DCGM_FT_INT64):
            raw = int(fv.value.i64)
            blank, denied, unsupported = (
                v.DCGM_INT64_BLANK,
                v.DCGM_INT64_NOT_PERMISSIONED,
                v.DCGM_INT64_NOT_SUPPORTED,
            )
        else:
            return _Value(None, "error", ts)
        if raw >= blank:
            reason = (
                "no_permission"
                if raw == denied
                else "unsupported"
                if raw == unsupported
                else "no_data"
            )
            return _Value(None, reason, ts)
        return _Value(float(raw), "", ts)

    def _evaluate(
        self, gpu: str, state: _GpuState, values: Mapping[int, _Value], now: float
    ) -> ProfilingStatus | None:
        state.polls_since_watch += 1
        gauges = {f: values[f] for f in state.fields if f in values}
        good = {f: v for f, v in gauges.items() if v.value is not None}
        if not good:
            reasons = {v.reason for v in gauges.values()} or {"no_data"}
            reason = next((r for r in REASON_ORDER if r in reasons), "error")
            if (
                reason == "no_data"
                and state.polls_since_watch <= GRACE_POLLS
                and state.reason == "pending"
            ):
                return None
            detail = (
                "no values from DCGM: profiling paused (dcgmProfPause, e.g. for Nsight), "
                "another profiler, or the module still starting"
                if reason == "no_data"
                else "DCGM returned no usable profiling values"
            )
            fresh = state.reason in ("", "pending")
            self._set(gpu, state, reason, detail)
            if fresh:
                state.retry_at = now + self._next_backoff(state)
            elif now >= state.retry_at:  # re-watch: the profiler may be free again
                self._drop_watch(state)
                state.retry_at = now + self._next_backoff(state)
            return self._integrator.unavailable(gpu, SOURCE, reason)
        primary = SM_ACTIVE_FIELD if SM_ACTIVE_FIELD in good else min(good)
        ts = good[primary].ts
        if ts == state.last_ts and state.last is not None:
            self._set(gpu, state, "", "")
            return state.last  # DCGM has not sampled again since the last poll
        gap = (ts - state.last_ts) / 1e6 if state.last_ts and ts > state.last_ts else 0.0
        ratios = {f: v.value for f, v in good.items() if v.value is not None}
        window = build_window(min(gap, self.interval) if gap else self.interval, ratios)
        window = self._apply_cumulative(state, values, gap, window)
        state.last_ts = ts
        state.backoff = 0.0
        status = self._integrator.window(gpu, SOURCE, window)
        state.last = status
        self._set(gpu, state, "", "")
        return status

    def _apply_cumulative(
        self, state: _GpuState, values: Mapping[int, _Value], gap: float, window: ProfilingWindow
    ) -> ProfilingWindow:
        """Exact ratios from monotonic cycle counters, when DCGM has them (4.6+)."""
        current: dict[int, float] = {}
        for field_id in state.cumulative:
            value = values[field_id].value if field_id in values else None
            if value is not None:
                current[field_id] = value
        previous, state.last_cumulative = state.last_cumulative, current
        if not gap or not current or not previous:
            return window

        def delta(field_id: int) -> float | None:
            now_v, old_v = current.get(field_id), previous.get(field_id)
            if now_v is None or old_v is None or now_v < old_v:
                return None  # absent, or reset under us
            return now_v - old_v

        elapsed = delta(SM_CYCLES_ELAPSED_TOTAL)
        changes: dict[str, Any] = {}
        if elapsed:
            sm, mma = delta(SM_CYCLES_ACTIVE_TOTAL), delta(MMA_CYCLES_ACTIVE_TOTAL)
            if sm is not None:
                changes["sm_active"] = sm / elapsed
            if mma is not None:
                changes["tensor_active"] = mma / elapsed
        tx, rx = delta(PCIE_TX_BYTES_TOTAL), delta(PCIE_RX_BYTES_TOTAL)
        if tx is not None and rx is not None:
            changes["pcie_bytes_per_second"] = (("rx", rx / gap), ("tx", tx / gap))
        if not changes:
            return window
        fields_ = {k: getattr(window, k) for k in ProfilingWindow.__dataclass_fields__}
        return ProfilingWindow(**{**fields_, **changes, "seconds": gap})

    # state and helpers -------------------------------------------------------------------------
    def _set(self, gpu: str, state: _GpuState, reason: str, detail: str) -> None:
        """Record ``gpu``'s state; log only when it changes (one line per change)."""
        previous = state.reason
        if not reason:
            state.backoff = 0.0
        state.reason = reason
        if reason == previous:
            return
        if reason:
            log.warning("dcgm_profiling_unavailable", gpu=gpu, reason=reason, error=detail)
        elif previous == "pending":
            log.info(
                "dcgm_profiling_active",
                gpu=gpu,
                fields=len(state.fields),
                cumulative=bool(state.cumulative),
            )
        else:
            log.info("dcgm_profiling_recovered", gpu=gpu, after=previous)

    def _next_backoff(self, state: _GpuState) -> float:
        state.backoff = min(max(state.backoff * 2, 1.0), MAX_BACKOFF)
        return state.backoff

    def _drop_watch(self, state: _GpuState) -> None:
        group, state.group = state.group, None
        state.fields, state.cumulative, state.last_ts = (), (), 0
        state.last_cumulative.clear()
        if group is not None:
            self._destroy_group(group)

    def _destroy_group(self, group: Any) -> None:
        b = self._bindings()
        try:
            b.agent.dcgmGroupDestroy(self._handle, group)  # also ends the group's watches
        except b.structs.DCGMError as exc:
            self._raise_if_connection(exc)

    def _call(self, fn: Callable[[], Any]) -> Any:
        b = self._bindings()
        try:
            return fn()
        except b.structs.DCGMError as exc:
            self._raise_if_connection(exc)
            raise _Down("error", f"DCGM {self.address}: {exc}") from exc

    def _raise_if_connection(self, exc: BaseException) -> None:
        b = self._bindings()
        code = error_code(exc)
        if code in codes(b.structs, CONNECTION_CODES):
            raise _Down(
                "unreachable",
                f"DCGM {self.address}: lost the host engine: {exc} ({_name(b, code)})",
            ) from exc

    def _bindings(self) -> DcgmBindings:
        assert self._b is not None
        return self._b

    def _name(self, kind: str) -> str:
        # Names must be unique within the host engine, which other clients share.
        return f"goodput_{os.getpid()}_{kind}_{next(self._names)}"


def _name(b: DcgmBindings, code: int | None) -> str:
    return code_name(b.structs, code) if code is not None else "no status code"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
