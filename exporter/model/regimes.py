"""The regimes, declared once: every reader of the vocabulary takes it from :data:`ALL`.

The model's rules (``core.classify``, the node step) name them through the constants below
and ask each one's properties (:data:`BY_NAME`: busy or quiet, a wall, what a waiting rank
shows, whether its hollow time is read or is data moving); the exposition
(``goodput_gpu_regime``), the node dashboard's state timeline (mixin/dashboards/node.py), the
GPUBusyButUnproductive alert (mixin/alerts/efficiency.py) and the views' few words (``top``,
the landing page) read :data:`ALL`. A new regime is one more constant and one more
:class:`Regime` here, the rule that yields it, its test and the regenerated files
(tests/test_regime_vocabulary.py lists them; docs/architecture.md says how, and
tests/test_recipes.py tries it).

Data only, importing nothing of the exporter, so the mixin can read it without loading the
daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

IDLE = "idle"
ALLOCATED_IDLE = "allocated_idle"
HOST_BOUND = "host_bound"
LAUNCH_BOUND = "launch_bound"
MEMORY_BOUND = "memory_bound"
COMPUTE_BOUND = "compute_bound"
COMM_WAIT = "comm_wait"
TRANSFER_BOUND = "transfer_bound"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Regime:
    """One value of the ``regime`` label: what each reader shows of it, and every property
    of it that decides behaviour. The model, the mixin and the views read these; no module
    keeps a list of regime names (tests/test_declared_once.py holds it). The properties are
    required, so a new regime cannot get one wrong by omission."""

    name: str
    why: str
    """A few words for a GPU with nothing more pressing to say (``top``, the landing page)."""
    colour: str
    """Its colour on the node dashboard's state timeline."""
    timeline: int
    """Its number on that timeline. A new regime takes the next free one, so the others
    keep theirs (and the colours a user overrode on a copy of the panel stay right)."""
    thresholds: tuple[str, ...] = ()
    """The ``model.*`` settings that decide it (docs/settings.md). docs/efficiency.md names
    each one where it describes this regime's rule."""
    busy: bool = field(kw_only=True)
    """Kernels or copies keep the GPU busy, doing work or failing to. A busy window that
    makes tokens is conclusive: the debounce enters it at once from a quiet regime. A regime
    that is not busy is quiet (:attr:`quiet`)."""
    wall: bool = field(kw_only=True)
    """A wall the GPU runs into (a roofline's): a window at it is conclusive on its own."""
    can_wait: bool = field(kw_only=True)
    """A rank waiting on its peers can show it on its own (spinning in a collective reads
    launch_bound, a mostly-waiting rank with some GEMMs compute_bound): the job model counts
    such a rank's waiting (exporter/model/jobs.py)."""
    hollow_read: bool = field(kw_only=True)
    """Its kernel time less SM activity is its kernels' hollow time, what the job model
    reads as waiting and learns a job's own kernels from (a rank stalled on its host,
    allocated_idle, holds its peers back this way); not when nothing is read, nothing runs,
    or copies fill the kernel time."""
    moves_data: bool = field(kw_only=True)
    """Its kernel time without SM work is data moving (copies, a collective's spin), not
    waste: never hollow_busy, and the GPUBusyButUnproductive alert leaves it out."""

    @property
    def quiet(self) -> bool:
        """Nothing the model can see runs: one conclusive window leaves it at once, and
        its efficiency score is 0 (None while unknown)."""
        return not self.busy


ALL: tuple[Regime, ...] = (
    Regime(IDLE, "nothing allocated", "#808080", 0,
           ("idle_util_max", "bus_floor_bytes_per_second"),
           busy=False, wall=False, can_wait=False, hollow_read=False, moves_data=False),
    Regime(ALLOCATED_IDLE, "memory held, no kernels", "#FF9830", 1,
           ("idle_util_max", "allocated_memory_min_ratio", "bus_floor_bytes_per_second"),
           busy=False, wall=False, can_wait=False, hollow_read=True, moves_data=False),
    Regime(HOST_BOUND, "waits on the CPU", "#FADE2A", 2,
           ("host_low_duty_max", "host_util_max", "host_util_max_queued",
            "transfer_copy_time_min"),
           busy=True, wall=False, can_wait=True, hollow_read=True, moves_data=False),
    Regime(LAUNCH_BOUND, "tiny kernels", "#F2495C", 3, ("launch_sm_fill_max",),
           busy=True, wall=False, can_wait=True, hollow_read=True, moves_data=False),
    Regime(COMM_WAIT, "waits on a peer", "#8AB8FF", 7,
           ("comm_min_bytes_per_second", "comm_wait_share_min"),
           busy=True, wall=False, can_wait=True, hollow_read=True, moves_data=True),
    Regime(TRANSFER_BOUND, "busy copying over the bus", "#FFB357", 8,
           ("transfer_link_min_ratio", "transfer_copy_time_min"),
           busy=True, wall=False, can_wait=False, hollow_read=False, moves_data=True),
    Regime(MEMORY_BOUND, "DRAM bandwidth", "#5794F2", 4, ("memory_dram_min",),
           busy=True, wall=True, can_wait=True, hollow_read=True, moves_data=False),
    Regime(COMPUTE_BOUND, "tensor/SM busy", "#73BF69", 5,
           ("compute_tensor_min", "compute_fp_min"),
           busy=True, wall=True, can_wait=True, hollow_read=True, moves_data=False),
    Regime(UNKNOWN, "not enough data yet", "#B877D9", 6,
           ("stale_after_seconds", "silent_zero_util_min", "silent_zero_power_min_ratio"),
           busy=False, wall=False, can_wait=False, hollow_read=False, moves_data=False),
)
"""Every regime, in the order the exposition and the docs list them."""

NAMES: tuple[str, ...] = tuple(r.name for r in ALL)
BY_NAME: Mapping[str, Regime] = {r.name: r for r in ALL}
"""Each regime's declaration by name: what the rules ask of the regime they hold."""


def by_timeline() -> tuple[Regime, ...]:
    """The regimes in the order of their numbers on the node dashboard's state timeline."""
    return tuple(sorted(ALL, key=lambda r: r.timeline))
