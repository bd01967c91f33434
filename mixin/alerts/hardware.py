"""Hardware alerts: XIDs, throttling, power brake, ECC, row remapping, a lost GPU. They fire at
once (or nearly): the event itself is the evidence."""

from __future__ import annotations

from typing import Any

from mixin import names as N
from mixin.alerts.common import (
    GPU_ARGS,
    GPU_MATCH,
    PODS_RANGE,
    AlertBuilder,
    AlertCtx,
    human,
    query_value,
)


def xid_critical(c: AlertCtx) -> dict[str, Any]:
    return c.alert(
        "GPUXidCritical", c.rec(N.GPU_XID, 'xid_class=~"hardware|firmware"') + " > 0",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} reported XID {{ $labels.xid }} "
        "({{ $labels.xid_class }})",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pods} reported XID "
               '{{ $labels.xid }}, class {{ $labels.xid_class }}, {{ $value | printf "%.0f" }} '
               "time(s) in the last ${window}.", window=human(c.cfg.windows.xid)))


def thermal_throttling(c: AlertCtx) -> dict[str, Any]:
    name = "GPUThermalThrottling"
    temperature = query_value(f"goodput_gpu_temperature_celsius{GPU_MATCH}", 'printf "%.0f"')
    return c.alert(
        name, f"{c.rec(N.GPU_THROTTLED)} > {c.th(name, 'max_throttled_ratio')}",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} is thermally throttled",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }} had its clocks held down for "
               "temperature {{ $value | humanizePercentage }} of the time over ${rate}; it is "
               "at ${temperature} °C.", temperature=temperature))


def power_brake(c: AlertCtx) -> dict[str, Any]:
    name = "GPUPowerBrake"
    return c.alert(
        name, f"{c.rec(N.GPU_POWER_BRAKE)} > {c.th(name, 'max_brake_ratio')}",
        "Hardware power brake slows GPU {{ $labels.gpu }} on {{ $labels.node }}",
        c.text("The hardware power brake held the clocks of GPU {{ $labels.gpu }} on "
               "{{ $labels.node }} down {{ $value | humanizePercentage }} of the time over "
               "${rate}: the system (power supply or baseboard) asserted it, not the GPU's own "
               "power limit."))


def ecc_uncorrectable(c: AlertCtx) -> dict[str, Any]:
    """Reads the recorded count (one hop from the counters, computed once a minute) rather
    than computing the guarded increase twice, inside and outside the pod join, at every
    evaluation. The rule keeps only GPUs with errors; the alert still says ``> 0`` itself, so
    the rule file alone says when it fires."""
    window = c.cfg.windows.ecc
    return c.alert(
        "GPUEccUncorrectable", c.q.with_pods(f"{c.rec(N.GPU_ECC)} > 0", ["type"]),
        "Uncorrectable ECC errors on GPU {{ $labels.gpu }} on {{ $labels.node }}",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pod} counted "
               '{{ $value | printf "%.0f" }} uncorrectable ECC error(s) in ${window}: results '
               "computed on it may be corrupt.", window=human(window)))


def row_remap_failure(c: AlertCtx) -> dict[str, Any]:
    return c.alert(
        "GPURowRemapFailure",
        f"max by ({c.q.gpu_by}) ({c.q.s('goodput_gpu_row_remap_failure')}) == 1",
        "Row remapping failed on GPU {{ $labels.gpu }} on {{ $labels.node }}",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} could not remap a failing memory row "
        "(value {{ $value }}): its memory has no spare rows left for that bank and the GPU "
        "should be replaced.")


def row_remap_pending(c: AlertCtx) -> dict[str, Any]:
    name = "GPURowRemapPending"
    return c.alert(
        name, f"max by ({c.q.gpu_by}) ({c.q.s('goodput_gpu_row_remap_pending')}) == 1",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} needs a reset to apply a row remap",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }} has a memory row remap pending "
               "(value {{ $value }}) for ${held}; it takes effect at the next GPU reset.",
               held=c.held(name)))


def gpu_lost(c: AlertCtx) -> dict[str, Any]:
    """Not joined to the pods: a GPU shared by two namespaces must make one notification; the
    description names every pod instead."""
    name = "GPULost"
    uuid = ('{{ with printf "goodput_gpu_info${match}" ${args} | query }} '
            "(uuid {{ (. | first).Labels.uuid }}){{ end }}")
    return c.alert(
        name, f"max by ({c.q.gpu_by}, reason) ({c.q.s('goodput_gpu_up')}) == 0",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} is unreachable ({{ $labels.reason }})",
        c.text("NVML could not read GPU {{ $labels.gpu }}" + uuid + " on {{ $labels.node }} "
               "for ${held}, reason {{ $labels.reason }}${range}; pod "
               "{{ .Labels.namespace }}/{{ .Labels.pod }} has lost it{{ end }}. Its other "
               "alerts are inhibited while this one fires.",
               match=GPU_MATCH, args=GPU_ARGS, held=c.held(name), range=PODS_RANGE))


HARDWARE: list[AlertBuilder] = [xid_critical, thermal_throttling, power_brake, ecc_uncorrectable,
            row_remap_failure, row_remap_pending, gpu_lost]
